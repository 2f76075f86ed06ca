package allocator

import "fmt"

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
	// Best fit: filling an island exactly keeps the other islands whole; breaking a big free
	// island for a small request costs in proportion to what it leaves stranded.
	bestFit := 0
	if res.IslandLocal {
		for i, n := range islandCount {
			left := len(v.islands[i].free) - n
			bestFit = 100 - 100*left/v.islands[i].size
		}
	}

	switch req.Policy {
	case Spread:
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
	// LeastUtilized prefers nodes whose GPUs the agent reports least busy; without reports it
	// behaves as SpreadNodes.
	LeastUtilized Strategy = "least-utilized"
)

// ParseStrategy reads a strategy name.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case Binpack, SpreadNodes, LeastUtilized:
		return Strategy(s), nil
	}
	return "", fmt.Errorf("unknown node strategy %q: want %q, %q or %q", s, Binpack, SpreadNodes, LeastUtilized)
}

// placementWeight is how much placement quality counts against the node strategy. Quality
// dominates so that an island-local placement on any node beats a cross-island one.
const placementWeight = 70

// NodeScore ranks a node for a request whose placement on it is res: 0..100.
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
			utilSum += g.UtilizationPercent
			utilN++
		}
	}
	strategy := 0
	if healthy > 0 {
		packed := 100 * used / healthy
		switch s {
		case Binpack:
			strategy = packed
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
	return (placementWeight*res.Score + (100-placementWeight)*strategy) / 100
}

func contains(ids []int, id int) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
