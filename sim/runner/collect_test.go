package runner

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// TestCollectWaitInputs: the figures of waits get, from the recorder and the scenario, when each
// pod was seen and found unschedulable, its claim's topology, floor and selector, and each
// node's labels (the pool's cannot override the pool label) and GPU bandwidths.
func TestCollectWaitInputs(t *testing.T) {
	rec := newRecorder(time.Now())
	rec.nodes["h100-00000"] = &gpuv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: "h100-00000"}, Status: gpuv1.GpuNodeStatusStatus{
		Devices: []gpuv1.Device{{ID: 0, Island: "nvs", BandwidthGBps: 450}, {ID: 1, Island: "nvs", BandwidthGBps: 450}}}}
	rec.pods["p"] = &podRecord{created: 2 * time.Second, createdOK: true, seen: 2100 * time.Millisecond, seenOK: true,
		unschedAt: 2200 * time.Millisecond, unschedOK: true, bound: 3 * time.Second, boundOK: true, node: "h100-00000"}
	plan := []scenario.PodPlan{{Name: "p", Claim: scenario.ClaimSpec{Count: 2, Selector: map[string]string{"gpu-type": "h100"},
		Topology: &scenario.TopologySpec{Mode: "Required", MinBandwidthGBps: 300}}}}
	pools := map[string]scenario.NodePool{"h100": {Name: "h100", Topology: "dgx-h100",
		Labels: map[string]string{"gpu-type": "h100", "gpu.scheduling/pool": "other"}}}
	in := collect(rec, plan, pools, time.Second, 10*time.Second, false)
	if len(in.Nodes) != 1 || len(in.Pods) != 1 {
		t.Fatalf("collected %d nodes and %d pods, want 1 and 1", len(in.Nodes), len(in.Pods))
	}
	n, p := in.Nodes[0], in.Pods[0]
	if n.Labels["gpu-type"] != "h100" || n.Labels["gpu.scheduling/pool"] != "h100" || n.Labels["kubernetes.io/hostname"] != "h100-00000" {
		t.Errorf("node labels %v", n.Labels)
	}
	if len(n.BandwidthGBps) != 2 || n.BandwidthGBps[1] != 450 {
		t.Errorf("bandwidths %v, want [450 450]", n.BandwidthGBps)
	}
	if !p.SeenOK || p.Seen != 1100*time.Millisecond || !p.UnschedulableOK || p.Unschedulable != 1200*time.Millisecond {
		t.Errorf("seen %v (%v), unschedulable %v (%v); want 1.1s and 1.2s after t0", p.Seen, p.SeenOK, p.Unschedulable, p.UnschedulableOK)
	}
	if p.Topology != "Required" || p.MinBandwidthGBps != 300 || p.Selector["gpu-type"] != "h100" {
		t.Errorf("claim %+v", p)
	}
}
