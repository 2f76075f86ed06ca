package ledger

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// cands names candidates by their room: island/node GPUs left.

// cands names candidates by their room: island/node GPUs left.
func cands(rooms ...room) []Candidate {
	out := make([]Candidate, len(rooms))
	for i, r := range rooms {
		out[i] = Candidate{Name: fmt.Sprintf("n%d-%d/%d", i, r.island, r.node), room: r}
	}
	return out
}

func roomsOf(names []string, tiers ...[]Candidate) []room {
	var out []room
	for _, n := range names {
		for _, t := range tiers {
			for _, c := range t {
				if c.Name == n {
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
	worse := []Candidate{{"w1", room{1, 1}}, {"w2", room{7, 7}}}
	for _, tc := range []struct {
		name       string
		tiers      [][]Candidate
		strategy   allocator.Strategy
		limit      int
		want       []room
		wantCapped bool
	}{
		{"binpack takes the tightest islands, then the fullest nodes", [][]Candidate{best}, allocator.Binpack, 4, []room{{1, 1}, {2, 2}, {2, 3}, {2, 3}}, true},
		{"ties cut at the limit", [][]Candidate{best}, allocator.Binpack, 3, []room{{1, 1}, {2, 2}, {2, 3}}, true},
		// A tight island beats a fuller node: {2, 8} before {4, 5}.
		{"island before node", [][]Candidate{best}, allocator.Binpack, 5, []room{{1, 1}, {2, 2}, {2, 3}, {2, 3}, {2, 8}}, true},
		{"spread takes the emptiest nodes", [][]Candidate{best}, allocator.SpreadNodes, 3, []room{{2, 8}, {8, 8}, {8, 8}}, true},
		{"under the limit every node", [][]Candidate{best}, allocator.Binpack, 8, all, false},
		{"no cap", [][]Candidate{best}, allocator.Binpack, 0, all, false},
		{"strategies the ledger cannot rank are not capped", [][]Candidate{best}, allocator.RoundRobin, 2, all, false},
		{"least-utilized is not capped", [][]Candidate{best}, allocator.LeastUtilized, 2, all, false},
		// The better tier is taken whole before any node of the worse one, even a tighter node.
		{"better tier first", [][]Candidate{best, worse}, allocator.Binpack, 9, append([]room{{1, 1}}, all...), true},
		{"better tier fills the limit", [][]Candidate{best, worse}, allocator.Binpack, 2, []room{{1, 1}, {2, 2}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, capped := PickCandidates(tc.tiers, tc.strategy, tc.limit)
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
	got, _ := PickCandidates([][]Candidate{best, worse}, allocator.Binpack, 9)
	if !slices.Contains(got, "w1") || slices.Contains(got, "w2") {
		t.Errorf("the limit's last place should go to the tighter node of the worse tier: %v", got)
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
	l := New()
	l.SetStatus(islandStatus("dgx-with-quad", 450, 8))
	l.SetStatus(islandStatus("pairs-half-used-pair", 300, 2, 2, 2, 2))
	l.SetStatus(islandStatus("pairs-empty", 300, 2, 2, 2, 2))
	l.Add("quad", "dgx-with-quad", []int{0, 1, 2, 3}, false, FromLease)
	l.Add("single", "pairs-half-used-pair", []int{0}, false, FromLease)
	req := allocator.Request{Count: 1, Policy: allocator.Contiguous, Topology: allocator.Preferred}

	scores := map[string]int{}
	for _, n := range []string{"dgx-with-quad", "pairs-half-used-pair", "pairs-empty"} {
		node, _ := l.NodeView(n)
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

	byFit, _ := l.Candidates(&req, time.Now().Add(-time.Minute), func(string) bool { return true })
	defer ReleaseCandidates(byFit)
	var tiers [][]Candidate
	for f := FitIslandBandwidth; f >= FitNode; f-- {
		if len(byFit[f]) > 0 {
			tiers = append(tiers, byFit[f])
		}
	}
	for limit := 1; limit < len(byScore); limit++ {
		got, capped := PickCandidates(tiers, allocator.Binpack, limit)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(byScore[:limit]))
		if !capped || !slices.Equal(got, want) {
			t.Errorf("cap %d offers %v (capped %v), want the %d best-scored %v", limit, got, capped, limit, want)
		}
	}
}
