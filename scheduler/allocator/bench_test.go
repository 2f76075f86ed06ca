package allocator

import (
	"fmt"
	"testing"
)

// Each benchmark is one placement decision for one node, the unit of work the scheduler's
// Filter and Score do per node.
func BenchmarkAllocate(b *testing.B) {
	cases := []struct {
		name string
		node *Node
		req  Request
	}{
		{"8gpu-dgx/1gpu", DGX("n", 8, 600).HeldBy("p", 0, 3).Node(), Request{Count: 1}},
		{"8gpu-two-island/4gpu-preferred", seedBox().HeldBy("p", 1).Node(), Request{Count: 4, MinBandwidthGBps: 600}},
		{"8gpu-two-island/2gpu-required", seedBox().Node(), Request{Count: 2, Topology: Required, MinBandwidthGBps: 600}},
		{"8gpu-pairs/spread-4", NVLinkPairs("n", 8, 100).Node(), Request{Count: 4, Policy: Spread}},
		{"8gpu-two-island/preferIds", seedBox().HeldBy("p", 2).Node(), Request{Count: 2, Policy: PreferIDs, PreferIDs: []int{2, 3}}},
		{"16gpu-4-islands/4gpu", fourIslands16().HeldBy("p", 0, 5, 10).Node(), Request{Count: 4}},
		{"16gpu-4-islands/8gpu-cross", fourIslands16().Node(), Request{Count: 8}},
		// The most a GpuNodeStatus may list (apiv1.MaxGPUsPerNode): the cost of the largest node.
		{"64gpu-one-island/1gpu", DGX("n", 64, 600).HeldBy("p", 0, 3).Node(), Request{Count: 1}},
		{"64gpu-one-island/8gpu", DGX("n", 64, 600).HeldBy("p", 0, 3).Node(), Request{Count: 8}},
		{"64gpu-pairs/spread-8", NVLinkPairs("n", 64, 100).Node(), Request{Count: 8, Policy: Spread}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := Allocate(c.node, c.req)
				if err != nil {
					b.Fatal(err)
				}
				_ = NodeScore(c.node, res, Binpack)
			}
		})
	}
}

func fourIslands16() *Builder {
	b := NewBuilder("n16")
	for i := 0; i < 4; i++ {
		b.Island(fmt.Sprintf("island-%d", i), 300, 4*i, 4*i+1, 4*i+2, 4*i+3)
	}
	return b
}
