package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// liveness is the node's liveness lease, nil while there is none.
func (h *harness) liveness() *coordinationv1.Lease {
	l, err := h.kube.CoordinationV1().Leases("gpu-scheduler").Get(context.Background(), "gpu-"+node+"-agent", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

// The agent says it lives by renewing its lease, not by rewriting an unchanged status: over an
// hour of 3-minute renewals the status is written once and the lease renewed ~20 times.
func TestLivenessLeaseRenewedWhileStatusStaysUnwritten(t *testing.T) {
	h := newHarnessWith(t, mock.DGXH100, nvml.SUCCESS, func(c *agent.Config) {
		c.TelemetryInterval = -1 // nothing may change the status
		c.HeartbeatInterval = 3 * time.Minute
		c.StatusRefreshInterval = 2 * time.Hour
	})
	h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	var first *coordinationv1.Lease
	h.eventually("the liveness lease", func() bool { first = h.liveness(); return first != nil })
	if got := first.Labels[apiv1.LabelAgentLiveness]; got != apiv1.SchedulerName {
		t.Errorf("label %s = %q, want %q", apiv1.LabelAgentLiveness, got, apiv1.SchedulerName)
	}
	if _, ok := first.Labels[apiv1.LabelLeaseNode]; ok {
		t.Errorf("the liveness lease carries %s: GPU lease informers would take it for a lock", apiv1.LabelLeaseNode)
	}
	if first.Spec.HolderIdentity == nil || *first.Spec.HolderIdentity != node || first.Spec.LeaseDurationSeconds == nil || first.Spec.RenewTime == nil {
		t.Fatalf("liveness lease spec %+v: want holder %s, a duration and a renew time", first.Spec, node)
	}
	if refs := first.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != "node-uid" {
		t.Errorf("owner references %+v, want the Node", refs)
	}
	start := h.clk.Now()
	for range 120 { // an hour of probe rounds
		h.probeRound()
	}
	last := h.liveness()
	if !last.Spec.RenewTime.After(start.Add(54 * time.Minute)) {
		t.Errorf("lease last renewed at +%s of an hour; want within the last renewal interval", last.Spec.RenewTime.Sub(start))
	}
	renewals := 0
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "leases" {
			renewals++
		}
	}
	// 3-minute interval less a fixed jitter of up to 20%: 20 to 25 renewals in an hour (the
	// first spread one included).
	if renewals < 19 || renewals > 26 {
		t.Errorf("%d lease renewals in an hour, want 20-25", renewals)
	}
	if got := h.statusWrites(); got != 1 {
		t.Errorf("%d status writes in an unchanged hour, want 1 (the refresh interval is 2h)", got)
	}
}

// NVML failing does not stop the renewals: the status (GPUs Unknown) must stay trusted.
func TestLivenessLeaseRenewedWhileNVMLFails(t *testing.T) {
	h := newHarnessWith(t, mock.DGXH100, nvml.ERROR_DRIVER_NOT_LOADED, func(c *agent.Config) { c.HeartbeatInterval = time.Minute })
	h.eventually("the liveness lease", func() bool { return h.liveness() != nil })
	before := h.liveness().Spec.RenewTime.Time
	h.clk.Step(2 * time.Minute)
	h.nudging("a renewal with NVML down", func() bool {
		l := h.liveness()
		return l != nil && l.Spec.RenewTime.After(before)
	})
}
