package allocator

import (
	"math"
	"slices"
)

// Fragmentation is the node strategy of Fragmentation Gradient Descent (Weng et al., "Beware of
// Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX
// ATC '23), written from the paper's definitions: a node's fragmentation for a workload is the
// free GPU capacity that the workload's tasks, weighted by how often each shape arrives, could
// not use; a pod goes where placing it raises that the least (or lowers it the most). Among the
// nodes the filter accepted only: the placement on each node, and so the island rules of
// multi-GPU claims, is the allocator's as for every other strategy.
const Fragmentation Strategy = "fragmentation"

// FullMilli is one whole GPU in milli-GPU, the unit of shares here.
const FullMilli = 1000

// Shape is the request of one task: GPUs devices each with at least Milli milli-GPU free
// (Milli 1000: whole GPUs; a Shared claim's computePercent 30 is Milli 300).
type Shape struct {
	Milli int
	GPUs  int
}

// WeightedShape is a shape and its popularity in the workload; popularities need not sum to 1.
type WeightedShape struct {
	Shape
	Weight float64
}

// TypicalDemand is the workload assumed before any has been seen: every shape equally likely,
// from a quarter of a GPU to a full 8-GPU box, the shapes the public GPU traces are made of.
func TypicalDemand() []WeightedShape {
	shapes := []Shape{{250, 1}, {500, 1}, {750, 1}, {1000, 1}, {1000, 2}, {1000, 4}, {1000, 8}}
	out := make([]WeightedShape, len(shapes))
	for i, s := range shapes {
		out[i] = WeightedShape{s, 1}
	}
	return out
}

// shapeFragment is the free capacity (milli-GPU) of a node, its GPUs free by free, that a task
// of shape s cannot use: everything when the task does not fit on the node at all, else the
// free remainders of the GPUs too small for it (a GPU with 300 free is lost to a 500 task and to
// any whole-GPU task, but not to a 250 one).
func shapeFragment(free []int, s Shape) int {
	fitting, all, small := 0, 0, 0
	for _, f := range free {
		all += f
		if f >= s.Milli && f > 0 {
			fitting++
		} else {
			small += f
		}
	}
	if fitting < s.GPUs {
		return all
	}
	return small
}

// NodeFragmentation is the expected free capacity, in milli-GPU, of a node whose GPUs have free
// milli-GPU each, that a task drawn from demand could not use.
func NodeFragmentation(free []int, demand []WeightedShape) float64 {
	var sum, weights float64
	for _, d := range demand {
		if d.Weight <= 0 || d.GPUs < 1 || d.Milli < 1 {
			continue
		}
		sum += d.Weight * float64(shapeFragment(free, d.Shape))
		weights += d.Weight
	}
	if weights == 0 {
		return 0
	}
	return sum / weights
}

// FreeMilli is the milli-GPU of each healthy GPU of the node not yet taken: none for one held
// exclusively; for one with Shared holders, what their compute shares leave (none when they
// reserve no compute: a holder without a compute share may use all of it); a whole GPU
// otherwise. Unhealthy GPUs serve nobody and are left out. IDs are the GPU IDs in the same order.
func FreeMilli(n *Node) (ids, free []int) {
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Health != Healthy {
			continue
		}
		f := FullMilli
		switch {
		case g.ExclusiveHolder != "":
			f = 0
		case g.SharedHolders > 0 && g.SharedComputePercent <= 0:
			f = 0
		case g.SharedHolders > 0:
			f = max(0, FullMilli-g.SharedComputePercent*FullMilli/100)
		}
		ids = append(ids, g.ID)
		free = append(free, f)
	}
	return ids, free
}

// FragmentationDelta is how much placing a task that takes milli-GPU of each of the GPUs ids
// changes the node's fragmentation for demand (negative: it fills capacity that was lost
// anyway). The node's free GPUs are free, their IDs gpuIDs, as FreeMilli returns them.
func FragmentationDelta(gpuIDs, free []int, ids []int, milli int, demand []WeightedShape) float64 {
	before := NodeFragmentation(free, demand)
	after := slices.Clone(free)
	for i, id := range gpuIDs {
		if slices.Contains(ids, id) {
			after[i] = max(0, after[i]-milli)
		}
	}
	return NodeFragmentation(after, demand) - before
}

// FragmentationScores turns the fragmentation change of placing the pod on each candidate node
// into the framework's 0..100: the node whose fragmentation grows least scores 100, the one whose
// grows most 0, evenly between; all equal score 100.
func FragmentationScores(deltas map[string]float64) map[string]int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, d := range deltas {
		lo, hi = math.Min(lo, d), math.Max(hi, d)
	}
	out := make(map[string]int, len(deltas))
	for n, d := range deltas {
		if hi == lo {
			out[n] = 100
			continue
		}
		out[n] = int(math.Round(100 * (hi - d) / (hi - lo)))
	}
	return out
}
