package gpuclaim

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	framework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

func gangClaim(name, gang string, count int32, size *int32) *apiv1.GpuClaim {
	return ledgertest.Claim(name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: count}, GangRef: gang, GangSize: size})
}

// createPod creates a pod and waits until the plugin's pod informer has it.
func (e *testEnv) createPod(t *testing.T, pod *v1.Pod) {
	t.Helper()
	if _, err := e.kube.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	eventuallyTrue(t, func() bool { _, ok := e.p.pods.get(pod.UID); return ok })
}

// setHealth marks every GPU of a node healthy or unhealthy and waits for the ledger to see it.
func (e *testEnv) setHealth(t *testing.T, node string, h apiv1.Health) {
	t.Helper()
	st, err := e.gpu.GpuV1().GpuNodeStatuses().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range st.Status.Devices {
		st.Status.Devices[i].Health = h
	}
	if _, err := e.gpu.GpuV1().GpuNodeStatuses().UpdateStatus(t.Context(), st, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		n, _ := e.p.ledger.NodeView(node)
		return n != nil && n.GPUs[0].Health == allocatorHealth(h)
	})
}

func wantStatus(t *testing.T, what string, st *fwk.Status, code fwk.Code, msg string) {
	t.Helper()
	if st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Fatalf("%s: %v %q, want %v with %q", what, st.Code(), st.Message(), code, msg)
	}
}

func TestGangPreFilterGates(t *testing.T) {
	nodes := []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil), ledgertest.Node("c", nil)}
	e := newTestEnv(t, nodes,
		gangClaim("w0", "train", 4, ptr.To[int32](3)),
		gangClaim("w1", "train", 4, ptr.To[int32](3)),
	)
	e.setHealth(t, "c", apiv1.Unhealthy)
	p0, p1, p2 := ledgertest.Pod("p0", "w0"), ledgertest.Pod("p1", "w1"), ledgertest.Pod("p2", "w2")
	e.createPod(t, p0)

	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), p0, nil)
	wantStatus(t, "two of three claims", st, fwk.Unschedulable, "gang ns/train has 2 of its 3 GpuClaims; its pods are scheduled together once all exist")
	eventuallyTrue(t, func() bool {
		c, _ := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "w0", metav1.GetOptions{})
		return c.Status.Phase == apiv1.ClaimPending && strings.Contains(c.Status.Message, "has 2 of its 3 GpuClaims")
	})

	// The third claim completes the gang's claims and sends the waiting member back.
	createClaimStatusLess(t, e, gangClaim("w2", "train", 4, ptr.To[int32](3)))
	eventuallyTrue(t, func() bool { return e.activated.has("ns/p0") })
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), p0, nil)
	wantStatus(t, "one pod of three", st, fwk.Unschedulable, "gang ns/train: 1 of its 3 GpuClaims have a pod; its pods are scheduled together once all do")

	// All pods, but with node c unhealthy only two 4-GPU members fit (one per node).
	e.createPod(t, p1)
	e.createPod(t, p2)
	cs := framework.NewCycleState()
	_, st = e.p.PreFilter(t.Context(), cs, p0, nil)
	wantStatus(t, "two nodes for three members", st, fwk.Unschedulable, "gang ns/train: the free GPUs cannot take all 3 pods still to place at once; none is placed until they can")
	// Preemption's dry run must not find room for one member of a gang held back.
	ni := framework.NewNodeInfo()
	ni.SetNode(nodes[0])
	wantStatus(t, "Filter of a held-back member", e.p.Filter(t.Context(), cs, p0, ni), fwk.UnschedulableAndUnresolvable, "gang ns/train: the free GPUs cannot take all 3")

	e.setHealth(t, "c", apiv1.Healthy)
	if _, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), p0, nil); !st.IsSuccess() {
		t.Fatalf("complete gang that fits: %v", st)
	}
}

func TestGangPermitWaitsForAllThenAllows(t *testing.T) {
	nodes := []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil)}
	e := newTestEnv(t, nodes,
		gangClaim("w0", "train", 4, nil), // no gangSize: the three claims are the gang
		gangClaim("w1", "train", 4, nil),
		gangClaim("w2", "train", 2, nil),
		ledgertest.Claim("solo", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}),
	)
	pods := []*v1.Pod{ledgertest.Pod("p0", "w0"), ledgertest.Pod("p1", "w1"), ledgertest.Pod("p2", "w2")}
	for _, p := range pods {
		e.createPod(t, p)
	}
	ctx := t.Context()
	done := make(chan *fwk.Status, len(pods))
	for i, pod := range pods {
		node, st, cs := e.reserve(t, pod)
		if !st.IsSuccess() {
			t.Fatalf("reserving %s: %v", pod.Name, st)
		}
		st = permit(e, cs, pod, node)
		if i < len(pods)-1 {
			wantStatus(t, "permit "+pod.Name, st, fwk.Wait, "waiting for the rest of gang ns/train ("+string(rune('1'+i))+" of 3 pods placed)")
			go func(pod *v1.Pod) { done <- e.fh.WaitOnPermit(ctx, pod) }(pod)
			continue
		}
		if !st.IsSuccess() {
			t.Fatalf("permit of the last member: %v", st)
		}
	}
	// The last member let the two waiting ones go.
	for range 2 {
		select {
		case st := <-done:
			if !st.IsSuccess() {
				t.Fatalf("waiting member: %v", st)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting members were never allowed")
		}
	}
	// A pod outside any gang is not held.
	solo := ledgertest.Pod("solo", "solo")
	e.createPod(t, solo)
	node, st, cs := e.reserve(t, solo)
	if !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := permit(e, cs, solo, node); !st.IsSuccess() {
		t.Fatalf("permit outside a gang: %v", st)
	}
}

func TestGangMemberFailureReleasesTheWaitingOthers(t *testing.T) {
	e := newTestEnvArgs(t, &Args{GangWaitSeconds: ptr.To[int32](2)}, []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil)},
		gangClaim("w0", "pair", 4, nil),
		gangClaim("w1", "pair", 4, nil),
		gangClaim("x0", "alone", 4, ptr.To[int32](2)),
		gangClaim("x1", "alone", 4, ptr.To[int32](2)),
	)
	ctx := t.Context()
	p0, p1 := ledgertest.Pod("p0", "w0"), ledgertest.Pod("p1", "w1")
	e.createPod(t, p0)
	e.createPod(t, p1)
	node0, st, cs0 := e.reserve(t, p0)
	if !st.IsSuccess() {
		t.Fatal(st)
	}
	wantStatus(t, "permit p0", permit(e, cs0, p0, node0), fwk.Wait, "(1 of 2 pods placed)")
	waited := make(chan *fwk.Status, 1)
	go func() { waited <- e.fh.WaitOnPermit(ctx, p0) }()

	// p1 is reserved, then fails (say, PreBind lost a lease race): Unreserve must release p0.
	node1, st, cs1 := e.reserve(t, p1)
	if !st.IsSuccess() {
		t.Fatal(st)
	}
	e.p.Unreserve(ctx, cs1, p1, node1)
	select {
	case st := <-waited:
		wantStatus(t, "waiting p0 after p1 failed", st, fwk.Unschedulable, "gang ns/pair: member pod ns/p1 was not placed; the gang is retried as a whole")
	case <-time.After(10 * time.Second):
		t.Fatal("p0 kept waiting after its gang mate failed")
	}
	e.p.Unreserve(ctx, cs0, p0, node0) // what the scheduler does for a rejected waiting pod
	if node, ids := e.p.ledger.HoldsOf(p0.UID); node != "" {
		t.Fatalf("p0 still holds GPUs %v on %s", ids, node)
	}

	// A member whose mates never come is released after gangWaitSeconds.
	q0, q1 := ledgertest.Pod("q0", "x0"), ledgertest.Pod("q1", "x1")
	e.createPod(t, q0)
	e.createPod(t, q1)
	node, st, cs := e.reserve(t, q0)
	if !st.IsSuccess() {
		t.Fatal(st)
	}
	wantStatus(t, "permit q0", permit(e, cs, q0, node), fwk.Wait, "gang ns/alone (1 of 2 pods placed)")
	st = e.fh.WaitOnPermit(context.Background(), q0)
	wantStatus(t, "q0 alone", st, fwk.Unschedulable, "timeout")
}

func allocatorHealth(h apiv1.Health) allocator.Health {
	if h == apiv1.Healthy {
		return allocator.Healthy
	}
	return allocator.Unhealthy
}

// permit runs Permit as the scheduler does: a pod told to wait is added to the waiting pods.
func permit(e *testEnv, cs fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	waits, st := e.fh.RunPermitPlugins(context.Background(), cs, pod, node)
	if st.IsWait() {
		e.fh.AddWaitingPod(pod, waits)
	}
	return st
}

// A member placed in Permit sends back the mates PreFilter turned away: they need room for one
// pod fewer now, and no node change may come to wake them.
func TestGangPermitWakesTurnedAwayMates(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil)},
		gangClaim("w0", "trio", 4, ptr.To[int32](3)),
		gangClaim("w1", "trio", 4, ptr.To[int32](3)),
		gangClaim("w2", "trio", 4, ptr.To[int32](3)),
	)
	p0, p1, p2 := ledgertest.Pod("p0", "w0"), ledgertest.Pod("p1", "w1"), ledgertest.Pod("p2", "w2")
	for _, p := range []*v1.Pod{p0, p1, p2} {
		e.createPod(t, p)
	}
	// Node b's GPUs are out: the three 4-GPU members cannot all be placed, so p1 is turned away.
	e.setHealth(t, "b", apiv1.Unhealthy)
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), p1, nil)
	wantStatus(t, "p1 with one node", st, fwk.Unschedulable, "the free GPUs cannot take all 3 pods still to place at once")
	e.setHealth(t, "b", apiv1.Healthy)
	// p0 and p2 are placed (both on one node, say); p1, turned away before, must be woken.
	for _, p := range []*v1.Pod{p0, p2} {
		node, st, cs := e.reserve(t, p)
		if !st.IsSuccess() {
			t.Fatalf("reserving %s: %v", p.Name, st)
		}
		e.activated.reset()
		wantStatus(t, "permit "+p.Name, permit(e, cs, p, node), fwk.Wait, "waiting for the rest of gang ns/trio")
		if !e.activated.has("ns/p1") {
			t.Fatalf("permit of %s did not wake p1", p.Name)
		}
		if e.activated.has("ns/" + p.Name) {
			t.Fatalf("permit of %s woke the pod itself", p.Name)
		}
	}
}
