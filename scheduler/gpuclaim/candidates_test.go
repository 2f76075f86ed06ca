package gpuclaim

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// PreFilter offers at most maxCandidateNodes nodes, the tightest fits; when they all fail
// another plugin's filter, PostFilter lifts the cap and the next attempt is offered every node
// that fits, and only after that a lower tier.
func TestPreFilterCapAndFallback(t *testing.T) {
	var nodes []*v1.Node
	for i := range 5 {
		nodes = append(nodes, ledgertest.Node(fmt.Sprintf("n%d", i), nil))
	}
	e := newTestEnvArgs(t, &Args{MaxCandidateNodes: ptr.To[int32](2)}, nodes,
		ledgertest.Claim("two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}, Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyPreferred, MinBandwidthGBps: 600}}))
	// Seven healthy GPUs each (ledgertest.SeedStatus): a fast island of 4 and a slow one of 3. n1 has the
	// tightest fast island (2 free, 5 on the node), n3 the fullest node (4 free, all fast).
	e.p.ledger.Add("x", "n1", []int{0, 1}, false, ledger.FromLease)
	e.p.ledger.Add("y", "n3", []int{4, 5, 6}, false, ledger.FromLease)
	pod := ledgertest.Pod("p", "two")

	offered := func() []string {
		t.Helper()
		res, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil)
		if !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		return slices.Sorted(slices.Values(res.NodeNames.UnsortedList()))
	}
	cs := framework.NewCycleState()
	res, st := e.p.PreFilter(t.Context(), cs, pod, nil)
	if !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if got := slices.Sorted(slices.Values(res.NodeNames.UnsortedList())); !slices.Equal(got, []string{"n1", "n3"}) {
		t.Fatalf("capped offer = %v, want the two tightest fits [n1 n3]", got)
	}
	// Both fail another plugin's filter: the pod goes straight back, uncapped.
	before := len(e.activated.pods)
	if _, st := e.p.PostFilter(t.Context(), cs, pod, nil); len(e.activated.pods) == before {
		t.Fatalf("PostFilter after a capped offer did not requeue the pod: %v", st)
	}
	if got := offered(); len(got) != 5 {
		t.Fatalf("offer after the capped one failed = %v, want all 5 nodes", got)
	}
	// Preemption's dry run on a capped offer refuses: nodes left out may have room without
	// evicting anyone, and the next attempt offers them. An uncapped attempt's dry run judges.
	ni := framework.NewNodeInfo()
	ni.SetNode(nodes[1])
	victim, _ := framework.NewPodInfo(ledgertest.Pod("victim", ""))
	dry := cs.Clone()
	if st := e.p.RemovePod(t.Context(), dry, pod, victim, ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := e.p.Filter(t.Context(), dry, pod, ni); st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("preemption dry run on a capped offer: %v, want UnschedulableAndUnresolvable", st)
	}
	uncapped := framework.NewCycleState()
	if _, st := e.p.PreFilter(t.Context(), uncapped, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	dry = uncapped.Clone()
	if st := e.p.RemovePod(t.Context(), dry, pod, victim, ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := e.p.Filter(t.Context(), dry, pod, ni); !st.IsSuccess() {
		t.Fatalf("preemption dry run on an uncapped offer: %v", st)
	}
	// A scheduled (or deleted) pod is forgotten: the next one starts capped again.
	e.p.relaxed.forget(pod.UID)
	if got := offered(); len(got) != 2 {
		t.Fatalf("offer after forget = %v, want 2 nodes", got)
	}
}

func TestMaxCandidateNodesArg(t *testing.T) {
	a := &Args{}
	SetDefaultsArgs(a)
	if *a.MaxCandidateNodes != DefaultMaxCandidateNodes {
		t.Fatalf("default maxCandidateNodes = %d", *a.MaxCandidateNodes)
	}
	a.MaxCandidateNodes = ptr.To[int32](-1)
	if err := ValidateArgs(nil, a); err == nil {
		t.Fatal("a negative maxCandidateNodes was accepted")
	}
}
