package gpuclaim

import (
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

func TestLedgerGPUCounts(t *testing.T) {
	l := newLedger()
	h100 := seedStatus("a", time.Now())
	for i := range h100.Status.Devices {
		h100.Status.Devices[i].Product = "NVIDIA H100 80GB HBM3"
	}
	l.setStatus(h100)
	l.setStatus(seedStatus("b", time.Now())) // no product reported
	l.add("pod-1", "a", []int{0, 1}, false, fromLease)
	l.add("pod-2", "a", []int{2}, true, fromLease)
	l.add("pod-3", "a", []int{7}, false, fromLease) // held but unhealthy: counted unhealthy

	got := l.gpuCounts()
	sort.Slice(got, func(i, j int) bool { return got[i].Model+got[i].State < got[j].Model+got[j].State })
	want := []metrics.GPUCount{
		{Model: "NVIDIA H100 80GB HBM3", State: metrics.StateAllocated, Count: 3},
		{Model: "NVIDIA H100 80GB HBM3", State: metrics.StateFree, Count: 4},
		{Model: "NVIDIA H100 80GB HBM3", State: metrics.StateUnhealthy, Count: 1},
		{Model: "unknown", State: metrics.StateFree, Count: 7},
		{Model: "unknown", State: metrics.StateUnhealthy, Count: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("gpuCounts = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("gpuCounts[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestWaitingPendingStats(t *testing.T) {
	w := newWaitingPods()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if n, age := w.pendingStats(now); n != 0 || age != 0 {
		t.Errorf("empty: %d, %v", n, age)
	}
	old := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "a", CreationTimestamp: metav1.NewTime(now.Add(-10 * time.Minute))}}
	young := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "b", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))}}
	w.add(old, "ns/a", "")
	w.add(young, "ns/b", "")
	if n, age := w.pendingStats(now); n != 2 || age != 600 {
		t.Errorf("two waiting: %d, %v; want 2, 600", n, age)
	}
	w.remove("a")
	if n, age := w.pendingStats(now); n != 1 || age != 60 {
		t.Errorf("after the old one left: %d, %v; want 1, 60", n, age)
	}
}
