package allocator

import (
	"cmp"
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
// (Milli 1000: whole GPUs; a Shared claim's computePercent 30 is Milli 300), and the CPU
// (millicores) and memory (MiB) the pod asks of its node; 0 asks none.
type Shape struct {
	Milli     int
	GPUs      int
	CPUMilli  int64
	MemoryMiB int64
}

// WeightedShape is a shape and its popularity in the workload; popularities need not sum to 1.
type WeightedShape struct {
	Shape
	Weight float64
}

// TypicalDemand is the workload assumed before any has been seen: every shape equally likely,
// from a quarter of a GPU to a full 8-GPU box, the shapes the public GPU traces are made of
// (without CPU or memory: nothing is assumed of them before a pod states them).
func TypicalDemand() []WeightedShape {
	shapes := []Shape{{Milli: 250, GPUs: 1}, {Milli: 500, GPUs: 1}, {Milli: 750, GPUs: 1}, {Milli: 1000, GPUs: 1}, {Milli: 1000, GPUs: 2}, {Milli: 1000, GPUs: 4}, {Milli: 1000, GPUs: 8}}
	out := make([]WeightedShape, len(shapes))
	for i, s := range shapes {
		out[i] = WeightedShape{s, 1}
	}
	return out
}

// NodeRoom is what a node has free besides its GPUs: millicores of CPU and MiB of memory not
// yet requested by its pods. Unbounded is a node whose room is not known: nothing is refused
// for lack of it.
type NodeRoom struct {
	CPUMilli  int64
	MemoryMiB int64
}

// Unbounded is the room of a node that states no CPU or memory.
var Unbounded = NodeRoom{CPUMilli: math.MaxInt64, MemoryMiB: math.MaxInt64}

// NodeFree is a node's free capacity as the fragmentation measure sees it: the free milli-GPU
// of each healthy GPU (FreeMilli) and the CPU and memory left.
type NodeFree struct {
	GPUs []int
	Room NodeRoom
}

// shapeFragment is the free GPU capacity (milli-GPU) of a node that a task of shape s cannot
// use: all of it when the task cannot run on the node at all, for want of GPUs or of CPU or
// memory (FGD's case of a node whose CPUs are taken: its free GPUs serve no task that needs
// CPU); else the free remainders of the GPUs too small for it (a GPU with 300 free is lost to a
// 500 task and to any whole-GPU task, but not to a 250 one).
func shapeFragment(n NodeFree, s Shape) int {
	fitting, all, small := 0, 0, 0
	for _, f := range n.GPUs {
		all += f
		if f >= s.Milli && f > 0 {
			fitting++
		} else {
			small += f
		}
	}
	if fitting < s.GPUs || s.CPUMilli > n.Room.CPUMilli || s.MemoryMiB > n.Room.MemoryMiB {
		return all
	}
	return small
}

// NodeFragmentation is the expected free capacity, in milli-GPU, of a node that a task drawn
// from demand could not use.
func NodeFragmentation(n NodeFree, demand []WeightedShape) float64 {
	var sum, weights float64
	for _, d := range demand {
		if d.Weight <= 0 || d.GPUs < 1 || d.Milli < 1 {
			continue
		}
		sum += d.Weight * float64(shapeFragment(n, d.Shape))
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

// FragmentationDelta is how much placing task on the GPUs ids of a node changes the node's
// fragmentation for demand (negative: it fills capacity that was lost anyway). The task takes
// task.Milli of each of those GPUs and its CPU and memory from the node's room; gpuIDs are the
// IDs of n.GPUs, as FreeMilli returns them.
func FragmentationDelta(gpuIDs []int, n NodeFree, ids []int, task Shape, demand []WeightedShape) float64 {
	before := NodeFragmentation(n, demand)
	after := NodeFree{GPUs: slices.Clone(n.GPUs), Room: n.Room}
	for i, id := range gpuIDs {
		if slices.Contains(ids, id) {
			after.GPUs[i] = max(0, after.GPUs[i]-task.Milli)
		}
	}
	after.Room.CPUMilli = subRoom(after.Room.CPUMilli, task.CPUMilli)
	after.Room.MemoryMiB = subRoom(after.Room.MemoryMiB, task.MemoryMiB)
	return NodeFragmentation(after, demand) - before
}

// subRoom takes used from room, leaving an unbounded room unbounded.
func subRoom(room, used int64) int64 {
	if room == math.MaxInt64 {
		return room
	}
	return room - used
}

// LeastFragmentingGPU is, of the node's GPUs (gpuIDs, free as in n) that can host the one-GPU
// task, the one whose taking raises the node's fragmentation least, and that rise: where on a
// node a shared task lands decides what is left for the next ones. fits says whether a GPU can
// host the task (the allocator's caps); it is asked in order of rise, so mostly once. GPUs with
// the same free capacity give the same rise, which is computed once for them. Ties go to the
// lower ID. ok is false when no GPU fits.
func LeastFragmentingGPU(gpuIDs []int, n NodeFree, task Shape, demand []WeightedShape, fits func(id int) bool) (id int, delta float64, ok bool) {
	type option struct {
		free  int
		delta float64
	}
	var opts []option
	for i, f := range n.GPUs {
		if f < task.Milli || f <= 0 || slices.ContainsFunc(opts, func(o option) bool { return o.free == f }) {
			continue
		}
		opts = append(opts, option{f, FragmentationDelta(gpuIDs, n, []int{gpuIDs[i]}, task, demand)})
	}
	slices.SortStableFunc(opts, func(a, b option) int { return cmp.Compare(a.delta, b.delta) })
	for _, o := range opts {
		for i, f := range n.GPUs {
			if f == o.free && fits(gpuIDs[i]) {
				return gpuIDs[i], o.delta, true
			}
		}
	}
	return 0, 0, false
}

// FragmentationScores turns the fragmentation change of placing the pod on each candidate node
// into the framework's 0..100. FGD places a pod where its fragmentation grows least, and only
// that node matters: the nodes whose growth is the least (to a milli-GPU) score 100, the others
// at most fragmentationRunnerUp, in order of their growth down to 0 for the most. The gap keeps
// the framework's default score plugins (CPU spreading and balance, weight 1 each against the
// plugin's 10: at most 200 of its 1,000) from overturning FGD's pick; among equal pickings they
// decide.
func FragmentationScores(deltas map[string]float64) map[string]int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, d := range deltas {
		lo, hi = math.Min(lo, d), math.Max(hi, d)
	}
	out := make(map[string]int, len(deltas))
	for n, d := range deltas {
		if d-lo < fragmentationTie {
			out[n] = 100
			continue
		}
		out[n] = int(math.Round(fragmentationRunnerUp * (hi - d) / (hi - lo)))
	}
	return out
}

// fragmentationTie is the growth difference, in milli-GPU, below which two nodes are equal.
const fragmentationTie = 1

// fragmentationRunnerUp is the highest score of a node that is not FGD's pick (see
// FragmentationScores): 100 less 25 points, which the plugin's weight 10 makes 250 of the
// framework's, more than the 200 its default score plugins can add.
const fragmentationRunnerUp = 75
