package gpuclaim

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// TestPackAroundDomains: under binpack, a pod outside any gang goes to a node outside every
// NVLink domain first, then into the fuller domain, though a tighter node waits in an emptier
// one; a fleet without domains is binpacked by node as before.
func TestPackAroundDomains(t *testing.T) {
	clique := func(name, d string) *v1.Node {
		return ledgertest.Node(name, map[string]string{apiv1.LabelGPUClique: d})
	}
	// Every node has 7 healthy GPUs. domA holds 4 of 14 (a-0), domB 2 of 14 (b-0, the tightest
	// node with room for 4).
	nodes := []*v1.Node{clique("a-0", "domA"), clique("a-1", "domA"), clique("b-0", "domB"), clique("b-1", "domB"), ledgertest.Node("x", nil)}
	claims := []*apiv1.GpuClaim{
		ledgertest.Claim("c0", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}}),
		ledgertest.Claim("c1", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}}),
	}
	setup := func(e *testEnv) {
		t.Helper()
		for _, h := range []struct {
			uid, node string
			n         int
		}{{"held-a", "a-0", 4}, {"held-b", "b-0", 2}} {
			if _, err := e.p.ledger.Reserve(types.UID("uid-"+h.uid), "ns/"+h.uid, h.node, allocator.Request{Count: h.n}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e := newTestEnv(t, nodes, claims[0], claims[1])
	setup(e)
	for i, want := range []string{"x", "a-1"} {
		pod := ledgertest.Pod("p"+claims[i].Name, claims[i].Name)
		e.createPod(t, pod)
		if node, st, _ := e.reserve(t, pod); !st.IsSuccess() || node != want {
			t.Fatalf("pod %d placed on %q (%v), want %s", i, node, st, want)
		}
	}

	// Without domain labels the same fleet is binpacked by node: the tightest node first.
	plain := []*v1.Node{ledgertest.Node("a-0", nil), ledgertest.Node("a-1", nil), ledgertest.Node("b-0", nil), ledgertest.Node("b-1", nil), ledgertest.Node("x", nil)}
	e = newTestEnv(t, plain, claims[0].DeepCopy())
	setup(e)
	pod := ledgertest.Pod("pc0", "c0")
	e.createPod(t, pod)
	if node, st, _ := e.reserve(t, pod); !st.IsSuccess() || node != "b-0" {
		t.Fatalf("without domains the pod was placed on %q (%v), want b-0", node, st)
	}
}
