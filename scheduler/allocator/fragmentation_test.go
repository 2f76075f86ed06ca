package allocator

import (
	"maps"
	"math"
	"slices"
	"testing"
)

func TestShapeFragment(t *testing.T) {
	for _, c := range []struct {
		name  string
		free  []int
		shape Shape
		want  int
	}{
		// A GPU with 300 free is lost to a half-GPU task; the whole GPUs are not.
		{"half GPU, one small remainder", []int{1000, 1000, 300, 0}, Shape{Milli: 500, GPUs: 1}, 300},
		// Whole-GPU tasks cannot use any part of a GPU already shared.
		{"whole GPU, partly used GPUs lost", []int{1000, 700, 300}, Shape{Milli: 1000, GPUs: 1}, 1000},
		// A task that fits nowhere on the node loses all of it to fragmentation.
		{"does not fit at all", []int{1000, 1000, 300}, Shape{Milli: 1000, GPUs: 4}, 2300},
		{"small task uses every remainder", []int{1000, 300, 250}, Shape{Milli: 250, GPUs: 1}, 0},
		{"nothing free", []int{0, 0}, Shape{Milli: 100, GPUs: 1}, 0},
	} {
		if got := shapeFragment(NodeFree{GPUs: c.free, Room: Unbounded}, c.shape); got != c.want {
			t.Errorf("%s: shapeFragment(%v, %v) = %d, want %d", c.name, c.free, c.shape, got, c.want)
		}
	}
}

func TestNodeFragmentationWeighsByPopularity(t *testing.T) {
	free := []int{1000, 600, 200}
	// 250: 200 lost; 1 GPU: 800 lost. Weights 3:1 give (3*200 + 800) / 4.
	demand := []WeightedShape{{Shape{Milli: 250, GPUs: 1}, 3}, {Shape{Milli: 1000, GPUs: 1}, 1}, {Shape{Milli: 0, GPUs: 1}, 5}, {Shape{Milli: 500, GPUs: 1}, 0}}
	if got := NodeFragmentation(NodeFree{GPUs: free, Room: Unbounded}, demand); math.Abs(got-350) > 1e-9 {
		t.Fatalf("NodeFragmentation = %v, want 350", got)
	}
	if got := NodeFragmentation(NodeFree{GPUs: free, Room: Unbounded}, nil); got != 0 {
		t.Fatalf("no demand: %v, want 0", got)
	}
}

// Two nodes, a 300 milli-GPU task, a workload of half-GPU tasks: binpack (fullest first) puts it
// on the half-used GPU and strands 200 milli-GPU no half-GPU task can use; fragmentation puts it
// on the whole GPU, whose 700 left still take one.
func TestFragmentationAvoidsStranding(t *testing.T) {
	demand := []WeightedShape{{Shape{Milli: 500, GPUs: 1}, 1}}
	half := FragmentationDelta([]int{0}, NodeFree{GPUs: []int{500}, Room: Unbounded}, []int{0}, Shape{Milli: 300, GPUs: 1}, demand)
	whole := FragmentationDelta([]int{0}, NodeFree{GPUs: []int{1000}, Room: Unbounded}, []int{0}, Shape{Milli: 300, GPUs: 1}, demand)
	if half != 200 || whole != 0 {
		t.Fatalf("deltas: half-used GPU %v (want 200), whole GPU %v (want 0)", half, whole)
	}
	scores := FragmentationScores(map[string]float64{"half": half, "whole": whole})
	if !maps.Equal(scores, map[string]int{"half": 0, "whole": 100}) {
		t.Fatalf("scores %v", scores)
	}
}

// Whole GPUs, 2-GPU tasks: a 1-GPU pod on the node with 2 free leaves 1 that no 2-GPU task can
// use, where binpack (the fuller node) sends it; on the node with 3 free it leaves 2.
func TestFragmentationAgainstBinpackWholeGPUs(t *testing.T) {
	node := func(name string, used int) *Node {
		n := &Node{Name: name}
		for i := range 4 {
			g := GPU{ID: i, UtilizationPercent: -1}
			if i < used {
				g.ExclusiveHolder = "x"
			}
			n.GPUs = append(n.GPUs, g)
		}
		return n
	}
	a, b := node("a", 1), node("b", 2)
	req := Request{Count: 1, Topology: Ignore}
	ra, err := Allocate(a, req)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Allocate(b, req)
	if err != nil {
		t.Fatal(err)
	}
	if NodeScore(a, ra, Binpack) >= NodeScore(b, rb, Binpack) {
		t.Fatalf("binpack does not prefer the fuller node b: a %d, b %d", NodeScore(a, ra, Binpack), NodeScore(b, rb, Binpack))
	}
	demand := []WeightedShape{{Shape{Milli: 1000, GPUs: 2}, 1}}
	ids, free := FreeMilli(a)
	da := FragmentationDelta(ids, NodeFree{GPUs: free, Room: Unbounded}, ra.IDs, Shape{Milli: FullMilli, GPUs: 1}, demand)
	ids, free = FreeMilli(b)
	db := FragmentationDelta(ids, NodeFree{GPUs: free, Room: Unbounded}, rb.IDs, Shape{Milli: FullMilli, GPUs: 1}, demand)
	if da != 0 || db != 1000 {
		t.Fatalf("deltas a %v (want 0), b %v (want 1000)", da, db)
	}
	if s := FragmentationScores(map[string]float64{"a": da, "b": db}); s["a"] != 100 || s["b"] != 0 {
		t.Fatalf("scores %v", s)
	}
}

func TestFreeMilli(t *testing.T) {
	n := &Node{GPUs: []GPU{{ID: 0}, {ID: 1, ExclusiveHolder: "p"}, {ID: 2, SharedHolders: 2}, {ID: 3, Health: Unhealthy},
		{ID: 4, SharedHolders: 2, SharedComputePercent: 70}}}
	ids, free := FreeMilli(n)
	if want := []int{0, 1, 2, 4}; !slices.Equal(ids, want) {
		t.Fatalf("FreeMilli IDs %v, want %v", ids, want)
	}
	// Shared holders that reserve no compute may use all of it; 70 % reserved leaves 300.
	if want := []int{1000, 0, 0, 300}; !slices.Equal(free, want) {
		t.Fatalf("FreeMilli = %v, want %v", free, want)
	}
}

// FGD's pick scores 100 and every other node at most fragmentationRunnerUp, so that the
// framework's default score plugins (200 of the 1,000 the plugin's weight gives it) cannot
// overturn it: a node whose growth is 1 % of the range worse must not score 99.
func TestFragmentationScoresRange(t *testing.T) {
	s := FragmentationScores(map[string]float64{"a": -500, "a2": -499.5, "b": -490, "c": 500})
	if !maps.Equal(s, map[string]int{"a": 100, "a2": 100, "b": 74, "c": 0}) {
		t.Fatalf("scores %v", s)
	}
	if 100*10-fragmentationRunnerUp*10 <= 200 {
		t.Fatalf("runner-up %d: the gap to FGD's pick is no more than the default plugins' 200", fragmentationRunnerUp)
	}
	if s := FragmentationScores(map[string]float64{"a": 3, "b": 3}); s["a"] != 100 || s["b"] != 100 {
		t.Fatalf("equal deltas: %v", s)
	}
}

// A 30 % share fits exactly on a GPU whose sharers reserve 70 % of its compute: placed there it
// removes a remainder no half-GPU or whole-GPU task could use; on a free GPU it would leave 700
// that no whole-GPU task can use.
func TestFragmentationFillsSharedRemainder(t *testing.T) {
	demand := []WeightedShape{{Shape{Milli: 500, GPUs: 1}, 1}, {Shape{Milli: 1000, GPUs: 1}, 1}}
	shared := &Node{Name: "a", GPUs: []GPU{{ID: 0, SharedHolders: 2, SharedComputePercent: 70, UtilizationPercent: -1}}}
	free := &Node{Name: "b", GPUs: []GPU{{ID: 0, UtilizationPercent: -1}}}
	ids, f := FreeMilli(shared)
	da := FragmentationDelta(ids, NodeFree{GPUs: f, Room: Unbounded}, []int{0}, Shape{Milli: 300, GPUs: 1}, demand)
	ids, f = FreeMilli(free)
	db := FragmentationDelta(ids, NodeFree{GPUs: f, Room: Unbounded}, []int{0}, Shape{Milli: 300, GPUs: 1}, demand)
	if da != -300 || db != 350 {
		t.Fatalf("deltas: onto the shared GPU %v (want -300), onto the free one %v (want 350)", da, db)
	}
}

// FGD's case of a node short of CPU: its free GPUs are fragment for every task that needs more
// CPU than it has left. Two 8-GPU nodes of 64 cores, the workload 1-GPU tasks of 4 cores and
// 8-GPU tasks of 48 cores. A 1-GPU pod asking for 20 cores: binpack (the fuller node) puts it
// on the node with 2 GPUs taken and 40 cores free, which then has 20 cores left, too few for any
// 8-GPU task (it had 6 free GPUs and could not host one anyway) - and on the empty node it would
// leave 44 cores, enough for an 8-GPU task, but only 7 GPUs. The measure must count the CPU: the
// empty node is hurt more (it loses the 8-GPU task), the fuller one less.
func TestFragmentationCountsCPU(t *testing.T) {
	demand := []WeightedShape{{Shape{Milli: 1000, GPUs: 1, CPUMilli: 4000}, 1}, {Shape{Milli: 1000, GPUs: 8, CPUMilli: 48000}, 1}}
	task := Shape{Milli: 1000, GPUs: 1, CPUMilli: 20000}
	ids := []int{0, 1, 2, 3, 4, 5, 6, 7}
	empty := NodeFree{GPUs: []int{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, Room: NodeRoom{CPUMilli: 64000, MemoryMiB: math.MaxInt64}}
	fuller := NodeFree{GPUs: []int{0, 0, 1000, 1000, 1000, 1000, 1000, 1000}, Room: NodeRoom{CPUMilli: 40000, MemoryMiB: math.MaxInt64}}
	de := FragmentationDelta(ids, empty, []int{0}, task, demand)
	df := FragmentationDelta(ids, fuller, []int{2}, task, demand)
	// Empty: before 0 (both fit); after, 7 GPUs and 44 cores: the 8-GPU task fits nowhere, so
	// 7,000 is lost to it: (0 + 7000) / 2. Fuller: 6,000 lost to the 8-GPU task before, 5,000
	// after; the 1-GPU task fits both times: (5000 - 6000) / 2.
	if de != 3500 || df != -500 {
		t.Fatalf("deltas: empty node %v (want 3500), fuller node %v (want -500)", de, df)
	}
	// A node whose CPUs are taken loses all its free GPUs to every task needing CPU.
	starved := NodeFree{GPUs: []int{1000, 1000, 500}, Room: NodeRoom{CPUMilli: 2000, MemoryMiB: math.MaxInt64}}
	if got := NodeFragmentation(starved, demand); got != 2500 {
		t.Fatalf("CPU-starved node: %v, want all 2500 free milli-GPU", got)
	}
	short := NodeFree{GPUs: []int{1000}, Room: NodeRoom{CPUMilli: math.MaxInt64, MemoryMiB: 100}}
	if got := NodeFragmentation(short, []WeightedShape{{Shape{Milli: 1000, GPUs: 1, MemoryMiB: 200}, 1}}); got != 1000 {
		t.Fatalf("memory-short node: %v, want 1000", got)
	}
}

// Where on a node a shared task lands matters: a 300 milli-GPU task onto the GPU with 300 free
// leaves nothing stranded; onto a whole GPU it leaves 700 that the workload's whole-GPU tasks
// cannot use. The allocator's own choice (the lowest ID fitting) is the whole GPU.
func TestLeastFragmentingGPU(t *testing.T) {
	demand := []WeightedShape{{Shape{Milli: 1000, GPUs: 1}, 1}, {Shape{Milli: 300, GPUs: 1}, 1}}
	n := &Node{Name: "a", GPUs: []GPU{{ID: 0, UtilizationPercent: -1}, {ID: 1, SharedHolders: 1, SharedComputePercent: 70, UtilizationPercent: -1}}}
	req := Request{Count: 1, Exclusivity: Shared, Topology: Ignore, Share: Share{ComputePercent: 30}, MaxSharers: 16}
	res, err := Allocate(n, req)
	if err != nil {
		t.Fatal(err)
	}
	ids, free := FreeMilli(n)
	nf := NodeFree{GPUs: free, Room: Unbounded}
	task := Shape{Milli: 300, GPUs: 1}
	all := func(int) bool { return true }
	id, d, ok := LeastFragmentingGPU(ids, nf, task, demand, all)
	if !ok || id != 1 || d != -150 {
		t.Fatalf("LeastFragmentingGPU = %d, %v, %v; want GPU 1, -150", id, d, ok)
	}
	// The caps refuse GPU 1: the next best that fits.
	if id, d, ok := LeastFragmentingGPU(ids, nf, task, demand, func(id int) bool { return id != 1 }); !ok || id != 0 || d != 350 {
		t.Fatalf("GPU 1 refused: %d, %v, %v; want GPU 0, 350", id, d, ok)
	}
	if got := FragmentationDelta(ids, nf, res.IDs, task, demand); !slices.Equal(res.IDs, []int{0}) || got != 350 {
		t.Fatalf("the allocator's choice %v grows fragmentation by %v; the test expects GPU 0 and 350", res.IDs, got)
	}
	if _, _, ok := LeastFragmentingGPU(ids, nf, task, demand, func(int) bool { return false }); ok {
		t.Fatal("a pick where no GPU fits")
	}
}
