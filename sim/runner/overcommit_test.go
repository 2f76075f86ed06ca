package runner

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TestOnLeaseShares: a Shared GPU's lease is judged at every change against the GPU's compute
// (100 %) and its memory as the node's agent reported it; a lease once over-committed is
// counted once, and one whose shares fit is not counted.
func TestOnLeaseShares(t *testing.T) {
	rec := newRecorder(time.Now())
	rec.observeStatus(&gpuv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Status: gpuv1.GpuNodeStatusStatus{Devices: []gpuv1.Device{{ID: 0, MemoryMiB: 1000}, {ID: 1, MemoryMiB: 1000}}}}, false)
	lease := func(name, gpu, shares string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{gpuv1.LabelLeaseNode: "n", gpuv1.LabelLeaseGPU: gpu},
			Annotations: map[string]string{gpuv1.AnnotationLeaseShares: shares}}}
	}
	rec.onLeaseShares(lease("gpu-n-0", "0", "a=400/60,b=600/40"))    // exactly full
	rec.onLeaseShares(lease("gpu-n-1", "1", "a=0/70"))               // room left
	rec.onLeaseShares(lease("gpu-n-1", "1", "a=0/70,b=0/0,c=10/20")) // still fits
	if n := rec.overcommittedLeases(); n != 0 {
		t.Fatalf("%d over-committed leases, want 0", n)
	}
	rec.onLeaseShares(lease("gpu-n-0", "0", "a=400/60,b=600/40,c=1/0")) // memory past 1000 MiB
	rec.onLeaseShares(lease("gpu-n-1", "1", "a=0/70,c=0/31"))           // compute past 100 %
	rec.onLeaseShares(lease("gpu-n-1", "1", "a=0/70,c=0/40"))           // the same lease again
	if n := rec.overcommittedLeases(); n != 2 {
		t.Fatalf("%d over-committed leases, want 2", n)
	}
	// Memory is not judged where the GPU's is not known; compute always is.
	if !leaseOvercommitted(map[string]gpuv1.ResolvedShare{"a": {MemoryMiB: 1 << 30, ComputePercent: 101}}, 0) ||
		leaseOvercommitted(map[string]gpuv1.ResolvedShare{"a": {MemoryMiB: 1 << 30, ComputePercent: 100}}, 0) {
		t.Fatal("leaseOvercommitted without the GPU's memory")
	}
}
