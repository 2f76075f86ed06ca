package gpuclaim

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// cands names candidates by their room: island/node GPUs left.
func cands(rooms ...room) []candidate {
	out := make([]candidate, len(rooms))
	for i, r := range rooms {
		out[i] = candidate{name: fmt.Sprintf("n%d-%d/%d", i, r.island, r.node), room: r}
	}
	return out
}

func roomsOf(names []string, tiers ...[]candidate) []room {
	var out []room
	for _, n := range names {
		for _, t := range tiers {
			for _, c := range t {
				if c.name == n {
					out = append(out, c.room)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b room) int { return (a.island*100 + a.node) - (b.island*100 + b.node) })
	return out
}

func TestPickCandidates(t *testing.T) {
	best := cands(room{8, 8}, room{2, 3}, room{4, 5}, room{1, 1}, room{2, 8}, room{8, 8}, room{2, 2}, room{2, 3})
	all := []room{{1, 1}, {2, 2}, {2, 3}, {2, 3}, {2, 8}, {4, 5}, {8, 8}, {8, 8}}
	worse := []candidate{{"w1", room{1, 1}}, {"w2", room{7, 7}}}
	for _, tc := range []struct {
		name       string
		tiers      [][]candidate
		strategy   allocator.Strategy
		limit      int
		want       []room
		wantCapped bool
	}{
		{"binpack takes the tightest islands, then the fullest nodes", [][]candidate{best}, allocator.Binpack, 4, []room{{1, 1}, {2, 2}, {2, 3}, {2, 3}}, true},
		{"ties cut at the limit", [][]candidate{best}, allocator.Binpack, 3, []room{{1, 1}, {2, 2}, {2, 3}}, true},
		// A tight island beats a fuller node: {2, 8} before {4, 5}.
		{"island before node", [][]candidate{best}, allocator.Binpack, 5, []room{{1, 1}, {2, 2}, {2, 3}, {2, 3}, {2, 8}}, true},
		{"spread takes the emptiest nodes", [][]candidate{best}, allocator.SpreadNodes, 3, []room{{2, 8}, {8, 8}, {8, 8}}, true},
		{"under the limit every node", [][]candidate{best}, allocator.Binpack, 8, all, false},
		{"no cap", [][]candidate{best}, allocator.Binpack, 0, all, false},
		{"strategies the ledger cannot rank are not capped", [][]candidate{best}, allocator.RoundRobin, 2, all, false},
		{"least-utilized is not capped", [][]candidate{best}, allocator.LeastUtilized, 2, all, false},
		// The better tier is taken whole before any node of the worse one, even a tighter node.
		{"better tier first", [][]candidate{best, worse}, allocator.Binpack, 9, append([]room{{1, 1}}, all...), true},
		{"better tier fills the limit", [][]candidate{best, worse}, allocator.Binpack, 2, []room{{1, 1}, {2, 2}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, capped := pickCandidates(tc.tiers, tc.strategy, tc.limit)
			if capped != tc.wantCapped {
				t.Errorf("capped = %v, want %v", capped, tc.wantCapped)
			}
			if r := roomsOf(got, tc.tiers...); !slices.Equal(r, tc.want) {
				t.Errorf("offered nodes with room %v (%v), want %v", r, got, tc.want)
			}
			if len(got) != len(slices.Compact(slices.Sorted(slices.Values(got)))) {
				t.Errorf("a node offered twice: %v", got)
			}
		})
	}
	// A limit falling in the worse tier takes the tightest of that tier.
	got, _ := pickCandidates([][]candidate{best, worse}, allocator.Binpack, 9)
	if !slices.Contains(got, "w1") || slices.Contains(got, "w2") {
		t.Errorf("the limit's last place should go to the tighter node of the worse tier: %v", got)
	}
}

// PreFilter offers at most maxCandidateNodes nodes, the tightest fits; when they all fail
// another plugin's filter, PostFilter lifts the cap and the next attempt is offered every node
// that fits, and only after that a lower tier.
func TestPreFilterCapAndFallback(t *testing.T) {
	var nodes []*v1.Node
	for i := range 5 {
		nodes = append(nodes, node(fmt.Sprintf("n%d", i), nil))
	}
	e := newTestEnvArgs(t, &Args{MaxCandidateNodes: ptr.To[int32](2)}, nodes,
		claimObj("two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}, Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyPreferred, MinBandwidthGBps: 600}}))
	// Seven healthy GPUs each (seedStatus): a fast island of 4 and a slow one of 3. n1 has the
	// tightest fast island (2 free, 5 on the node), n3 the fullest node (4 free, all fast).
	e.p.ledger.add("x", "n1", []int{0, 1}, false, fromLease)
	e.p.ledger.add("y", "n3", []int{4, 5, 6}, false, fromLease)
	pod := gpuPod("p", "two")

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
	victim, _ := framework.NewPodInfo(gpuPod("victim", ""))
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

// islandStatus is a GpuNodeStatus whose healthy GPUs form the given islands, in ID order.
func islandStatus(node string, bandwidthGBps int, islandSizes ...int) *apiv1.GpuNodeStatus {
	s := &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: apiv1.GpuNodeStatusSpec{NodeName: node}}
	id := int32(0)
	for i, size := range islandSizes {
		for range size {
			s.Status.Devices = append(s.Status.Devices, apiv1.Device{ID: id, Health: apiv1.Healthy, Island: fmt.Sprintf("island-%d", i), BandwidthGBps: int32(bandwidthGBps)})
			id++
		}
	}
	s.Status.LastHeartbeatTime = metav1.NewTime(time.Now())
	return s
}

// PreFilter's binpack cap offers nodes in the order the Score's binpack ranks them: island best
// fit first, then the fuller node. quickstart's case: a single is offered (and scored) the free
// half of an NVLink pair first, a whole pair next, and only then the DGX already holding a
// quad, whose island a later quad could still have used.
func TestBinpackCapRanksAsScoreDoes(t *testing.T) {
	l := newLedger()
	l.setStatus(islandStatus("dgx-with-quad", 450, 8))
	l.setStatus(islandStatus("pairs-half-used-pair", 300, 2, 2, 2, 2))
	l.setStatus(islandStatus("pairs-empty", 300, 2, 2, 2, 2))
	l.add("quad", "dgx-with-quad", []int{0, 1, 2, 3}, false, fromLease)
	l.add("single", "pairs-half-used-pair", []int{0}, false, fromLease)
	req := allocator.Request{Count: 1, Policy: allocator.Contiguous, Topology: allocator.Preferred}

	scores := map[string]int{}
	for _, n := range []string{"dgx-with-quad", "pairs-half-used-pair", "pairs-empty"} {
		node, _ := l.snapshot(n)
		res, err := allocator.Allocate(node, req)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		scores[n] = allocator.NodeScore(node, res, allocator.Binpack)
	}
	byScore := slices.Collect(maps.Keys(scores))
	slices.SortFunc(byScore, func(a, b string) int { return scores[b] - scores[a] })
	if want := []string{"pairs-half-used-pair", "pairs-empty", "dgx-with-quad"}; !slices.Equal(byScore, want) {
		t.Fatalf("binpack scores %v rank %v, want %v", scores, byScore, want)
	}

	byFit, _ := l.candidates(&req, time.Now().Add(-time.Minute), func(string) bool { return true })
	defer releaseCandidates(byFit)
	var tiers [][]candidate
	for f := fitIslandBandwidth; f >= fitNode; f-- {
		if len(byFit[f]) > 0 {
			tiers = append(tiers, byFit[f])
		}
	}
	for limit := 1; limit < len(byScore); limit++ {
		got, capped := pickCandidates(tiers, allocator.Binpack, limit)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(byScore[:limit]))
		if !capped || !slices.Equal(got, want) {
			t.Errorf("cap %d offers %v (capped %v), want the %d best-scored %v", limit, got, capped, limit, want)
		}
	}
}
