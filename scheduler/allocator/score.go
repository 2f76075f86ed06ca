package allocator

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
)

// score fills res.Score, res.IslandLocal and res.Islands: the quality of the placement on this
// node, 0..100, made of weighted parts that each range 0..100.
func (v *view) score(res *Result) {
	req := v.req
	islandCount := make(map[int]int, 2)
	minBW, meetBW := -1, 0
	for _, id := range res.IDs {
		i := v.islandOf(id)
		islandCount[i]++
		g, _ := v.node.GPU(id)
		if minBW < 0 || g.BandwidthGBps < minBW {
			minBW = g.BandwidthGBps
		}
		if g.BandwidthGBps >= req.MinBandwidthGBps {
			meetBW++
		}
	}
	res.Islands = len(islandCount)
	res.IslandLocal = res.Islands == 1

	type part struct{ weight, value int }
	var parts []part
	topo := req.Topology != Ignore

	// Locality: all in one island is best; every extra island costs the same share.
	locality := 0
	if res.IslandLocal {
		locality = 100
	}
	// Bandwidth: the share of chosen GPUs meeting the minimum (all of them when none is asked).
	bandwidth := 100 * meetBW / len(res.IDs)
	// Best fit: filling islands exactly keeps the other islands whole; breaking a big free
	// island for a small request costs in proportion to what it leaves stranded in the islands
	// it uses. That holds across islands too: a 4-GPU claim that fills two free NVLink pairs
	// strands nothing, one that takes half of a free 8-GPU island strands four GPUs that an
	// 8-GPU claim needed (scoring every multi-island placement 0 here sent 4-GPU claims that
	// ignore topology to the 8-GPU boxes and left the full-box claims waiting). Fit, which
	// binpack ranks nodes by, counts the GPUs left in an island-local placement's island
	// instead (see Result.Fit).
	stranded, spanned := 0, 0
	for i, n := range islandCount {
		stranded += len(v.islands[i].free) - n
		spanned += v.islands[i].size
	}
	bestFit := 100 - 100*stranded/spanned
	if res.IslandLocal {
		for i, n := range islandCount {
			res.Fit = 100 * n / len(v.islands[i].free)
		}
	}

	switch req.Policy {
	case Spread:
		// A spread claim does not aim at filling an island: no fit for binpack to rank by.
		res.Fit = -1
		// The more distinct islands the better, up to as many as the node has: a node whose
		// other islands are full scores below one that can really spread.
		want := min(req.Count, len(v.islands))
		parts = append(parts, part{60, 100 * min(res.Islands, want) / want})
		if topo {
			parts = append(parts, part{20, bandwidth})
		}
	case PreferIDs:
		got := 0
		for _, id := range res.IDs {
			for _, p := range req.PreferIDs {
				if p == id {
					got++
					break
				}
			}
		}
		want := min(req.Count, len(req.PreferIDs))
		parts = append(parts, part{50, 100 * min(got, want) / want})
		if topo {
			parts = append(parts, part{20, locality}, part{15, bandwidth})
		}
		parts = append(parts, part{15, bestFit})
	default:
		span := res.IDs[len(res.IDs)-1] - res.IDs[0]
		contig := 100
		if span > 0 {
			contig = 100 * (len(res.IDs) - 1) / span
		}
		parts = append(parts, part{20, contig}, part{20, bestFit})
		if topo {
			parts = append(parts, part{40, locality}, part{20, bandwidth})
		}
	}
	sum, weights := 0, 0
	for _, p := range parts {
		sum += p.weight * p.value
		weights += p.weight
	}
	res.Score = sum / weights
}

// Strategy ranks nodes against each other, on top of the placement quality.
type Strategy string

const (
	// Binpack fills busy nodes first, keeping whole nodes free for large claims.
	Binpack Strategy = "binpack"
	// SpreadNodes spreads load over nodes.
	SpreadNodes Strategy = "spread"
	// LeastUtilized prefers nodes whose healthy GPUs the agent reports least busy on average,
	// a GPU's busyness being the larger of its utilisation and its share of memory in use;
	// without reports it behaves as SpreadNodes.
	LeastUtilized Strategy = "least-utilized"
	// RoundRobin walks the nodes in name order: the node after the last one a round-robin pod
	// went to ranks first. See RoundRobinScores.
	RoundRobin Strategy = "round-robin"
	// Random ranks the nodes in an order drawn for each pod. See RandomScores.
	Random Strategy = "random"
	// CostAware prefers the cheapest nodes by their cost label. See CostScores.
	CostAware Strategy = "cost-aware"
)

// Strategies lists every strategy, in the order messages name them.
var Strategies = []Strategy{Binpack, SpreadNodes, LeastUtilized, RoundRobin, Random, CostAware, Fragmentation}

// ParseStrategy reads a strategy name.
func ParseStrategy(s string) (Strategy, error) {
	for _, v := range Strategies {
		if Strategy(s) == v {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown node strategy %q: want one of %q, %q, %q, %q, %q, %q, %q", s, Binpack, SpreadNodes, LeastUtilized, RoundRobin, Random, CostAware, Fragmentation)
}

// Ranked reports whether a strategy ranks nodes against each other (round-robin, random,
// cost-aware, fragmentation): its scores come from one of the *Scores functions over all
// candidate nodes, not from one node's GPUs.
func (s Strategy) Ranked() bool {
	return s == RoundRobin || s == Random || s == CostAware || s == Fragmentation
}

// placementWeight is how much placement quality counts against the node strategy. Quality
// dominates so that an island-local placement on any node beats a cross-island one.
const placementWeight = 70

// binpackFitWeight is the share, in percent, of binpack's node term that is the placement's
// island best fit (Result.Fit); the rest is the node's packed share. At 80 a placement that
// leaves fewer GPUs free in its island wins over one on a fuller node, as PreFilter's
// tightest-fit cap orders them (claims/ledger PickCandidates), even against the placement score's own best
// fit, which counts what is left as a share of the island's size; between equal fits the
// fuller node wins. At 67 a single still went to a DGX holding a quad (3 GPUs left in its
// island) before an empty box of NVLink pairs (1 left).
const binpackFitWeight = 80

// NodeScore ranks a node for a request whose placement on it is res: 0..100. For a ranked
// strategy (Strategy.Ranked) use NodeScoreWith and the strategy's own scores instead.
func NodeScore(n *Node, res Result, s Strategy) int {
	healthy, used, utilSum, utilN := 0, 0, 0, 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Health != Healthy {
			continue
		}
		healthy++
		if g.ExclusiveHolder != "" || g.SharedHolders > 0 || contains(res.IDs, g.ID) {
			used++
		}
		if g.UtilizationPercent >= 0 {
			utilSum += min(100, max(g.UtilizationPercent, g.MemoryUsedPercent))
			utilN++
		}
	}
	strategy := 0
	if healthy > 0 {
		packed := 100 * used / healthy
		switch s {
		case Binpack:
			// Islands first, then nodes: the island best fit counts four times the node's
			// packed share. Packing by node alone drew small claims onto a big island half taken by a
			// larger claim (its node being the fuller) rather than into the free half of a
			// small island elsewhere, stranding GPUs the next larger claim needed.
			strategy = packed
			if res.Fit >= 0 {
				strategy = (binpackFitWeight*res.Fit + (100-binpackFitWeight)*packed) / 100
			}
		case LeastUtilized:
			if utilN > 0 {
				strategy = 100 - utilSum/utilN
			} else {
				strategy = 100 - packed
			}
		default:
			strategy = 100 - packed
		}
	}
	return NodeScoreWith(res, strategy)
}

// NodeScoreWith combines a placement's quality with a strategy score (0..100) of its node.
func NodeScoreWith(res Result, strategy int) int {
	strategy = max(0, min(100, strategy))
	return (placementWeight*res.Score + (100-placementWeight)*strategy) / 100
}

// rankScores scores nodes by their place in order: the first 100, the last 0, evenly between.
func rankScores(order []string) map[string]int {
	out := make(map[string]int, len(order))
	for i, n := range order {
		if len(order) == 1 {
			out[n] = 100
			continue
		}
		out[n] = 100 - 100*i/(len(order)-1)
	}
	return out
}

// RoundRobinScores ranks nodes in name order starting with the first name after last (the
// node the previous round-robin pod went to), wrapping around; with no last, from the first.
func RoundRobinScores(nodes []string, last string) map[string]int {
	order := slices.Clone(nodes)
	slices.Sort(order)
	order = slices.Compact(order)
	start, _ := slices.BinarySearch(order, last)
	if start < len(order) && order[start] == last {
		start++
	}
	if len(order) == 0 {
		return map[string]int{}
	}
	start %= len(order)
	rotated := make([]string, 0, len(order))
	rotated = append(rotated, order[start:]...)
	rotated = append(rotated, order[:start]...)
	return rankScores(rotated)
}

// RandomScores ranks nodes in a pseudo-random order that depends only on seed and key (the
// pod): every pod gets an order of its own, and the same pod with the same seed always the
// same one, so tests can pin it.
func RandomScores(nodes []string, seed uint64, key string) map[string]int {
	type drawn struct {
		node string
		v    uint64
	}
	d := make([]drawn, 0, len(nodes))
	for _, n := range nodes {
		h := fnv.New64a()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], seed)
		h.Write(b[:])
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(n))
		d = append(d, drawn{n, h.Sum64()})
	}
	slices.SortFunc(d, func(a, b drawn) int {
		if c := cmp.Compare(a.v, b.v); c != 0 {
			return c
		}
		return cmp.Compare(a.node, b.node)
	})
	order := make([]string, len(d))
	for i := range d {
		order[i] = d[i].node
	}
	return rankScores(order)
}

// ParseCost reads a node cost label: a finite, non-negative decimal number.
func ParseCost(v string) (float64, error) {
	c, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
		return 0, fmt.Errorf("node cost %q is not a non-negative number", v)
	}
	return c, nil
}

// CostScores ranks nodes by cost, the cheapest 100 and the dearest 0 in proportion between;
// a node whose cost is unknown (cost returns false) scores 0, below every priced node. When
// all priced nodes cost the same they all score 100.
func CostScores(nodes []string, cost func(node string) (float64, bool)) map[string]int {
	out := make(map[string]int, len(nodes))
	lo, hi, priced := math.Inf(1), math.Inf(-1), false
	costs := make(map[string]float64, len(nodes))
	for _, n := range nodes {
		c, ok := cost(n)
		if !ok {
			continue
		}
		costs[n], priced = c, true
		lo, hi = math.Min(lo, c), math.Max(hi, c)
	}
	for _, n := range nodes {
		c, ok := costs[n]
		switch {
		case !ok:
			out[n] = 0
		case !priced || hi == lo:
			out[n] = 100
		default:
			// Priced nodes keep at least 1 so that the dearest still beats an unpriced one.
			out[n] = 1 + int(99*(hi-c)/(hi-lo))
		}
	}
	return out
}

func contains(ids []int, id int) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
