package main

import (
	"maps"
	"slices"
	"testing"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// The GPUs whose MPS daemon must keep running are those the leases say Shared pods hold: a GPU
// without shares, or whose shares count no sharer, is not one of them.
func TestSharedGPUsAreThoseWithSharers(t *testing.T) {
	devs := []apiv1.Device{
		{ID: 0, UUID: "GPU-a", Shares: &apiv1.DeviceShares{Sharers: 2, MemoryMiB: 1024}},
		{ID: 1, UUID: "GPU-b"},
		{ID: 2, UUID: "GPU-c", Shares: &apiv1.DeviceShares{}},
		{ID: 3, UUID: "GPU-d", Shares: &apiv1.DeviceShares{Sharers: 1}},
		{ID: 4, Shares: &apiv1.DeviceShares{Sharers: 1}}, // no UUID: nothing to name a daemon by
	}
	got := slices.Sorted(maps.Keys(sharedGPUs(devs)))
	if !slices.Equal(got, []string{"GPU-a", "GPU-d"}) {
		t.Fatalf("sharedGPUs = %q, want GPU-a and GPU-d", got)
	}
}
