package gpuclaim

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	framework "k8s.io/kubernetes/pkg/scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// A node name of 64 to 253 characters is a valid node name but no label value, so its GPU
// leases could never be made: the node is refused up front with a reason, never tried and failed
// at every lock.
func TestNodeNameTooLongForALeaseLabel(t *testing.T) {
	long := strings.Repeat("n", 70)
	claim := ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	e := newTestEnv(t, []*v1.Node{ledgertest.Node(long, nil)}, claim)
	_, st, _ := e.schedule(t, ledgertest.Pod("alone", "c"))
	if st == nil || st.Code() == fwk.Error {
		t.Fatalf("pod whose only node has a %d-character name: %v; want it unschedulable, not an error retried forever", len(long), st)
	}
	// Filter says why (preemption's dry runs and other offers reach it).
	cs := framework.NewCycleState()
	if _, st := e.p.PreFilter(t.Context(), cs, ledgertest.Pod("probe", "c"), nil); st.Code() == fwk.Error {
		t.Fatal(st)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(ledgertest.Node(long, nil))
	if st := e.p.Filter(t.Context(), cs, ledgertest.Pod("probe", "c"), ni); st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "longer than 63 characters") {
		t.Errorf("Filter on the long-named node: %v", st)
	}

	// Beside a node with a short name, the pod lands there.
	e = newTestEnv(t, []*v1.Node{ledgertest.Node(long, nil), ledgertest.Node("short", nil)}, claim)
	for i := range 3 {
		pod := ledgertest.Pod("p"+string(rune('a'+i)), "c")
		if i > 0 {
			// One claim serves one pod: each attempt gets its own claim.
			c := claim.DeepCopy()
			c.Name = pod.Name
			createClaimStatusLess(t, e, c)
			pod.Annotations[apiv1.AnnotationClaim] = c.Name
		}
		got, st, _ := e.schedule(t, pod)
		if st != nil || got != "short" {
			t.Fatalf("pod %s: node %q, %v; want node short", pod.Name, got, st)
		}
	}
}
