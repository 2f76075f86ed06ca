package baseline

import (
	"slices"
	"testing"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
)

// TestGraphFromMockNVML: the dgx1-v100 preset, read through the agent's NVML adapter from the
// mock server, is the graph of go-gpuallocator's DGX-1 Volta test node, so the policy picks
// the same GPUs on it.
func TestGraphFromMockNVML(t *testing.T) {
	g, err := ForTopology("dgx1-v100")
	if err != nil {
		t.Fatal(err)
	}
	want := dgx1Volta(t)
	for a := range 8 {
		for b := range 8 {
			if g.Score(a, b) != want.Score(a, b) {
				t.Errorf("score of GPUs %d and %d: %d from the mock NVML, %d in the allocator's test node", a, b, g.Score(a, b), want.Score(a, b))
			}
		}
	}
	sequence(t, g, []step{{2, []int{0, 3}}, {2, []int{1, 2}}, {2, []int{4, 7}}, {2, []int{5, 6}}, {1, nil}})
}

// TestPresetPicks: what the device plugin picks on shipped presets. On NVSwitch systems the
// allocator sees no GPU-to-GPU NVLink (the links end at a switch) and goes by PCIe alone; on
// NVLink-bridged pairs it keeps a pair together.
func TestPresetPicks(t *testing.T) {
	all := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	for _, tc := range []struct {
		topology  string
		available []int
		size      int
		want      []int
	}{
		{mock.PCIeNVLinkPairs, []int{1, 2, 3, 4, 6}, 2, []int{2, 3}},
		{mock.PCIeNVLinkPairs, []int{0, 2, 3, 5, 7}, 2, []int{2, 3}},
		{mock.DGXH100, []int{0, 2, 3, 5}, 2, []int{2, 3}}, // same PCIe switch, no NVLink seen
		{mock.TwoIsland, []int{1, 4, 5}, 2, []int{4, 5}},  // one PCIe switch beats the host bridge
		{mock.TwoIsland, []int{0, 2, 3, 4, 5, 6}, 3, []int{0, 2, 3}},
		{mock.PCIeOnly, []int{0, 2, 3, 5}, 2, []int{2, 3}},
		{"dgx-2", all(16), 2, []int{0, 1}},
		{"dgx-2", all(16), 3, []int{0, 1, 2}},
		{"dgx-2", all(16), 4, []int{0, 1, 2, 3}},
		{"gb200-nvl72", []int{0, 1, 2, 3}, 2, []int{0, 1}},
	} {
		g, err := ForTopology(tc.topology)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Allocate(tc.available, nil, tc.size); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Allocate(%v, %d) = %v, want %v", tc.topology, tc.available, tc.size, got, tc.want)
		}
	}
}
