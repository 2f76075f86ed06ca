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
		{"half GPU, one small remainder", []int{1000, 1000, 300, 0}, Shape{500, 1}, 300},
		// Whole-GPU tasks cannot use any part of a GPU already shared.
		{"whole GPU, partly used GPUs lost", []int{1000, 700, 300}, Shape{1000, 1}, 1000},
		// A task that fits nowhere on the node loses all of it to fragmentation.
		{"does not fit at all", []int{1000, 1000, 300}, Shape{1000, 4}, 2300},
		{"small task uses every remainder", []int{1000, 300, 250}, Shape{250, 1}, 0},
		{"nothing free", []int{0, 0}, Shape{100, 1}, 0},
	} {
		if got := shapeFragment(c.free, c.shape); got != c.want {
			t.Errorf("%s: shapeFragment(%v, %v) = %d, want %d", c.name, c.free, c.shape, got, c.want)
		}
	}
}

func TestNodeFragmentationWeighsByPopularity(t *testing.T) {
	free := []int{1000, 600, 200}
	// 250: 200 lost; 1 GPU: 800 lost. Weights 3:1 give (3*200 + 800) / 4.
	demand := []WeightedShape{{Shape{250, 1}, 3}, {Shape{1000, 1}, 1}, {Shape{0, 1}, 5}, {Shape{500, 1}, 0}}
	if got := NodeFragmentation(free, demand); math.Abs(got-350) > 1e-9 {
		t.Fatalf("NodeFragmentation = %v, want 350", got)
	}
	if got := NodeFragmentation(free, nil); got != 0 {
		t.Fatalf("no demand: %v, want 0", got)
	}
}

// Two nodes, a 300 milli-GPU task, a workload of half-GPU tasks: binpack (fullest first) puts it
// on the half-used GPU and strands 200 milli-GPU no half-GPU task can use; fragmentation puts it
// on the whole GPU, whose 700 left still take one.
func TestFragmentationAvoidsStranding(t *testing.T) {
	demand := []WeightedShape{{Shape{500, 1}, 1}}
	half := FragmentationDelta([]int{0}, []int{500}, []int{0}, 300, demand)
	whole := FragmentationDelta([]int{0}, []int{1000}, []int{0}, 300, demand)
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
	demand := []WeightedShape{{Shape{1000, 2}, 1}}
	ids, free := FreeMilli(a)
	da := FragmentationDelta(ids, free, ra.IDs, FullMilli, demand)
	ids, free = FreeMilli(b)
	db := FragmentationDelta(ids, free, rb.IDs, FullMilli, demand)
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

func TestFragmentationScoresRange(t *testing.T) {
	s := FragmentationScores(map[string]float64{"a": -500, "b": 0, "c": 500})
	if !maps.Equal(s, map[string]int{"a": 100, "b": 50, "c": 0}) {
		t.Fatalf("scores %v", s)
	}
	if s := FragmentationScores(map[string]float64{"a": 3, "b": 3}); s["a"] != 100 || s["b"] != 100 {
		t.Fatalf("equal deltas: %v", s)
	}
}

// A 30 % share fits exactly on a GPU whose sharers reserve 70 % of its compute: placed there it
// removes a remainder no half-GPU or whole-GPU task could use; on a free GPU it would leave 700
// that no whole-GPU task can use.
func TestFragmentationFillsSharedRemainder(t *testing.T) {
	demand := []WeightedShape{{Shape{500, 1}, 1}, {Shape{1000, 1}, 1}}
	shared := &Node{Name: "a", GPUs: []GPU{{ID: 0, SharedHolders: 2, SharedComputePercent: 70, UtilizationPercent: -1}}}
	free := &Node{Name: "b", GPUs: []GPU{{ID: 0, UtilizationPercent: -1}}}
	ids, f := FreeMilli(shared)
	da := FragmentationDelta(ids, f, []int{0}, 300, demand)
	ids, f = FreeMilli(free)
	db := FragmentationDelta(ids, f, []int{0}, 300, demand)
	if da != -300 || db != 350 {
		t.Fatalf("deltas: onto the shared GPU %v (want -300), onto the free one %v (want 350)", da, db)
	}
}
