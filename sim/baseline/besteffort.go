// Package baseline models the peer the simulator compares gpu-scheduler with: a stock cluster,
// where kube-scheduler only counts nvidia.com/gpu and the NVIDIA device plugin then picks the
// GPU IDs inside the chosen node. The device plugin asks NVIDIA's go-gpuallocator for its
// "best-effort" preferred allocation; this package is our own implementation of that policy,
// written from its documented behaviour and reproducing its published test cases. It is
// simulator-only: the production scheduler never imports it.
//
// The policy scores every pair of GPUs by how close they are: 100 points per NVLink link that
// joins them directly (counted from each link's remote PCI bus ID, so links to an NVSwitch join
// nothing and count nothing, as in the real allocator), plus 10-60 points for their place in
// the PCIe tree (across sockets 10, same socket 20, host bridge 30, several switches 40, one
// switch 50, same board 60). A set's score is the sum over its pairs. Rather than take the
// single best set, it divides all available GPUs into sets of the requested size, keeps the
// division with the highest total score, and returns that division's best set, so that what
// it leaves behind still groups well.
package baseline

import (
	"fmt"
	"slices"
	"sort"
)

// PCIeLevel scores, by NVML topology level.
const (
	scoreCrossCPU     = 10 // NVML_TOPOLOGY_SYSTEM
	scoreSameCPU      = 20 // NVML_TOPOLOGY_NODE
	scoreHostBridge   = 30 // NVML_TOPOLOGY_HOSTBRIDGE
	scoreMultiSwitch  = 40 // NVML_TOPOLOGY_MULTIPLE
	scoreSingleSwitch = 50 // NVML_TOPOLOGY_SINGLE
	scoreSameBoard    = 60 // NVML_TOPOLOGY_INTERNAL
	scorePerNVLink    = 100
	// maxNVLinks is the most links between two GPUs the allocator tells apart.
	maxNVLinks = 18
)

// PolicyName names the policy in reports.
const PolicyName = "NVIDIA device plugin preferred allocation (go-gpuallocator best-effort policy)"

// Graph is what the policy knows about one node: the score of every pair of its GPUs.
type Graph struct {
	score [][]int
	// exhaustive turns the pruning off (tests compare both walks).
	exhaustive bool
}

// NewGraph makes a graph of n GPUs with no links between them.
func NewGraph(n int) *Graph {
	g := &Graph{score: make([][]int, n)}
	for i := range g.score {
		g.score[i] = make([]int, n)
	}
	return g
}

// Len is the number of GPUs.
func (g *Graph) Len() int { return len(g.score) }

// Level is a PCIe topology level as NVML reports it (0 same board ... 50 across sockets).
type Level int

// NVML's levels.
const (
	LevelInternal   Level = 0
	LevelSingle     Level = 10
	LevelMultiple   Level = 20
	LevelHostBridge Level = 30
	LevelNode       Level = 40
	LevelSystem     Level = 50
)

func levelScore(l Level) (int, error) {
	switch l {
	case LevelInternal:
		return scoreSameBoard, nil
	case LevelSingle:
		return scoreSingleSwitch, nil
	case LevelMultiple:
		return scoreMultiSwitch, nil
	case LevelHostBridge:
		return scoreHostBridge, nil
	case LevelNode:
		return scoreSameCPU, nil
	case LevelSystem:
		return scoreCrossCPU, nil
	}
	return 0, fmt.Errorf("unknown PCIe topology level %d", l)
}

// SetPCIe records the PCIe level between GPUs a and b (both ways).
func (g *Graph) SetPCIe(a, b int, l Level) error {
	s, err := levelScore(l)
	if err != nil {
		return fmt.Errorf("GPUs %d and %d: %w", a, b, err)
	}
	g.score[a][b] += s
	g.score[b][a] += s
	return nil
}

// AddNVLinks records n NVLink links joining GPUs a and b directly (both ways); the allocator
// tells apart at most 18.
func (g *Graph) AddNVLinks(a, b, n int) {
	s := min(n, maxNVLinks) * scorePerNVLink
	g.score[a][b] += s
	g.score[b][a] += s
}

// Score of a pair.
func (g *Graph) Score(a, b int) int {
	if a < 0 || b < 0 || a == b {
		return 0
	}
	return g.score[a][b]
}

// setScore sums the pair scores of set (pad entries, -1, score nothing).
func (g *Graph) setScore(set []int) int {
	s := 0
	for i, a := range set {
		for _, b := range set[i+1:] {
			s += g.Score(a, b)
		}
	}
	return s
}

const pad = -1

// Allocate picks size GPUs out of available (GPU indexes), which must include all of required,
// as the best-effort policy does; it returns them sorted, or nil when it cannot (too few GPUs,
// or required not satisfiable).
func (g *Graph) Allocate(available, required []int, size int) []int {
	if size <= 0 || len(available) < size || len(required) > size || len(required) > len(available) {
		return nil
	}
	avail := slices.Clone(available)
	sort.Ints(avail)
	for _, r := range required {
		if !slices.Contains(avail, r) {
			return nil
		}
	}
	var best [][]int
	bestScore := 0
	found := false
	g.partitions(avail, size, func(p [][]int, score int) {
		if !partitionHasSetWithAll(p, required) {
			return
		}
		if !found || score > bestScore {
			best, bestScore, found = clonePartition(p), score, true
		}
	}, func() (int, bool) { return bestScore, found })
	var bestSet []int
	setBest := 0
	for _, set := range best {
		if !containsAll(set, required) {
			continue
		}
		if s := g.setScore(set); bestSet == nil || s > setBest {
			bestSet, setBest = set, s
		}
	}
	if bestSet == nil {
		return nil
	}
	out := slices.Clone(bestSet)
	sort.Ints(out)
	return out
}

func containsAll(set, sub []int) bool {
	for _, x := range sub {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

func padding(set []int) int {
	n := 0
	for _, x := range set {
		if x == pad {
			n++
		}
	}
	return n
}

// partitionHasSetWithAll: some set of p holds all of required and no padding.
func partitionHasSetWithAll(p [][]int, required []int) bool {
	for _, set := range p {
		if containsAll(set, required) && padding(set) == 0 {
			return true
		}
	}
	return false
}

func clonePartition(p [][]int) [][]int {
	out := make([][]int, len(p))
	for i, s := range p {
		out[i] = slices.Clone(s)
	}
	return out
}

// partitions calls f with every division of devices (padded with pad entries to a multiple of
// size) into sets of size, in the allocator's order: each set's first device is the lowest one
// left, and the rest follow in lexicographic order. A set holds either all the padding or none.
//
// It skips any branch whose every partition scores no more than the best found so far (best):
// the allocator keeps the first partition of the highest score, so such a branch could never
// replace it; the answer is the same as walking every partition, only faster on 16 GPUs.
func (g *Graph) partitions(devices []int, size int, f func([][]int, int), best func() (int, bool)) {
	if size == 1 {
		for _, d := range devices {
			f([][]int{{d}}, 0)
		}
		return
	}
	devs := slices.Clone(devices)
	for len(devs)%size != 0 {
		devs = append(devs, pad)
	}
	totalPad := padding(devs)
	var rec func(rest []int, accum [][]int, accScore int)
	rec = func(rest []int, accum [][]int, accScore int) {
		if len(rest) == size {
			f(append(accum, rest), accScore+g.setScore(rest))
			return
		}
		if b, ok := best(); ok && !g.exhaustive && accScore+g.bound(rest, size) <= b {
			return
		}
		first := rest[0]
		others := rest[1:]
		idx := make([]int, size-1)
		var choose func(level, start int)
		set := make([]int, size)
		set[0] = first
		choose = func(level, start int) {
			if level == size-1 {
				if p := padding(set); p != 0 && p != totalPad {
					return
				}
				chosen := slices.Clone(set)
				rec(removeChosen(rest, idx, size), append(accum, chosen), accScore+g.setScore(chosen))
				return
			}
			for i := start; i < len(others); i++ {
				idx[level] = i + 1 // position in rest
				set[level+1] = others[i]
				choose(level+1, i+1)
			}
		}
		choose(0, 0)
	}
	rec(devs, nil, 0)
}

// removeChosen returns rest without position 0 and the positions in idx (pad entries are
// told apart by position, not value).
func removeChosen(rest []int, idx []int, size int) []int {
	out := make([]int, 0, len(rest)-size)
	for i, d := range rest {
		if i == 0 || slices.Contains(idx, i) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// bound is at least the highest total score any division of rest into sets of size can have:
// each GPU's pairs inside its set are at most its size-1 best pairs among rest, and every pair
// is counted from both ends.
func (g *Graph) bound(rest []int, size int) int {
	total := 0
	tops := make([]int, 0, len(rest))
	for _, a := range rest {
		if a == pad {
			continue
		}
		tops = tops[:0]
		for _, b := range rest {
			if b != pad && b != a {
				tops = append(tops, g.Score(a, b))
			}
		}
		sort.Sort(sort.Reverse(sort.IntSlice(tops)))
		for _, s := range tops[:min(size-1, len(tops))] {
			total += s
		}
	}
	return total / 2
}
