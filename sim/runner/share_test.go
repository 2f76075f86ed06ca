package runner

import (
	"testing"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// A trace pod asking for part of a GPU gets a Shared claim with its share in our run, and one
// whole nvidia.com/gpu in the stock run, which cannot ask for less.
func TestSharedTracePod(t *testing.T) {
	p := scenario.PodPlan{Name: "p", Kind: "trace", Claim: scenario.ClaimSpec{Count: 1, Exclusivity: string(gpuv1.Shared), Share: &scenario.ShareSpec{ComputePercent: 46}}}
	c := buildClaim(p, "sim", "run")
	if sh := c.Spec.Devices.Share; sh == nil || sh.ComputePercent != 46 || sh.MemoryPercent != 0 || c.Spec.Devices.Exclusivity != gpuv1.Shared {
		t.Fatalf("claim devices %+v", c.Spec.Devices)
	}
	stock := buildPod(p, "sim", "run", ModeStock)
	if q := stock.Spec.Containers[0].Resources.Limits[cluster.ResourceGPU]; q.Value() != 1 {
		t.Fatalf("stock pod asks for %v GPUs, want 1", q.String())
	}
}
