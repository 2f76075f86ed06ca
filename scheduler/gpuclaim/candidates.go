package gpuclaim

import (
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// DefaultMaxCandidateNodes is Args.MaxCandidateNodes's default: the framework's own floor on how
// many feasible nodes it looks for before it stops filtering (minFeasibleNodesToFind in
// kube-scheduler). Below 100 offered nodes the framework filters and scores every one of them;
// above, it filters until it has found a share of them (percentageOfNodesToScore, 10 % at 5,000
// nodes: 500) and scores those, in an order that has nothing to do with GPUs. Offering the 100
// best-placed nodes instead of every node with room gives Filter and Score a fifth of the work
// at 5,000 nodes and a better sample: the one the node strategy would rank first.
const DefaultMaxCandidateNodes = 100

// pickCandidates chooses the nodes PreFilter offers out of tiers (best fit tier first, each the
// candidates of one tier). Up to limit nodes, better tiers before worse; within the tier where
// the limit falls, binpack takes the tightest fits first: the fewest GPUs left in the island the
// request would use, then on the node (a best fit that keeps large free islands and empty nodes
// whole for large claims, in the order allocator.NodeScore's binpack ranks them: island fit
// before the node's packed share), and spread the emptiest nodes. The other strategies rank nodes by something the ledger does not hold (utilisation,
// names, costs, a draw per pod), and limit 0 means no cap: then every node is offered. capped
// reports whether some were left out. Ties keep the ledger's map order, which Go varies from
// scan to scan, so that a node another plugin keeps refusing is not offered first every time.
func pickCandidates(tiers [][]candidate, s allocator.Strategy, limit int) (names []string, capped bool) {
	total := 0
	for _, t := range tiers {
		total += len(t)
	}
	if limit <= 0 || total <= limit || (s != allocator.Binpack && s != allocator.SpreadNodes) {
		names = make([]string, 0, total)
		for _, t := range tiers {
			for _, c := range t {
				names = append(names, c.name)
			}
		}
		return names, false
	}
	names = make([]string, 0, limit)
	for _, t := range tiers {
		need := limit - len(names)
		if need == 0 {
			break
		}
		if len(t) <= need {
			for _, c := range t {
				names = append(names, c.name)
			}
			continue
		}
		names = appendBest(names, t, need, s == allocator.SpreadNodes)
	}
	return names, true
}

// appendBest appends the need best candidates of t (tightest, or emptiest), by a counting pass
// over t rather than a sort: a burst asks this for every pod, over thousands of nodes.
func appendBest(names []string, t []candidate, need int, emptiest bool) []string {
	most := 0
	for _, c := range t {
		most = max(most, c.room.node, c.room.island)
	}
	key := func(c candidate) int {
		if emptiest {
			return most - c.room.node
		}
		return c.room.island*(most+1) + c.room.node
	}
	counts := make([]int, (most+1)*(most+1))
	for _, c := range t {
		counts[key(c)]++
	}
	// Every candidate with a key below cut is taken, and the first rest of those with key cut.
	cut, rest := 0, need
	for ; cut < len(counts) && counts[cut] < rest; cut++ {
		rest -= counts[cut]
	}
	for _, c := range t {
		switch k := key(c); {
		case k < cut:
			names = append(names, c.name)
		case k == cut && rest > 0:
			names = append(names, c.name)
			rest--
		}
	}
	return names
}
