package metrics

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestComputeFill: two 8-GPU nodes; arrivals 4, 4, 8, 2, 8, 1 where the second 8-GPU pod
// finds no room. The figures follow by hand.
func TestComputeFill(t *testing.T) {
	eight := []string{"a", "a", "a", "a", "a", "a", "a", "a"}
	in := Input{
		Nodes: []Node{{Name: "n0", Islands: eight}, {Name: "n1", Islands: eight}},
		Pods: []Pod{
			{Name: "p0", GPUs: 4, BoundOK: true, Node: "n0"},
			{Name: "p1", GPUs: 4, BoundOK: true, Node: "n1"}, // a spread placement: no room for 8
			{Name: "p2", GPUs: 8},
			{Name: "p3", GPUs: 2, BoundOK: true, Node: "n0"},
			{Name: "p4", GPUs: 8},
			{Name: "p5", GPUs: 1, BoundOK: true, Node: "n1"},
		},
	}
	got := ComputeFill(in)
	want := Fill{
		TotalGPUs: 16,
		Curve: []FillPoint{
			{Arrived: 1, Requested: 4.0 / 16, Allocation: 4.0 / 16},
			{Arrived: 2, Requested: 8.0 / 16, Allocation: 8.0 / 16},
			{Arrived: 3, Requested: 16.0 / 16, Allocation: 8.0 / 16},
			{Arrived: 4, Requested: 18.0 / 16, Allocation: 10.0 / 16},
			{Arrived: 5, Requested: 26.0 / 16, Allocation: 10.0 / 16},
			{Arrived: 6, Requested: 27.0 / 16, Allocation: 11.0 / 16},
		},
		// Demand passed 10 and 20 % with p0, up to 50 % with p1, the rest with p2.
		Steps: []FillPoint{
			{1, 4.0 / 16, 4.0 / 16}, {1, 4.0 / 16, 4.0 / 16},
			{2, 8.0 / 16, 8.0 / 16}, {2, 8.0 / 16, 8.0 / 16}, {2, 8.0 / 16, 8.0 / 16},
			{3, 1, 8.0 / 16}, {3, 1, 8.0 / 16}, {3, 1, 8.0 / 16}, {3, 1, 8.0 / 16}, {3, 1, 8.0 / 16},
		},
		Allocation: 11.0 / 16, AllocatedGPU: 11,
		FirstUnplaced: 3, FirstUnplacedPod: "p2", FirstUnplacedGPUs: 8, AllocationAtFirstUnplaced: 8.0 / 16,
		Arrived4: 2, Placed4: 2, Arrived8: 2, Placed8: 0,
		// Sizes 1,2,4,4,8,8 (27 GPUs): 1+2+4+4 = 11 < 13.5, so the median request is 8; every
		// free GPU (2 on n0, 3 on n1) is stranded.
		TypicalRequest: 8, FreeGPUs: 5, StrandedGPUs: 5, Fragmentation: 1,
		// When p2 (8 GPUs) came, p0 and p1 held 4 on each node: 8 free GPUs, none of them on a
		// node with 8 free.
		FreeAtFirstUnplaced: 8, StrandedAtFirstUnplaced: 8, FragmentationAtFirstUnplaced: 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ComputeFill (-want +got):\n%s", diff)
	}
	// A pod that ended holds nothing; with it gone from n0 its GPUs are free again.
	in.Pods[3].EndedOK = true
	got = ComputeFill(in)
	if got.AllocatedGPU != 9 || got.FreeGPUs != 7 || got.FirstUnplaced != 3 {
		t.Errorf("after p3 ended: allocated %d, free %d, first unplaced %d; want 9, 7, 3", got.AllocatedGPU, got.FreeGPUs, got.FirstUnplaced)
	}
	if m := weightedMedian([]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 8}); m != 1 {
		t.Errorf("weighted median of nine 1s and one 8 = %d, want 1", m)
	}
}

// TestComputeFillParts: a shared pod counts as its part of a GPU, in the demand and in the
// allocation; the steps stop where the arrivals stop.
func TestComputeFillParts(t *testing.T) {
	in := Input{
		Nodes: []Node{{Name: "n0", Islands: []string{"a", "b", "c", "d"}}},
		Pods: []Pod{
			{Name: "p0", GPUs: 1, Shared: true, Part: 0.3, BoundOK: true, Node: "n0"},
			{Name: "p1", GPUs: 1, Shared: true, Part: 0.5, BoundOK: true, Node: "n0"},
			{Name: "p2", GPUs: 1, Shared: true, Part: 0.4},
		},
	}
	got := ComputeFill(in)
	if got.Allocation != 0.8/4 || got.AllocatedGPU != 1 {
		t.Errorf("allocation %v (%d GPUs), want 0.2 (1)", got.Allocation, got.AllocatedGPU)
	}
	want := []FillPoint{{2, 0.8 / 4, 0.8 / 4}, {2, 0.8 / 4, 0.8 / 4}, {3, 1.2 / 4, 0.8 / 4}}
	if diff := cmp.Diff(want, got.Steps, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}
