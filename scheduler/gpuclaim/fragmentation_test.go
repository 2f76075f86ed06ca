package gpuclaim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

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
	if got := claimShape(shared, &allocator.Request{Count: 1, Exclusivity: allocator.Shared}, nil); got != (allocator.Shape{Milli: 300, GPUs: 1}) {
		t.Errorf("30%% compute share: %v", got)
	}
	memOnly := &apiv1.GpuClaim{Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Share: &apiv1.GPUShare{MemoryPercent: 25}}}}
	if got := claimShape(memOnly, &allocator.Request{Count: 1, Exclusivity: allocator.Shared}, nil); got != (allocator.Shape{Milli: 1000, GPUs: 1}) {
		t.Errorf("memory-only share: %v", got)
	}
	if got := claimShape(nil, &allocator.Request{Count: 4}, nil); got != (allocator.Shape{Milli: 1000, GPUs: 4}) {
		t.Errorf("4 whole GPUs: %v", got)
	}
	// The pod's CPU and memory are part of its shape: the kubelet's sum, or an init container's more.
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers: []v1.Container{
			{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("3"), v1.ResourceMemory: resource.MustParse("1Gi")}}},
			{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}}},
		},
		InitContainers: []v1.Container{{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("4Gi")}}}},
	}}
	if got := claimShape(nil, &allocator.Request{Count: 1}, pod); got != (allocator.Shape{Milli: 1000, GPUs: 1, CPUMilli: 3500, MemoryMiB: 4096}) {
		t.Errorf("with CPU and memory: %v", got)
	}
	if got := claimShape(nil, &allocator.Request{Count: 1, Exclusivity: allocator.MIG}, pod); got != (allocator.Shape{}) {
		t.Errorf("MIG claim: %v, want no shape", got)
	}
}

// The strategy runs in the plugin: named by the pod's annotation, pods are placed and each
// arrival teaches the demand histogram its shape, once however often the pod is tried.
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

// Counting arrivals, not placements: a pod tried again is not counted again, and a pod no node
// can take (the big tasks of a full cluster) is counted all the same.
func TestDemandCountsArrivalsOnce(t *testing.T) {
	var h demandHistogram
	big := allocator.Shape{Milli: 1000, GPUs: 8}
	h.arrived("a", big)
	h.arrived("a", big)
	h.arrived("b", big)
	if h.seen != 2 || h.w[big] < 1.99 {
		t.Fatalf("two pods, one tried twice: seen %d, weight %v", h.seen, h.w[big])
	}
	nodes := []*v1.Node{ledgertest.Node("a", nil)}
	claim := ledgertest.Claim("c0", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 64}})
	e := newTestEnv(t, nodes, claim)
	pod := ledgertest.Pod("p0", "c0")
	pod.Annotations[apiv1.AnnotationNodeStrategy] = string(allocator.Fragmentation)
	if _, st, _ := e.schedule(t, pod); st.IsSuccess() {
		t.Fatal("a 64-GPU pod was placed")
	}
	e.p.demand.mu.Lock()
	defer e.p.demand.mu.Unlock()
	if e.p.demand.w[allocator.Shape{Milli: 1000, GPUs: 64}] != 1 {
		t.Fatalf("demand after a 64-GPU pod no node takes: %v", e.p.demand.w)
	}
}

// FGD chooses the GPU within the node for a shared pod. Two GPUs shared, 30 % and 60 % of their
// compute left, a workload of quarter-GPU tasks, and a 20 % pod: binpack's best fit puts it on
// the GPU with 30 % left and strands the 10 % left there, which no quarter-GPU task can use;
// FGD puts it on the other, whose 40 % left still takes one, and keeps the 30 % usable too.
func TestFragmentationPicksTheGPU(t *testing.T) {
	share := func(name string, pct int32) *apiv1.GpuClaim {
		return ledgertest.Claim(name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.Shared, Share: &apiv1.GPUShare{ComputePercent: pct}}})
	}
	run := func(strategy allocator.Strategy) (first, second, third []int) {
		nodes := []*v1.Node{ledgertest.Node("a", nil)}
		e := newTestEnv(t, nodes, share("c70", 70), share("c40", 40), share("c20", 20))
		for range demandMinSeen {
			e.p.demand.observe(allocator.Shape{Milli: 250, GPUs: 1})
		}
		var got [][]int
		for _, c := range []string{"c70", "c40", "c20"} {
			pod := ledgertest.Pod("p"+c, c)
			pod.Annotations[apiv1.AnnotationNodeStrategy] = string(strategy)
			_, st, cs := e.schedule(t, pod)
			if !st.IsSuccess() {
				t.Fatalf("%s: pod of %s: %v", strategy, c, st)
			}
			s, err := getState(cs)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, s.ids)
		}
		return got[0], got[1], got[2]
	}
	b70, b40, b20 := run(allocator.Binpack)
	f70, f40, f20 := run(allocator.Fragmentation)
	t.Logf("binpack: 70 %% on %v, 40 %% on %v, 20 %% on %v; fragmentation: %v, %v, %v", b70, b40, b20, f70, f40, f20)
	if slices.Equal(b70, b40) || !slices.Equal(b20, b70) {
		t.Fatalf("binpack placed 70 %% on %v, 40 %% on %v, 20 %% on %v: the test expects the 20 %% pod on the 70 %% GPU", b70, b40, b20)
	}
	if !slices.Equal(f20, f40) || slices.Equal(f70, f40) {
		t.Fatalf("fragmentation placed 70 %% on %v, 40 %% on %v, 20 %% on %v; want the 20 %% pod beside the 40 %% one", f70, f40, f20)
	}
}

// The learnt demand converges to the workload's mix: after 500 arrivals drawn from three shapes
// weighted 60/30/10, each shape's share of the histogram is within 5 points of its weight, and
// stays so as the workload goes on (the decay forgets, but over thousands of arrivals).
func TestDemandConverges(t *testing.T) {
	mix := []struct {
		s allocator.Shape
		w float64
	}{{allocator.Shape{Milli: 500, GPUs: 1, CPUMilli: 8000}, 0.6}, {allocator.Shape{Milli: 1000, GPUs: 1, CPUMilli: 12000}, 0.3}, {allocator.Shape{Milli: 1000, GPUs: 8, CPUMilli: 88000}, 0.1}}
	rng := rand.New(rand.NewPCG(34, 1))
	var h demandHistogram
	for n := 1; n <= 5000; n++ {
		x, i := rng.Float64(), 0
		for ; i < len(mix)-1 && x >= mix[i].w; i++ {
			x -= mix[i].w
		}
		h.arrived(types.UID(fmt.Sprint(n)), mix[i].s)
		if n%500 != 0 {
			continue
		}
		var total float64
		got := map[allocator.Shape]float64{}
		for _, d := range h.demand() {
			total += d.Weight
			got[d.Shape] = d.Weight
		}
		for _, m := range mix {
			if share := got[m.s] / total; math.Abs(share-m.w) > 0.05 {
				t.Fatalf("after %d arrivals %v has %.3f of the demand, want %.2f ± 0.05", n, m.s, share, m.w)
			}
		}
	}
}
