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
