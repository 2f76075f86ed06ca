package gpuclaim

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	framework "k8s.io/kubernetes/pkg/scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func gpuLease(node string, id int, holder string) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-scheduler", Name: "gpu-" + node + "-" + strconv.Itoa(id),
			Labels: map[string]string{apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: strconv.Itoa(id)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

func TestDryRunSummary(t *testing.T) {
	now := time.Now()
	a100 := map[string]string{"gpu-type": "a100"}
	snap := &Snapshot{
		Nodes: []v1.Node{*node("no-status", a100), *node("stale", a100), *node("held", a100), *node("free", a100),
			*node("free2", a100), *node("other", nil)},
		Statuses: []apiv1.GpuNodeStatus{*seedStatus("stale", now.Add(-time.Hour)), *seedStatus("held", now),
			*seedStatus("free", now), *seedStatus("free2", now), *seedStatus("other", now)},
		// held: GPUs 1 and 2 by a lease, 0 by a bound pod whose lease was lost.
		Leases: []coordinationv1.Lease{gpuLease("held", 1, "uid-x"), gpuLease("held", 2, "uid-x")},
		Pods: []v1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "y", UID: "uid-y",
			Annotations: map[string]string{apiv1.AnnotationAllocated: "held:0"}}, Spec: v1.PodSpec{NodeName: "held"}}},
	}
	claim := claimObj("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600},
		Selector: &apiv1.NodeSelector{MatchLabels: a100}})
	got := DryRun(claim, gpuPod("p", "c"), snap, now, 10*time.Minute)
	if got.Blocked != "" {
		t.Fatalf("Blocked = %q", got.Blocked)
	}
	want := []ReasonCount{
		{"fits", 2},
		{"needs 2 healthy free GPUs; node has 1 (1 not healthy, 3 held, 3 below 600 GB/s)", 1},
		{reasonSelector, 1},
		{reasonNoStatus, 1},
		{reasonStale, 1},
	}
	if s := got.Summary(); !reflect.DeepEqual(s, want) {
		t.Errorf("Summary =\n%v\nwant\n%v\nverdicts %+v", s, want, got.Nodes)
	}
	for _, v := range got.Nodes {
		if v.Node == "free" && !reflect.DeepEqual(v.GPUs, []int{0, 1}) {
			t.Errorf("free: would land on %v, want [0 1]", v.GPUs)
		}
	}

	// Claim-level refusals come before any node is judged.
	bad := claim.DeepCopy()
	bad.Spec.Devices.Count = 0
	if got := DryRun(bad, nil, snap, now, time.Minute); got.Blocked == "" || len(got.Nodes) != 0 {
		t.Errorf("invalid claim: %+v", got)
	}
	taken := claim.DeepCopy()
	taken.Status.PodUID, taken.Status.PodName = "uid-y", "y"
	if got := DryRun(taken, gpuPod("p", "c"), snap, now, time.Minute); got.Blocked != "GpuClaim ns/c is held by pod ns/y; one claim serves one pod at a time" {
		t.Errorf("claim held by another live pod: Blocked = %q", got.Blocked)
	}
}

// TestDryRunAgreesWithFilter schedules a pod with the plugin, then asks both the plugin's
// Filter and DryRun (over the objects the scheduling left in the API) about a second claim.
func TestDryRunAgreesWithFilter(t *testing.T) {
	a100 := map[string]string{"gpu-type": "a100"}
	spec := apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 3},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600},
		Selector: &apiv1.NodeSelector{MatchLabels: a100}}
	nodes := []*v1.Node{node("a", nil), node("b", a100), node("c", a100)}
	e := newTestEnv(t, nodes, claimObj("first", spec), claimObj("second", spec))
	if _, st, _ := e.schedule(t, gpuPod("p", "first")); st != nil {
		t.Fatalf("first pod: %v", st)
	}

	ctx := t.Context()
	snap := &Snapshot{}
	for _, n := range nodes {
		snap.Nodes = append(snap.Nodes, *n)
	}
	statuses, _ := e.gpu.GpuV1().GpuNodeStatuses().List(ctx, metav1.ListOptions{})
	snap.Statuses = statuses.Items
	leases, _ := e.kube.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	snap.Leases = leases.Items
	if len(snap.Leases) != 3 {
		t.Fatalf("the first pod left %d leases, want 3", len(snap.Leases))
	}
	pod := gpuPod("q", "second")
	claim, _ := e.gpu.GpuV1().GpuClaims("ns").Get(ctx, "second", metav1.GetOptions{})
	got := DryRun(claim, pod, snap, e.clock.Now(), 10*time.Minute)

	cs := framework.NewCycleState()
	_, _ = e.p.PreFilter(ctx, cs, pod, nil)
	fits := 0
	for _, v := range got.Nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(nodes[map[string]int{"a": 0, "b": 1, "c": 2}[v.Node]])
		st := e.p.Filter(ctx, cs, pod, ni)
		if st.Message() != v.Reason {
			t.Errorf("node %s: Filter says %q, DryRun %q", v.Node, st.Message(), v.Reason)
		}
		if v.Reason == "" {
			fits++
		}
	}
	if fits != 1 || len(got.Nodes) != 3 {
		t.Errorf("DryRun: %d of %d nodes fit, want 1 of 3: %+v", fits, len(got.Nodes), got.Nodes)
	}
}

// A pod covered by its scheduling map is judged as PreFilter judges it: only the entry's node,
// only the entry's GPUs; a malformed map or a missing node blocks it.
func TestDryRunFollowsTheSchedulingMap(t *testing.T) {
	now := time.Now()
	snap := &Snapshot{
		Nodes:    []v1.Node{*node("a", nil), *node("b", nil)},
		Statuses: []apiv1.GpuNodeStatus{*seedStatus("a", now), *seedStatus("b", now)},
		Leases:   []coordinationv1.Lease{gpuLease("b", 4, "uid-x")},
	}
	claim := claimObj("c0", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}})
	got := DryRun(claim, indexedPod(0), snap, now, time.Minute) // 0=b:4,6; GPU 4 is leased
	want := []NodeVerdict{{Node: "a", Reason: reasonNotPinned}, {Node: "b", Reason: reasonNoFit, Detail: "GPU 4 is held by another pod"}}
	if got.Blocked != "" || !reflect.DeepEqual(got.Nodes, want) {
		t.Fatalf("held entry: %+v, want %+v", got, want)
	}
	snap.Leases = nil
	if got := DryRun(claim, indexedPod(0), snap, now, time.Minute); !reflect.DeepEqual(got.Nodes[1].GPUs, []int{4, 6}) {
		t.Fatalf("free entry: %+v, want node b on GPUs 4,6", got.Nodes)
	}
	if got := DryRun(claimObj("c5", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}), indexedPod(5), snap, now, time.Minute); got.Blocked != "gpu-scheduling-map entry 5=gone:0,1 for pod ns/train-5-x7k9p (index 5): node gone does not exist" {
		t.Fatalf("missing node: Blocked = %q", got.Blocked)
	}
	bad := indexedPod(0)
	bad.Annotations[apiv1.AnnotationSchedulingMap] = "0=b"
	if got := DryRun(claim, bad, snap, now, time.Minute); got.Blocked == "" || len(got.Nodes) != 0 {
		t.Fatalf("malformed map: %+v", got)
	}
}
