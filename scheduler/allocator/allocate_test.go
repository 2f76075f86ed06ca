package allocator

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// seedBox is the API reference's example node: GPUs 0-3 at 600 GB/s, 4-7 at 64 GB/s, GPU 7 unhealthy.
func seedBox() *Builder { return TwoIslands("node-a", 4, 4).Unhealthy(7) }

func TestAllocate(t *testing.T) {
	tests := []struct {
		name string
		node *Node
		req  Request
		// want is the chosen IDs; empty means an Unfit error whose reason contains wantErr.
		want      []int
		wantErr   string
		wantLocal bool
		wantNote  string
	}{
		// --- contiguous ---
		{
			name: "seed box: 4-GPU contiguous Preferred lands inside the 600 GB/s island",
			node: seedBox().Node(),
			req:  Request{Count: 4, Policy: Contiguous, Topology: Preferred, MinBandwidthGBps: 600},
			want: []int{0, 1, 2, 3}, wantLocal: true,
		},
		{
			name: "seed box: 2-GPU contiguous without bandwidth need fits best into the smaller free island",
			node: seedBox().Node(),
			req:  Request{Count: 2, Policy: Contiguous},
			want: []int{4, 5}, wantLocal: true,
		},
		{
			name: "seed box: 2-GPU Preferred 600 GB/s prefers the island meeting bandwidth over best fit",
			node: seedBox().Node(),
			req:  Request{Count: 2, Policy: Contiguous, Topology: Preferred, MinBandwidthGBps: 600},
			want: []int{0, 1}, wantLocal: true,
		},
		{
			name:    "seed box: Required 600 GB/s never uses the 64 GB/s island",
			node:    seedBox().HeldBy("p", 0).Node(),
			req:     Request{Count: 4, Policy: Contiguous, Topology: Required, MinBandwidthGBps: 600},
			wantErr: "needs 4 healthy free GPUs; node has 3 (1 not healthy, 1 held, 3 below 600 GB/s)",
		},
		{
			name:    "Required across islands fails with the best island's free count",
			node:    TwoIslands("n", 4, 4).HeldBy("p", 0, 4).Node(),
			req:     Request{Count: 4, Policy: Contiguous, Topology: Required},
			wantErr: "needs 4 healthy free GPUs in one island; best island has 3 free",
		},
		{
			name: "Required with bandwidth names the bandwidth in the reason",
			node: TwoIslands("n", 4, 4).HeldBy("p", 0).Node(),
			req:  Request{Count: 2, Policy: Contiguous, Topology: Required, MinBandwidthGBps: 600},
			want: []int{1, 2}, wantLocal: true,
		},
		{
			name: "Preferred falls back across islands when no island fits, spanning as few as possible",
			node: TwoIslands("n", 4, 4).HeldBy("p", 0, 4, 5).Node(),
			req:  Request{Count: 4, Policy: Contiguous, Topology: Preferred},
			want: []int{1, 2, 3, 6}, wantLocal: false,
		},
		{
			name: "Ignore takes the tightest window of IDs regardless of islands",
			node: TwoIslands("n", 4, 4).HeldBy("p", 0, 1).Node(),
			req:  Request{Count: 2, Policy: Contiguous, Topology: Ignore},
			want: []int{2, 3}, wantLocal: true,
		},
		{
			name: "contiguous prefers adjacent IDs inside the island",
			node: DGX("n", 8, 600).HeldBy("p", 1, 4).Node(),
			req:  Request{Count: 2, Policy: Contiguous},
			want: []int{2, 3}, wantLocal: true,
		},
		{
			name: "contiguous keeps the longest free run whole",
			node: DGX("n", 8, 600).HeldBy("p", 0, 5).Node(),
			req:  Request{Count: 2, Policy: Contiguous},
			want: []int{6, 7}, wantLocal: true,
		},
		{
			name: "NVSwitch: any 4 GPUs are one island",
			node: DGX("n", 8, 600).HeldBy("p", 0, 2, 4, 6).Node(),
			req:  Request{Count: 4, Policy: Contiguous, Topology: Required, MinBandwidthGBps: 600},
			want: []int{1, 3, 5, 7}, wantLocal: true,
		},
		{
			name: "small claim leaves a whole island free for a large one",
			node: TwoIslands("n", 4, 4).HeldBy("p", 4).Node(),
			req:  Request{Count: 1, Policy: Contiguous},
			want: []int{5}, wantLocal: true,
		},
		{
			name: "NVLink pairs: 2-GPU claim takes a whole pair, best fit into a half-used pair first for 1 GPU",
			node: NVLinkPairs("n", 8, 100).HeldBy("p", 2).Node(),
			req:  Request{Count: 1, Policy: Contiguous},
			want: []int{3}, wantLocal: true,
		},
		{
			name:    "NVLink pairs: 2-GPU Required claim never straddles pairs",
			node:    NVLinkPairs("n", 4, 100).HeldBy("p", 1, 2).Node(),
			req:     Request{Count: 2, Policy: Contiguous, Topology: Required},
			wantErr: "needs 2 healthy free GPUs in one island; best island has 1 free",
		},
		// --- health and holders ---
		{
			name: "never an unhealthy GPU",
			node: DGX("n", 4, 600).Unhealthy(0, 1).Node(),
			req:  Request{Count: 2, Policy: Contiguous},
			want: []int{2, 3}, wantLocal: true,
		},
		{
			name:    "never an Unknown GPU",
			node:    DGX("n", 4, 600).Unknown(0, 1, 2).Node(),
			req:     Request{Count: 2, Policy: Contiguous},
			wantErr: "needs 2 healthy free GPUs; node has 1 (3 not healthy)",
		},
		{
			name:    "Exclusive never takes a shared GPU",
			node:    DGX("n", 4, 600).SharedBy(0, 1, 2).Node(),
			req:     Request{Count: 2, Policy: Contiguous, Exclusivity: Exclusive},
			wantErr: "needs 2 healthy free GPUs; node has 1 (3 held)",
		},
		{
			name: "Shared may join a shared GPU",
			node: DGX("n", 2, 600).SharedBy(0).HeldBy("x", 1).Node(),
			req:  Request{Count: 1, Policy: Contiguous, Exclusivity: Shared},
			want: []int{0}, wantLocal: true,
		},
		{
			name:    "Shared never lands on an exclusively held GPU",
			node:    DGX("n", 2, 600).HeldBy("x", 0, 1).Node(),
			req:     Request{Count: 1, Policy: Contiguous, Exclusivity: Shared},
			wantErr: "needs 1 healthy shareable GPUs; node has 0 (2 held)",
		},
		{
			name:    "more GPUs than the node has",
			node:    DGX("n", 8, 600).Node(),
			req:     Request{Count: 9, Policy: Contiguous},
			wantErr: "node has 8 GPUs; claim needs 9",
		},
		// --- spread ---
		{
			name: "spread spans islands",
			node: seedBox().Node(),
			req:  Request{Count: 2, Policy: Spread},
			want: []int{0, 4}, wantLocal: false,
		},
		{
			name: "spread of 4 over two islands takes two from each",
			node: seedBox().Node(),
			req:  Request{Count: 4, Policy: Spread},
			want: []int{0, 1, 4, 5}, wantLocal: false,
		},
		{
			name: "spread on a single-island node still succeeds",
			node: DGX("n", 8, 600).Node(),
			req:  Request{Count: 3, Policy: Spread},
			want: []int{0, 1, 2}, wantLocal: true,
		},
		// --- preferIds ---
		{
			name: "preferIds gets those IDs when free",
			node: seedBox().Node(),
			req:  Request{Count: 2, Policy: PreferIDs, PreferIDs: []int{2, 3}},
			want: []int{2, 3}, wantLocal: true,
		},
		{
			name: "preferIds falls back near the preferred ones and says so",
			node: seedBox().HeldBy("p", 3).Node(),
			req:  Request{Count: 2, Policy: PreferIDs, PreferIDs: []int{2, 3}},
			want: []int{1, 2}, wantLocal: true,
			wantNote: "preferred GPU(s) 3 not available; used 1,2",
		},
		{
			name: "preferIds of an unhealthy GPU falls back",
			node: seedBox().Node(),
			req:  Request{Count: 1, Policy: PreferIDs, PreferIDs: []int{7}},
			want: []int{6}, wantLocal: true,
			wantNote: "preferred GPU(s) 7 not available; used 6",
		},
		{
			name: "preferIds across islands under Required keeps one island",
			node: seedBox().Node(),
			req:  Request{Count: 2, Policy: PreferIDs, PreferIDs: []int{3, 4}, Topology: Required},
			want: []int{2, 3}, wantLocal: true,
			wantNote: "preferred GPUs are not in one island with the rest; used 2,3",
		},
		{
			name: "preferIds none available, Required island too small: contiguous fallback",
			node: TwoIslands("n", 2, 4).HeldBy("p", 0).Node(),
			req:  Request{Count: 2, Policy: PreferIDs, PreferIDs: []int{0}, Topology: Required},
			want: []int{2, 3}, wantLocal: true,
			wantNote: "preferred GPUs 0 cannot be used in one island; placed contiguously instead",
		},
		// --- pinned (an entry of the gpu-scheduling-map) ---
		{
			name: "pinned takes exactly the IDs named, across islands, even where contiguous would not",
			node: seedBox().Node(),
			req:  Request{Count: 2, Policy: Contiguous, Topology: Required, MinBandwidthGBps: 600, Pinned: []int{5, 1}},
			want: []int{1, 5},
		},
		{
			name:    "pinned never substitutes a held GPU",
			node:    seedBox().HeldBy("p", 1).Node(),
			req:     Request{Count: 2, Pinned: []int{0, 1}},
			wantErr: "GPU 1 is held by another pod",
		},
		{
			name:    "pinned refuses an unhealthy GPU",
			node:    seedBox().Node(),
			req:     Request{Count: 1, Pinned: []int{7}},
			wantErr: "GPU 7 is Unhealthy",
		},
		{
			name:    "pinned refuses a GPU the node does not have",
			node:    seedBox().Node(),
			req:     Request{Count: 2, Pinned: []int{0, 9}},
			wantErr: "GPU 9 does not exist on node node-a (it has 8 GPUs)",
		},
		{
			name:    "pinned Exclusive refuses a GPU Shared pods use",
			node:    seedBox().SharedBy(2).Node(),
			req:     Request{Count: 1, Pinned: []int{2}},
			wantErr: "GPU 2 is shared by 1 pods; an Exclusive claim cannot take it",
		},
		{
			name: "pinned Shared may join Shared pods on a GPU",
			node: seedBox().SharedBy(2).Node(),
			req:  Request{Count: 1, Exclusivity: Shared, Pinned: []int{2}},
			want: []int{2}, wantLocal: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.node.Clone()
			res, err := Allocate(tt.node, tt.req)
			if !reflect.DeepEqual(before, tt.node) {
				t.Fatalf("Allocate modified the node")
			}
			if tt.wantErr != "" {
				var u *Unfit
				if !errors.As(err, &u) {
					t.Fatalf("got %v, %v; want Unfit %q", res.IDs, err, tt.wantErr)
				}
				if u.Reason != tt.wantErr {
					t.Fatalf("reason = %q, want %q", u.Reason, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(res.IDs, tt.want) {
				t.Fatalf("IDs = %v, want %v", res.IDs, tt.want)
			}
			if res.IslandLocal != tt.wantLocal {
				t.Errorf("IslandLocal = %v, want %v", res.IslandLocal, tt.wantLocal)
			}
			if res.Note != tt.wantNote {
				t.Errorf("Note = %q, want %q", res.Note, tt.wantNote)
			}
			if res.Score < 0 || res.Score > 100 {
				t.Errorf("Score = %d, outside 0..100", res.Score)
			}
		})
	}
}

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		req  Request
		want string
	}{
		{Request{Count: 0}, "count must be at least 1, got 0"},
		{Request{Count: 1, Policy: PreferIDs}, "policy preferIds needs at least one ID in preferIds"},
		{Request{Count: 1, Policy: PreferIDs, PreferIDs: []int{1, 1}}, "preferIds lists GPU 1 twice"},
		{Request{Count: 1, Policy: PreferIDs, PreferIDs: []int{-1}}, "preferIds must not be negative, got -1"},
		{Request{Count: 1, MinBandwidthGBps: -5}, "minBandwidthGBps must not be negative, got -5"},
		{Request{Count: 2, Policy: Spread, Topology: Required}, "policy spread spreads GPUs across islands and cannot be combined with topology mode Required"},
		{Request{Count: 1, Policy: Policy(9)}, "unknown policy Policy(9)"},
		{Request{Count: 2, Pinned: []int{1}}, "pinned GPUs 1 are 1, count is 2"},
		{Request{Count: 2, Pinned: []int{1, 1}}, "pinned GPUs 1,1: each must be a non-negative ID listed once"},
	}
	for _, tt := range tests {
		err := tt.req.Validate()
		if err == nil || err.Error() != tt.want {
			t.Errorf("Validate(%+v) = %v, want %q", tt.req, err, tt.want)
		}
		// Allocate refuses an invalid request with a plain error, never an Unfit.
		_, aerr := Allocate(DGX("n", 8, 600).Node(), tt.req)
		var u *Unfit
		if aerr == nil || errors.As(aerr, &u) || !strings.Contains(aerr.Error(), tt.want) {
			t.Errorf("Allocate(%+v) error = %v, want invalid request containing %q", tt.req, aerr, tt.want)
		}
	}
}

func TestScoreRanksPlacements(t *testing.T) {
	req := Request{Count: 4, Policy: Contiguous, Topology: Preferred}
	local, err := Allocate(DGX("a", 8, 600).HeldBy("p", 0, 1, 2, 3).Node(), req)
	if err != nil {
		t.Fatal(err)
	}
	split, err := Allocate(TwoIslands("b", 4, 4).HeldBy("p", 0, 1, 4, 5).Node(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !(local.Score > split.Score) {
		t.Fatalf("island-local score %d should beat cross-island %d", local.Score, split.Score)
	}
	// Across nodes, even with the strategy favouring the split node, locality wins.
	if a, b := NodeScore(DGX("a", 8, 600).HeldBy("p", 0, 1, 2, 3).Node(), local, SpreadNodes),
		NodeScore(TwoIslands("b", 4, 4).HeldBy("p", 0, 1, 4, 5).Node(), split, SpreadNodes); a <= b {
		t.Fatalf("node score of island-local placement %d should beat cross-island %d", a, b)
	}

	// Filling an island exactly scores better than breaking a whole one.
	small := Request{Count: 2, Policy: Contiguous}
	exact, _ := Allocate(TwoIslands("c", 2, 4).Node(), small)
	if !reflect.DeepEqual(exact.IDs, []int{0, 1}) {
		t.Fatalf("exact fit chose %v", exact.IDs)
	}
	breaking, _ := Allocate(DGX("d", 8, 600).Node(), small)
	if !(exact.Score > breaking.Score) {
		t.Fatalf("exact fit %d should beat breaking a whole island %d", exact.Score, breaking.Score)
	}
}

// A claim that ignores topology scores best where it strands the fewest GPUs in the islands it
// uses: filling two free NVLink pairs beats taking half of a free 8-GPU box, which an 8-GPU
// claim needs whole. A Preferred claim still ranks one island first.
func TestBestFitAcrossIslands(t *testing.T) {
	ignore := Request{Count: 4, Policy: Contiguous, Topology: Ignore}
	pairs, err := Allocate(NVLinkPairs("pairs", 8, 300).Node(), ignore)
	if err != nil {
		t.Fatal(err)
	}
	box, err := Allocate(DGX("box", 8, 900).Node(), ignore)
	if err != nil {
		t.Fatal(err)
	}
	if pairs.IslandLocal || pairs.Score <= box.Score {
		t.Fatalf("4 GPUs ignoring topology: two full pairs score %d (island-local %v), half a free box %d; want the pairs higher",
			pairs.Score, pairs.IslandLocal, box.Score)
	}
	preferred := ignore
	preferred.Topology = Preferred
	pairsP, _ := Allocate(NVLinkPairs("pairs", 8, 300).Node(), preferred)
	boxP, _ := Allocate(DGX("box", 8, 900).Node(), preferred)
	if boxP.Score <= pairsP.Score {
		t.Fatalf("4 GPUs preferring one island: the box scores %d, the pairs %d; want the box higher", boxP.Score, pairsP.Score)
	}
}

func TestSpreadScorePrefersNodesThatCanSpread(t *testing.T) {
	req := Request{Count: 2, Policy: Spread}
	halfFull, err := Allocate(seedBox().HeldBy("p", 0, 1, 2, 3).Node(), req)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := Allocate(seedBox().Node(), req)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Islands != 2 || halfFull.Islands != 1 || fresh.Score <= halfFull.Score {
		t.Fatalf("fresh node spreads over %d islands scoring %d; half-full node %d islands scoring %d", fresh.Islands, fresh.Score, halfFull.Islands, halfFull.Score)
	}
}

func TestNodeScoreStrategies(t *testing.T) {
	req := Request{Count: 1, Policy: Contiguous}
	busy := DGX("busy", 8, 600).HeldBy("p", 0, 1, 2, 3, 4, 5).Node()
	idle := DGX("idle", 8, 600).Node()
	rb, _ := Allocate(busy, req)
	ri, _ := Allocate(idle, req)
	// Equal placement quality would hide the strategy; compare strategy effects directly.
	if NodeScore(busy, rb, Binpack)-NodeScore(idle, ri, Binpack) <= NodeScore(busy, rb, SpreadNodes)-NodeScore(idle, ri, SpreadNodes) {
		t.Fatalf("binpack must favour the busy node more than spread does")
	}
	if NodeScore(idle, ri, SpreadNodes) <= NodeScore(idle, ri, Binpack) {
		t.Fatalf("spread must score an idle node above binpack")
	}
	hot := DGX("hot", 2, 600).Utilization(90, 0, 1).Node()
	cold := DGX("cold", 2, 600).Utilization(10, 0, 1).Node()
	rh, _ := Allocate(hot, req)
	rc, _ := Allocate(cold, req)
	if NodeScore(cold, rc, LeastUtilized) <= NodeScore(hot, rh, LeastUtilized) {
		t.Fatalf("least-utilized must prefer the cold node")
	}
	for _, s := range []Strategy{Binpack, SpreadNodes, LeastUtilized} {
		for _, n := range []*Node{busy, idle, hot, cold} {
			r, _ := Allocate(n, req)
			if v := NodeScore(n, r, s); v < 0 || v > 100 {
				t.Fatalf("NodeScore(%s, %s) = %d outside 0..100", n.Name, s, v)
			}
		}
	}
	if _, err := ParseStrategy("fastest"); err == nil || !strings.Contains(err.Error(), `unknown node strategy "fastest"`) {
		t.Fatalf("ParseStrategy error = %v", err)
	}
}

func TestWindow(t *testing.T) {
	tests := []struct {
		free []int
		k    int
		want []int
	}{
		{[]int{0, 1, 2, 3}, 2, []int{0, 1}},
		{[]int{1, 2, 3, 5, 6}, 2, []int{5, 6}},
		{[]int{0, 2, 4, 5}, 2, []int{4, 5}},
		{[]int{0, 2, 4, 6}, 3, []int{0, 2, 4}},
		{[]int{3}, 1, []int{3}},
	}
	for _, tt := range tests {
		if got := window(tt.free, tt.k); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("window(%v, %d) = %v, want %v", tt.free, tt.k, got, tt.want)
		}
	}
}

func TestBuilderAndValidate(t *testing.T) {
	n := seedBox().Node()
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(n.GPUs) != 8 || n.GPUs[7].Health != Unhealthy || n.GPUs[3].BandwidthGBps != 600 || n.GPUs[4].BandwidthGBps != 64 {
		t.Fatalf("seed box built wrong: %+v", n.GPUs)
	}
	bad := &Node{Name: "x", GPUs: []GPU{{ID: 1}, {ID: 1}}}
	if err := bad.Validate(); err == nil {
		t.Fatal("duplicate IDs must not validate")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("builder must panic on a GPU added twice")
		}
	}()
	NewBuilder("y").Island("a", 1, 0).Island("b", 1, 0).Node()
}

// least-utilized ranks a busier node lower, whether busy means kernels running or memory
// held; unreported GPUs leave it to spread.
func TestLeastUtilizedScoresTheBusierNodeLower(t *testing.T) {
	req := Request{Count: 1, Policy: Contiguous}
	score := func(n *Node) int {
		r, err := Allocate(n, req)
		if err != nil {
			t.Fatal(err)
		}
		return NodeScore(n, r, LeastUtilized)
	}
	all := []int{0, 1, 2, 3}
	idle := score(DGX("idle", 4, 600).Utilization(5, all...).Node())
	warm := score(DGX("warm", 4, 600).Utilization(40, all...).Node())
	hot := score(DGX("hot", 4, 600).Utilization(95, all...).Node())
	memoryFull := score(DGX("memory-full", 4, 600).Utilization(5, all...).MemoryUsed(90, all...).Node())
	oneBusy := score(DGX("one-busy", 4, 600).Utilization(5, all...).Utilization(100, 3).Node())
	if !(idle > oneBusy && oneBusy > warm && warm > hot) {
		t.Errorf("scores idle %d, one GPU busy %d, warm %d, hot %d: want strictly decreasing", idle, oneBusy, warm, hot)
	}
	if memoryFull >= warm {
		t.Errorf("a node at 5%% utilisation with 90%% of memory held scores %d, not below a 40%% node's %d", memoryFull, warm)
	}
	unreported := DGX("unreported", 4, 600).MemoryUsed(90, all...).Node()
	r, _ := Allocate(unreported, req)
	if NodeScore(unreported, r, LeastUtilized) != NodeScore(unreported, r, SpreadNodes) {
		t.Error("without utilisation reports least-utilized must score as spread (memory alone is not a report)")
	}
}
