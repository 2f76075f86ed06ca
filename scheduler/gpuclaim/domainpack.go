package gpuclaim

import (
	"slices"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Packing around domains: under the binpack strategy, a pod that no gang's domain confines
// goes to nodes outside every domain of the narrowest topology level first, then to the
// fullest domains, as Slurm's topology/block plugin packs jobs into the fewest blocks. Binpack
// by node alone spreads small pods over every domain (the tightest node may be in any of
// them), and a gang as large as a domain then waits for ever for one to empty. Spread and the
// ranked strategies are left as they are: they ask for something else.

// domainPackWeight is the domain's share of the score of a pod packed around domains; the
// rest is the node's own score. High enough that a free node outside the domains, or a node
// in a fuller domain, beats a tighter node in an emptier domain.
const domainPackWeight = 75

// packsDomains tells whether a pod with this strategy, confined to dom, is packed around
// domains: only when the fleet has domains.
func (p *Plugin) packsDomains(strategy allocator.Strategy, dom domain) bool {
	return strategy == allocator.Binpack && dom.level == "" && len(p.args.TopologyLevels) > 0 && !p.domains.empty()
}

// domainFill scores each of nodes by its domain of the narrowest level: 100 outside every
// domain, else the share of the domain's healthy GPUs held (0..100).
func (p *Plugin) domainFill(nodes []string) map[string]int {
	level := p.args.TopologyLevels[0]
	byDomain := map[string]int{}
	out := make(map[string]int, len(nodes))
	for _, n := range nodes {
		v, ok := p.domains.value(n, level)
		if !ok {
			out[n] = 100
			continue
		}
		fill, seen := byDomain[v]
		if !seen {
			fill = p.fillOf(domain{level: level, value: v})
			byDomain[v] = fill
		}
		out[n] = fill
	}
	return out
}

// fillOf is the share of d's healthy GPUs held, 0..100 (100 when it has none).
func (p *Plugin) fillOf(d domain) int {
	healthy, free := 0, 0
	for _, node := range p.domains.nodes(d) {
		if n, _ := p.ledger.NodeView(node); n != nil {
			healthy += healthyGPUs(n)
			free += ledger.FreeGPUs(n)
		}
	}
	if healthy == 0 {
		return 100
	}
	return 100 * (healthy - free) / healthy
}

// packTiers orders each fit tier's candidates for a pod packed around domains: the nodes
// outside every domain, then the nodes of each domain, fullest domain first, each group a
// tier of its own, so that a capped offer (ledger.PickCandidates) takes the nodes Score
// prefers rather than the tightest nodes of any domain.
func (p *Plugin) packTiers(tiers [][]ledger.Candidate) [][]ledger.Candidate {
	var names []string
	for _, t := range tiers {
		for _, c := range t {
			names = append(names, c.Name)
		}
	}
	fill := p.domainFill(names)
	level := p.args.TopologyLevels[0]
	out := make([][]ledger.Candidate, 0, len(tiers))
	for _, t := range tiers {
		groups := map[string][]ledger.Candidate{}
		for _, c := range t {
			v, _ := p.domains.value(c.Name, level)
			groups[v] = append(groups[v], c)
		}
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		// Outside every domain ("") first, then by fill, fullest first.
		slices.SortFunc(keys, func(a, b string) int {
			switch {
			case a == "" || b == "":
				return boolRank(a == "") - boolRank(b == "")
			case fill[groups[a][0].Name] != fill[groups[b][0].Name]:
				return fill[groups[b][0].Name] - fill[groups[a][0].Name]
			case a < b:
				return -1
			case a > b:
				return 1
			}
			return 0
		})
		for _, k := range keys {
			out = append(out, groups[k])
		}
	}
	return out
}

// boolRank is -1 for true: a sort key that puts true first.
func boolRank(b bool) int {
	if b {
		return -1
	}
	return 0
}

// packScore is score blended with the node's domain fill.
func packScore(score, fill int) int {
	return (domainPackWeight*fill + (100-domainPackWeight)*score) / 100
}
