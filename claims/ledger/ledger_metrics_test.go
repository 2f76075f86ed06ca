package ledger

import (
	"sort"
	"testing"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func TestLedgerGPUCounts(t *testing.T) {
	l := New()
	h100 := ledgertest.SeedStatus("a", time.Now())
	for i := range h100.Status.Devices {
		h100.Status.Devices[i].Product = "NVIDIA H100 80GB HBM3"
	}
	l.SetStatus(h100)
	l.SetStatus(ledgertest.SeedStatus("b", time.Now())) // no product reported
	l.Add("pod-1", "a", []int{0, 1}, false, FromLease)
	l.Add("pod-2", "a", []int{2}, true, FromLease)
	l.Add("pod-3", "a", []int{7}, false, FromLease) // held but unhealthy: counted unhealthy

	got := l.GPUCounts()
	sort.Slice(got, func(i, j int) bool { return got[i].Model+got[i].State < got[j].Model+got[j].State })
	want := []GPUCount{
		{Model: "NVIDIA H100 80GB HBM3", State: StateAllocated, Count: 3},
		{Model: "NVIDIA H100 80GB HBM3", State: StateFree, Count: 4},
		{Model: "NVIDIA H100 80GB HBM3", State: StateUnhealthy, Count: 1},
		{Model: "unknown", State: StateFree, Count: 7},
		{Model: "unknown", State: StateUnhealthy, Count: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("GPUCounts = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("GPUCounts[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
