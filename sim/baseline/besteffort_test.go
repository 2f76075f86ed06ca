package baseline

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The test topologies and cases below are go-gpuallocator's own (gpuallocator/common_test.go
// and besteffort_test.go): the same nodes, the same requests, the same expected picks.

type p2p struct {
	a, b  int
	level Level
}

type nv struct{ a, b, links int }

func graph(t *testing.T, n int, pcie []p2p, nvlinks []nv) *Graph {
	t.Helper()
	g := NewGraph(n)
	for _, l := range pcie {
		if err := g.SetPCIe(l.a, l.b, l.level); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range nvlinks {
		g.AddNVLinks(l.a, l.b, l.links)
	}
	return g
}

// dgx1PCIe is the DGX-1's PCIe tree with the given pairs on one switch; the other pair of the
// same socket meets at the host bridge, and the sockets meet across the CPUs.
func dgx1PCIe(switchPairs [][2]int) []p2p {
	var out []p2p
	single := map[[2]int]bool{}
	for _, p := range switchPairs {
		single[p] = true
	}
	for a := range 8 {
		for b := a + 1; b < 8; b++ {
			lvl := LevelSystem
			switch {
			case single[[2]int{a, b}]:
				lvl = LevelSingle
			case a/4 == b/4:
				lvl = LevelHostBridge
			}
			out = append(out, p2p{a, b, lvl})
		}
	}
	return out
}

func dgx1Volta(t *testing.T) *Graph {
	return graph(t, 8, dgx1PCIe([][2]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}), []nv{
		{0, 1, 1}, {0, 2, 1}, {0, 3, 2}, {0, 4, 2}, {1, 2, 2}, {1, 3, 1}, {1, 5, 2}, {2, 3, 2},
		{2, 6, 1}, {3, 7, 1}, {4, 5, 1}, {4, 6, 1}, {4, 7, 2}, {5, 6, 2}, {5, 7, 1}, {6, 7, 2},
	})
}

func dgx1Pascal(t *testing.T) *Graph {
	return graph(t, 8, dgx1PCIe([][2]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}}), []nv{
		{0, 1, 1}, {0, 2, 1}, {0, 3, 1}, {0, 4, 1}, {1, 2, 1}, {1, 3, 1}, {1, 5, 1}, {2, 3, 1},
		{2, 6, 1}, {3, 7, 1}, {4, 5, 1}, {4, 6, 1}, {4, 7, 1}, {5, 6, 1}, {5, 7, 1}, {6, 7, 1},
	})
}

func rtx8000x4(t *testing.T) *Graph {
	return graph(t, 4, []p2p{
		{0, 1, LevelNode}, {0, 2, LevelSystem}, {0, 3, LevelSystem}, {1, 2, LevelSystem}, {1, 3, LevelSystem}, {2, 3, LevelNode},
	}, []nv{{0, 3, 2}, {1, 2, 2}})
}

func TestAllocateVoltaCases(t *testing.T) {
	g := dgx1Volta(t)
	for _, tc := range []struct {
		name                string
		available, required []int
		size                int
		want                []int
	}{
		{"single NVLink, prefer same switch", []int{0, 2, 4, 5}, nil, 2, []int{4, 5}},
		{"single NVLink, prefer same socket", []int{0, 4, 5, 6}, nil, 2, []int{5, 6}},
		{"prefer dual NVLink same socket", []int{0, 3, 1}, nil, 2, []int{0, 3}},
		{"prefer dual NVLink cross socket", []int{0, 1, 4}, nil, 2, []int{0, 4}},
		{"must include, size 1", []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{4}, 1, []int{4}},
		{"must include, size 2", []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{4}, 2, []int{4, 7}},
		{"must include, size 4", []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{4}, 4, []int{4, 5, 6, 7}},
		{"must include an unavailable GPU", []int{1, 2, 3, 4, 5, 6, 7}, []int{0, 1, 2, 3}, 4, nil},
		{"must include the full set", []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{0, 2, 4, 6}, 4, []int{0, 2, 4, 6}},
		{"must include more than the size", []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{1, 2, 3, 4, 5, 6}, 4, nil},
		{"must include more than available", []int{1, 2, 3, 4, 5}, []int{1, 2, 3, 4, 5, 6}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := g.Allocate(tc.available, tc.required, tc.size); !slices.Equal(got, tc.want) {
				t.Errorf("Allocate(%v, %v, %d) = %v, want %v", tc.available, tc.required, tc.size, got, tc.want)
			}
		})
	}
}

// allocator replays go-gpuallocator's Allocator: each pick comes out of what is left.
func sequence(t *testing.T, g *Graph, steps []struct {
	size int
	want []int
}) {
	t.Helper()
	left := make([]int, g.Len())
	for i := range left {
		left[i] = i
	}
	for k, s := range steps {
		got := g.Allocate(left, nil, s.size)
		if !slices.Equal(got, s.want) {
			t.Fatalf("step %d: Allocate(%v, %d) = %v, want %v", k, left, s.size, got, s.want)
		}
		left = slices.DeleteFunc(left, func(x int) bool { return slices.Contains(got, x) })
	}
}

type step = struct {
	size int
	want []int
}

func TestAllocatorSequences(t *testing.T) {
	for _, tc := range []struct {
		name  string
		g     *Graph
		steps []step
	}{
		{"4xRTX8000 one", rtx8000x4(t), []step{{1, []int{0}}, {1, []int{1}}, {1, []int{2}}, {1, []int{3}}, {1, nil}}},
		{"4xRTX8000 two", rtx8000x4(t), []step{{2, []int{0, 3}}, {2, []int{1, 2}}, {1, nil}}},
		{"4xRTX8000 four", rtx8000x4(t), []step{{4, []int{0, 1, 2, 3}}, {1, nil}}},
		{"DGX-1 Pascal one", dgx1Pascal(t), []step{{1, []int{0}}, {1, []int{1}}, {1, []int{2}}, {1, []int{3}}, {1, []int{4}}, {1, []int{5}}, {1, []int{6}}, {1, []int{7}}, {1, nil}}},
		{"DGX-1 Pascal two", dgx1Pascal(t), []step{{2, []int{0, 2}}, {2, []int{1, 3}}, {2, []int{4, 6}}, {2, []int{5, 7}}, {1, nil}}},
		{"DGX-1 Pascal four", dgx1Pascal(t), []step{{4, []int{0, 1, 2, 3}}, {4, []int{4, 5, 6, 7}}, {1, nil}}},
		{"DGX-1 Pascal eight", dgx1Pascal(t), []step{{8, []int{0, 1, 2, 3, 4, 5, 6, 7}}, {1, nil}}},
		{"DGX-1 Volta one", dgx1Volta(t), []step{{1, []int{0}}, {1, []int{1}}, {1, []int{2}}, {1, []int{3}}, {1, []int{4}}, {1, []int{5}}, {1, []int{6}}, {1, []int{7}}, {1, nil}}},
		{"DGX-1 Volta two", dgx1Volta(t), []step{{2, []int{0, 3}}, {2, []int{1, 2}}, {2, []int{4, 7}}, {2, []int{5, 6}}, {1, nil}}},
		{"DGX-1 Volta four", dgx1Volta(t), []step{{4, []int{0, 1, 2, 3}}, {4, []int{4, 5, 6, 7}}, {1, nil}}},
		{"DGX-1 Volta eight", dgx1Volta(t), []step{{8, []int{0, 1, 2, 3, 4, 5, 6, 7}}, {1, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) { sequence(t, tc.g, tc.steps) })
	}
}

// TestPartitionOrder: the divisions are walked in the allocator's order, padding kept whole
// (go-gpuallocator's TestBestEffortIterateGPUPartitions).
func TestPartitionOrder(t *testing.T) {
	g := NewGraph(4)
	g.exhaustive = true
	walk := func(size int) [][][]int {
		var out [][][]int
		g.partitions([]int{0, 1, 2, 3}, size, func(p [][]int, _ int) { out = append(out, clonePartition(p)) }, func() (int, bool) { return 0, false })
		return out
	}
	for size, want := range map[int][][][]int{
		1: {{{0}}, {{1}}, {{2}}, {{3}}},
		2: {{{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0, 3}, {1, 2}}},
		3: {{{0, 1, 2}, {3, pad, pad}}, {{0, 1, 3}, {2, pad, pad}}, {{0, 2, 3}, {1, pad, pad}}, {{0, pad, pad}, {1, 2, 3}}},
		4: {{{0, 1, 2, 3}}},
	} {
		if diff := cmp.Diff(want, walk(size)); diff != "" {
			t.Errorf("size %d partitions (-want +got):\n%s", size, diff)
		}
	}
}

// TestPruningKeepsTheAnswer: skipping branches that cannot win gives the same pick as walking
// every division, on random nodes, sizes and requirements.
func TestPruningKeepsTheAnswer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 2 + r.IntN(8)
		g := NewGraph(n)
		for a := range n {
			for b := a + 1; b < n; b++ {
				s := []int{10, 20, 30, 40, 50}[r.IntN(5)] + 100*r.IntN(3)
				g.score[a][b], g.score[b][a] = s, s
			}
		}
		var avail []int
		for i := range n {
			if r.IntN(4) > 0 {
				avail = append(avail, i)
			}
		}
		size := 1 + r.IntN(max(len(avail), 1))
		var req []int
		if len(avail) > 0 && r.IntN(3) == 0 {
			req = []int{avail[r.IntN(len(avail))]}
		}
		fast := g.Allocate(avail, req, size)
		g.exhaustive = true
		slow := g.Allocate(avail, req, size)
		if !slices.Equal(fast, slow) {
			t.Fatalf("trial %d: %d GPUs, available %v, required %v, size %d: pruned %v, exhaustive %v", trial, n, avail, req, size, fast, slow)
		}
	}
}
