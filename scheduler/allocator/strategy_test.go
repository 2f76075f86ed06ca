package allocator

import (
	"maps"
	"slices"
	"testing"
)

// byScore lists nodes best first (ties by name), which is how the scheduler would try them.
func byScore(scores map[string]int) []string {
	nodes := slices.Collect(maps.Keys(scores))
	slices.SortFunc(nodes, func(a, b string) int {
		if scores[a] != scores[b] {
			return scores[b] - scores[a]
		}
		if a < b {
			return -1
		}
		return 1
	})
	return nodes
}

func TestRoundRobinScores(t *testing.T) {
	nodes := []string{"n2", "n0", "n3", "n1"}
	tests := []struct {
		last string
		want []string
	}{
		{"", []string{"n0", "n1", "n2", "n3"}},
		{"n0", []string{"n1", "n2", "n3", "n0"}},
		{"n2", []string{"n3", "n0", "n1", "n2"}},
		{"n3", []string{"n0", "n1", "n2", "n3"}},
		// The last node may be gone (deleted, or not a candidate now): start after its place.
		{"n15", []string{"n2", "n3", "n0", "n1"}},
		{"zzz", []string{"n0", "n1", "n2", "n3"}},
	}
	for _, tt := range tests {
		got := RoundRobinScores(nodes, tt.last)
		if order := byScore(got); !slices.Equal(order, tt.want) {
			t.Errorf("last %q: order %v, want %v (scores %v)", tt.last, order, tt.want, got)
		}
		if got[tt.want[0]] != 100 || got[tt.want[len(tt.want)-1]] != 0 {
			t.Errorf("last %q: first scores %d, last %d; want 100 and 0", tt.last, got[tt.want[0]], got[tt.want[len(tt.want)-1]])
		}
	}
	if got := RoundRobinScores([]string{"only"}, "only"); got["only"] != 100 {
		t.Errorf("a single node scores %d, want 100", got["only"])
	}
	if got := RoundRobinScores(nil, "x"); len(got) != 0 {
		t.Errorf("no nodes: %v", got)
	}
}

// TestRoundRobinWalk places pods one after another, each on its best node, and checks that
// they visit every node once before any node gets a second.
func TestRoundRobinWalk(t *testing.T) {
	nodes := []string{"c", "a", "b"}
	last := ""
	var visited []string
	for range 6 {
		last = byScore(RoundRobinScores(nodes, last))[0]
		visited = append(visited, last)
	}
	if want := []string{"a", "b", "c", "a", "b", "c"}; !slices.Equal(visited, want) {
		t.Fatalf("visited %v, want %v", visited, want)
	}
}

func TestRandomScores(t *testing.T) {
	nodes := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"}
	a := byScore(RandomScores(nodes, 1, "pod-a"))
	if again := byScore(RandomScores(nodes, 1, "pod-a")); !slices.Equal(a, again) {
		t.Fatalf("same seed and pod gave %v then %v", a, again)
	}
	if shuffled := byScore(RandomScores([]string{"n7", "n3", "n5", "n1", "n0", "n2", "n4", "n6"}, 1, "pod-a")); !slices.Equal(a, shuffled) {
		t.Fatalf("the order of the input changed the ranking: %v vs %v", a, shuffled)
	}
	// Different pods and different seeds get different orders; over many pods every node
	// comes first sometimes (nothing is stuck at the top, as a hash of the node alone would be).
	if b := byScore(RandomScores(nodes, 2, "pod-a")); slices.Equal(a, b) {
		t.Errorf("seeds 1 and 2 gave the same order %v", a)
	}
	first := map[string]int{}
	for i := range 400 {
		first[byScore(RandomScores(nodes, 7, "pod-"+string(rune('A'+i%26))+string(rune('a'+i/26))))[0]]++
	}
	for _, n := range nodes {
		if first[n] < 20 {
			t.Errorf("node %s came first %d times in 400 pods, want about 50: %v", n, first[n], first)
		}
	}
	scores := RandomScores(nodes, 1, "pod-a")
	if scores[a[0]] != 100 || scores[a[len(a)-1]] != 0 {
		t.Errorf("scores %v: want the first 100 and the last 0", scores)
	}
}

func TestCostScores(t *testing.T) {
	costs := map[string]float64{"cheap": 0.5, "mid": 1, "dear": 3.5, "dear-too": 3.5}
	lookup := func(n string) (float64, bool) { c, ok := costs[n]; return c, ok }
	got := CostScores([]string{"dear", "unlabelled", "mid", "cheap", "dear-too"}, lookup)
	want := map[string]int{"cheap": 100, "mid": 1 + 99*25/30, "dear": 1, "dear-too": 1, "unlabelled": 0}
	if !maps.Equal(got, want) {
		t.Fatalf("CostScores = %v, want %v", got, want)
	}
	if order := byScore(got); !slices.Equal(order, []string{"cheap", "mid", "dear", "dear-too", "unlabelled"}) {
		t.Fatalf("order %v", order)
	}
	same := CostScores([]string{"a", "b", "c"}, func(n string) (float64, bool) { return 2, n != "c" })
	if !maps.Equal(same, map[string]int{"a": 100, "b": 100, "c": 0}) {
		t.Fatalf("equal costs: %v", same)
	}
	none := CostScores([]string{"a", "b"}, func(string) (float64, bool) { return 0, false })
	if !maps.Equal(none, map[string]int{"a": 0, "b": 0}) {
		t.Fatalf("no costs: %v", none)
	}
}

func TestParseCost(t *testing.T) {
	for _, ok := range []string{"0", "1", "0.25", "12.5", "1e3"} {
		if _, err := ParseCost(ok); err != nil {
			t.Errorf("ParseCost(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-1", "cheap", "NaN", "Inf", "1,5"} {
		if _, err := ParseCost(bad); err == nil {
			t.Errorf("ParseCost(%q) accepted", bad)
		}
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range Strategies {
		if got, err := ParseStrategy(string(s)); err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseStrategy("cheapest"); err == nil {
		t.Error("ParseStrategy accepted cheapest")
	}
	for s, ranked := range map[Strategy]bool{Binpack: false, SpreadNodes: false, LeastUtilized: false, RoundRobin: true, Random: true, CostAware: true} {
		if s.Ranked() != ranked {
			t.Errorf("%s.Ranked() = %v", s, !ranked)
		}
	}
}

func TestNodeScoreWith(t *testing.T) {
	res := Result{Score: 80}
	if got := NodeScoreWith(res, 100); got != (70*80+30*100)/100 {
		t.Errorf("NodeScoreWith(80, 100) = %d", got)
	}
	if NodeScoreWith(res, 150) != NodeScoreWith(res, 100) || NodeScoreWith(res, -5) != NodeScoreWith(res, 0) {
		t.Error("strategy scores outside 0..100 are not clamped")
	}
}

// quickstart's two node kinds: a DGX H100 (one NVSwitch island of 8) and a PCIe box bridged
// in NVLink pairs (four islands of 2).
func h100(name string) *Builder  { return DGX(name, 8, 450) }
func pairs(name string) *Builder { return NVLinkPairs(name, 8, 300) }

// binpackOrder places req on every node and lists the node names best first by binpack.
func binpackOrder(t *testing.T, req Request, nodes ...*Node) ([]string, map[string]int) {
	t.Helper()
	scores := map[string]int{}
	for _, n := range nodes {
		res, err := Allocate(n, req)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		scores[n.Name] = NodeScore(n, res, Binpack)
	}
	return byScore(scores), scores
}

// Binpack fills small islands before it breaks a big one that a larger claim could use. Packing
// by node alone sent a single to the DGX holding a quad (its node the fuller, 5 of 8 after)
// rather than into the free half of an NVLink pair (2 of 8), and the next quad then broke a
// fresh DGX, starving 8-GPU claims (as in the simulator's quickstart scenario).
func TestBinpackFillsSmallIslandsFirst(t *testing.T) {
	single := Request{Count: 1, Policy: Contiguous, Topology: Preferred}
	pair := Request{Count: 2, Policy: Contiguous, Topology: Preferred, MinBandwidthGBps: 300}
	quad := Request{Count: 4, Policy: Contiguous, Topology: Preferred}
	dgxQuad := h100("dgx-with-quad").HeldBy("quad", 0, 1, 2, 3).Node()
	dgxSeven := h100("dgx-with-seven").HeldBy("p", 0, 1, 2, 3, 4, 5, 6).Node()
	dgxEmpty := h100("dgx-empty").Node()
	halfPair := pairs("pairs-half-used-pair").HeldBy("s", 0).Node()
	onePairUsed := pairs("pairs-one-pair-used").HeldBy("s", 0, 1).Node()
	pairsEmpty := pairs("pairs-empty").Node()
	for _, tc := range []struct {
		name  string
		req   Request
		nodes []*Node
		want  []string
	}{
		// The exact fit in a pair first; then a whole pair (1 GPU left in it) before the DGX
		// that would keep 3 of its island free, too few for a quad; an empty DGX last.
		{"single", single, []*Node{dgxQuad, halfPair, pairsEmpty, dgxEmpty},
			[]string{"pairs-half-used-pair", "pairs-empty", "dgx-with-quad", "dgx-empty"}},
		// Exact fits on both: the fuller node wins, as binpack should.
		{"single, two exact fits", single, []*Node{halfPair, dgxSeven},
			[]string{"dgx-with-seven", "pairs-half-used-pair"}},
		{"pair", pair, []*Node{dgxQuad, onePairUsed, dgxEmpty},
			[]string{"pairs-one-pair-used", "dgx-with-quad", "dgx-empty"}},
		// A quad is island-local only on a DGX: the half-used one first, never a pairs box.
		{"quad", quad, []*Node{pairsEmpty, dgxEmpty, dgxQuad},
			[]string{"dgx-with-quad", "dgx-empty", "pairs-empty"}},
	} {
		got, scores := binpackOrder(t, tc.req, tc.nodes...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: binpack order %v, want %v (scores %v)", tc.name, got, tc.want, scores)
		}
	}
}

// The island best fit counts GPUs left, not a share of the island's size: the last free GPU of
// a pair and the last free GPU of a DGX are both exact fits; one left free in a pair is better
// than three left in a DGX.
func TestBestFitCountsGPUsLeft(t *testing.T) {
	single := Request{Count: 1, Policy: Contiguous}
	for _, tc := range []struct {
		node *Node
		fit  int
	}{
		{pairs("half-pair").HeldBy("s", 0).Node(), 100},
		{h100("dgx-seven").HeldBy("p", 0, 1, 2, 3, 4, 5, 6).Node(), 100},
		{pairs("empty-pair").Node(), 50},
		{h100("dgx-six").HeldBy("p", 0, 1, 2, 3, 4, 5).Node(), 50},
		{h100("dgx-quad").HeldBy("q", 0, 1, 2, 3).Node(), 25},
		{h100("dgx-empty").Node(), 12},
	} {
		res, err := Allocate(tc.node, single)
		if err != nil {
			t.Fatal(err)
		}
		if res.Fit != tc.fit {
			t.Errorf("%s: fit %d, want %d", tc.node.Name, res.Fit, tc.fit)
		}
	}
	split, err := Allocate(TwoIslands("split", 2, 2).Node(), Request{Count: 3, Policy: Contiguous, Topology: Preferred})
	if err != nil || split.IslandLocal || split.Fit != 0 {
		t.Errorf("a cross-island placement: fit %d, island-local %v, %v; want 0, false", split.Fit, split.IslandLocal, err)
	}
	spread, err := Allocate(TwoIslands("spread", 4, 4).Node(), Request{Count: 2, Policy: Spread})
	if err != nil || spread.Fit != -1 {
		t.Errorf("a Spread placement: fit %d, %v; want -1 (binpack ranks it by the node alone)", spread.Fit, err)
	}
}
