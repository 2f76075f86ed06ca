package gpuclaim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// placeOneGPUPods schedules n pods of one GPU each, with the given node-strategy annotation
// ("" for none), and returns the nodes they went to in order.
func placeOneGPUPods(t *testing.T, nodes []*v1.Node, n int, strategy string) []string {
	t.Helper()
	var claims []runtime.Object
	for i := range n {
		claims = append(claims, ledgertest.Claim(fmt.Sprintf("c%d", i), apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	}
	e := newTestEnv(t, nodes, claims...)
	var got []string
	for i := range n {
		pod := ledgertest.Pod(fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i))
		if strategy != "" {
			pod.Annotations[apiv1.AnnotationNodeStrategy] = strategy
		}
		node, st, _ := e.schedule(t, pod)
		if st != nil {
			t.Fatalf("pod %d: %v", i, st)
		}
		got = append(got, node)
	}
	return got
}

func TestNodeStrategyPerPod(t *testing.T) {
	three := []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil), ledgertest.Node("c", nil)}
	// Each node has a free island of 3 (4 to 6) and one of 4 (0 to 3). Binpack fills islands,
	// then nodes: a's island of 3 first, then b's, rather than breaking a's whole island of 4
	// (the fuller node) and leaving 3 GPUs there that a 4-GPU claim could have had.
	t.Run("the plugin default (binpack) fills islands, then nodes", func(t *testing.T) {
		if got := placeOneGPUPods(t, three, 6, ""); !slices.Equal(got, []string{"a", "a", "a", "b", "b", "b"}) {
			t.Fatalf("placed on %v", got)
		}
	})
	t.Run("round-robin takes the nodes in turn", func(t *testing.T) {
		if got := placeOneGPUPods(t, three, 5, "round-robin"); !slices.Equal(got, []string{"a", "b", "c", "a", "b"}) {
			t.Fatalf("placed on %v", got)
		}
	})
	t.Run("spread keeps the nodes even", func(t *testing.T) {
		got := placeOneGPUPods(t, three, 6, "spread")
		count := map[string]int{}
		for _, n := range got {
			count[n]++
		}
		if !maps.Equal(count, map[string]int{"a": 2, "b": 2, "c": 2}) {
			t.Fatalf("placed on %v", got)
		}
	})
	t.Run("cost-aware takes the cheapest node, unlabelled last", func(t *testing.T) {
		nodes := []*v1.Node{
			ledgertest.Node("a", map[string]string{apiv1.LabelNodeCost: "3"}),
			ledgertest.Node("b", map[string]string{apiv1.LabelNodeCost: "0.5"}),
			ledgertest.Node("c", nil),
			ledgertest.Node("d", map[string]string{apiv1.LabelNodeCost: "not-a-number"}),
		}
		if got := placeOneGPUPods(t, nodes, 3, "cost-aware"); !slices.Equal(got, []string{"b", "b", "b"}) {
			t.Fatalf("placed on %v", got)
		}
	})
	t.Run("random follows the pod's own order", func(t *testing.T) {
		eight := make([]*v1.Node, 8)
		names := make([]string, 8)
		for i := range eight {
			names[i] = fmt.Sprintf("n%d", i)
			eight[i] = ledgertest.Node(names[i], nil)
		}
		got := placeOneGPUPods(t, eight, 6, "random")
		for i, n := range got {
			// Every node is empty or holds one 1-GPU pod: the strategy decides unless the
			// placement quality of a used node outweighs it, so check against the ranking.
			ranks := allocator.RandomScores(names, 0, string(ledgertest.Pod(fmt.Sprintf("p%d", i), "").UID))
			if ranks[n] < 50 {
				t.Errorf("pod %d went to %s, ranked %d of 100 for it (%v)", i, n, ranks[n], ranks)
			}
		}
		if distinct := len(slices.Compact(slices.Sorted(slices.Values(got)))); distinct < 3 {
			t.Errorf("6 random pods went to only %d nodes: %v", distinct, got)
		}
		if again := placeOneGPUPods(t, eight, 6, "random"); !slices.Equal(got, again) {
			t.Errorf("the same pods went to %v, then %v", got, again)
		}
	})
}

func TestNodeStrategyAnnotationRejected(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	pod := ledgertest.Pod("p", "c")
	pod.Annotations[apiv1.AnnotationNodeStrategy] = "cheapest"
	_, st, _ := e.schedule(t, pod)
	if st == nil || st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), `annotation gpu.scheduling/node-strategy: unknown node strategy "cheapest"`) {
		t.Fatalf("status %v", st)
	}
}

// A pod that asks for GPUs through a claim template and names no claim yet is held back, never
// scheduled as a pod without GPUs.
func TestTemplatedPodWithoutClaimWaits(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	pod := ledgertest.Pod("p", "")
	pod.Annotations[apiv1.AnnotationClaimTemplate] = "train-8x"
	_, st, _ := e.schedule(t, pod)
	if st == nil || st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "waiting for GpuClaim ns/p-train-8x to be made from GpuClaimTemplate train-8x") {
		t.Fatalf("status %v", st)
	}
}

// setUtilization writes utilisation and memory in use on every GPU of node's GpuNodeStatus, as
// the agent does, and waits until the plugin's informer has it.
func (e *testEnv) setUtilization(t *testing.T, node string, percent int32, memUsedMiB int64) {
	t.Helper()
	st, err := e.gpu.GpuV1().GpuNodeStatuses().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range st.Status.Devices {
		d := &st.Status.Devices[i]
		d.MemoryMiB = 80000
		d.UtilizationPercent, d.MemoryUsedMiB = ptr.To(percent), ptr.To(memUsedMiB)
	}
	if _, err := e.gpu.GpuV1().GpuNodeStatuses().UpdateStatus(t.Context(), st, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n, _ := e.p.ledger.NodeView(node)
		return n != nil && n.GPUs[0].UtilizationPercent == int(percent), nil
	})
	if err != nil {
		t.Fatalf("the plugin never saw node %s at %d%%", node, percent)
	}
}

// least-utilized follows what the agents report: the pod goes to the node whose GPUs are least
// busy, and elsewhere once that node reports busy; memory held counts as busy.
func TestLeastUtilizedFollowsTheAgentsReports(t *testing.T) {
	nodes := []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil), ledgertest.Node("c", nil)}
	var claims []runtime.Object
	for i := range 3 {
		claims = append(claims, ledgertest.Claim(fmt.Sprintf("c%d", i), apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	}
	e := newTestEnv(t, nodes, claims...)
	e.setUtilization(t, "a", 80, 40000)
	e.setUtilization(t, "b", 10, 8000)
	e.setUtilization(t, "c", 45, 20000)
	place := func(i int) string {
		t.Helper()
		pod := ledgertest.Pod(fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i))
		pod.Annotations[apiv1.AnnotationNodeStrategy] = string(allocator.LeastUtilized)
		n, st, _ := e.schedule(t, pod)
		if st != nil {
			t.Fatalf("pod %d: %v", i, st)
		}
		return n
	}
	if got := place(0); got != "b" {
		t.Fatalf("with a 80%%, b 10%%, c 45%% the pod went to %s, want b", got)
	}
	e.setUtilization(t, "b", 95, 70000)
	if got := place(1); got != "c" {
		t.Fatalf("with a 80%%, b 95%%, c 45%% the pod went to %s, want c", got)
	}
	// c at 20% utilisation but 90% of its memory held is busier than a at 50% with little memory.
	e.setUtilization(t, "c", 20, 72000)
	e.setUtilization(t, "a", 50, 4000)
	if got := place(2); got != "a" {
		t.Fatalf("with a 50%% (5%% memory), b 95%%, c 20%% (90%% memory) the pod went to %s, want a", got)
	}
}
