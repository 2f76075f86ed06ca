package gpuclaim

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

func TestDemandHistogram(t *testing.T) {
	var h demandHistogram
	half := allocator.Shape{Milli: 500, GPUs: 1}
	for range demandMinSeen - 1 {
		h.observe(half)
	}
	if got := h.demand(); !slices.Equal(got, allocator.TypicalDemand()) {
		t.Fatalf("before %d placements: %v, want the typical demand", demandMinSeen, got)
	}
	h.observe(half)
	if got := h.demand(); len(got) != 1 || got[0].Shape != half {
		t.Fatalf("after %d half-GPU placements: %v", demandMinSeen, got)
	}
	// Old shapes fade: a shape seen once now weighs more than one seen once 2,000 placements ago.
	var aged demandHistogram
	old, recent := allocator.Shape{Milli: 1000, GPUs: 8}, allocator.Shape{Milli: 1000, GPUs: 1}
	aged.observe(old)
	for range 2000 {
		aged.observe(half)
	}
	aged.observe(recent)
	if aged.w[old] >= aged.w[recent]/5 {
		t.Errorf("weights: old %v, recent %v: no decay", aged.w[old], aged.w[recent])
	}
	// Bounded: the lightest shape goes, never the one just seen.
	var many demandHistogram
	for i := range demandMaxShapes + 10 {
		many.observe(allocator.Shape{Milli: 10 + i, GPUs: 1})
	}
	if len(many.w) != demandMaxShapes {
		t.Errorf("%d shapes kept, want %d", len(many.w), demandMaxShapes)
	}
	if _, ok := many.w[allocator.Shape{Milli: 10 + demandMaxShapes + 9, GPUs: 1}]; !ok {
		t.Error("the shape just seen was dropped")
	}
	if _, ok := many.w[allocator.Shape{Milli: 10, GPUs: 1}]; ok {
		t.Error("the oldest (lightest) shape was kept")
	}
	many.observe(allocator.Shape{})
	if many.seen != demandMaxShapes+10 {
		t.Error("an empty shape was counted")
	}
}

func TestClaimShape(t *testing.T) {
	shared := &apiv1.GpuClaim{Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Share: &apiv1.GPUShare{ComputePercent: 30}}}}
	if got := claimShape(shared, &allocator.Request{Count: 1, Exclusivity: allocator.Shared}); got != (allocator.Shape{Milli: 300, GPUs: 1}) {
		t.Errorf("30%% compute share: %v", got)
	}
	memOnly := &apiv1.GpuClaim{Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Share: &apiv1.GPUShare{MemoryPercent: 25}}}}
	if got := claimShape(memOnly, &allocator.Request{Count: 1, Exclusivity: allocator.Shared}); got != (allocator.Shape{Milli: 1000, GPUs: 1}) {
		t.Errorf("memory-only share: %v", got)
	}
	if got := claimShape(nil, &allocator.Request{Count: 4}); got != (allocator.Shape{Milli: 1000, GPUs: 4}) {
		t.Errorf("4 whole GPUs: %v", got)
	}
}

// The strategy runs in the plugin: named by the pod's annotation, pods are placed and each
// placement teaches the demand histogram its shape.
func TestFragmentationStrategyPlaces(t *testing.T) {
	nodes := []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil)}
	claim := ledgertest.Claim("c0", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}})
	e := newTestEnv(t, nodes, claim)
	pod := ledgertest.Pod("p0", "c0")
	pod.Annotations[apiv1.AnnotationNodeStrategy] = string(allocator.Fragmentation)
	_, st, cs := e.schedule(t, pod)
	if st != nil {
		t.Fatalf("status %v", st)
	}
	// The strategy ranks nodes only: the 2-GPU claim still gets one island (the allocator's).
	s, err := getState(cs)
	if err != nil {
		t.Fatal(err)
	}
	if s.islands != 1 || len(s.ids) != 2 {
		t.Fatalf("placement %v over %d islands", s.ids, s.islands)
	}
	e.p.demand.mu.Lock()
	defer e.p.demand.mu.Unlock()
	if e.p.demand.seen != 1 || e.p.demand.w[allocator.Shape{Milli: 1000, GPUs: 2}] != 1 {
		t.Fatalf("demand after one 2-GPU placement: %v (seen %d)", e.p.demand.w, e.p.demand.seen)
	}
}
