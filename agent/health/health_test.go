package health_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/health"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func TestCritical(t *testing.T) {
	for _, xid := range []uint64{13, 31, 43, 45, 68, 109} {
		if health.Critical(xid) {
			t.Errorf("Xid %d is application-caused, got critical", xid)
		}
	}
	for _, xid := range []uint64{48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 0} {
		if !health.Critical(xid) {
			t.Errorf("Xid %d: got not critical", xid)
		}
	}
}

var errLost = fmt.Errorf("probe GPU 0: %w", gpu.ErrLost)

func TestTracker(t *testing.T) {
	const quiet = 5 * time.Minute
	type step struct {
		event *gpu.Event
		probe *error
		wait  time.Duration
		want  apiv1.Health
		// reason, when set, is the exact reason wanted
		reason string
	}
	ev := func(e gpu.Event) *gpu.Event { return &e }
	pr := func(err error) *error { return &err }
	tests := []struct {
		name  string
		steps []step
	}{
		{"ignored Xid changes nothing", []step{
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: 0, Xid: 13}), want: apiv1.Healthy},
		}},
		{"Xid 79: unhealthy at once, lost, then back after reset", []step{
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: 0, Xid: 79}), want: apiv1.Unhealthy},
			{probe: pr(errLost), want: apiv1.Unhealthy},
			{probe: pr(errLost), wait: time.Hour, want: apiv1.Unhealthy},
			{probe: pr(nil), want: apiv1.Healthy},
		}},
		{"an Xid read after the probe saw the GPU lost clears with that loss's reset", []step{
			{probe: pr(errLost), want: apiv1.Unhealthy, reason: "GPU lost: " + errLost.Error()},
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: 0, Xid: 79}), want: apiv1.Unhealthy, reason: "GPU lost: " + errLost.Error() + "; after Xid 79"},
			{probe: pr(nil), want: apiv1.Healthy},
		}},
		{"an Xid on an answering GPU is not cleared by an older loss", []step{
			{probe: pr(errLost), want: apiv1.Unhealthy},
			{probe: pr(nil), want: apiv1.Healthy},
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: 0, Xid: 48}), want: apiv1.Unhealthy, reason: "Xid 48"},
			{probe: pr(nil), want: apiv1.Unhealthy},
		}},
		{"double-bit ECC on an answering GPU clears only after the quiet period", []step{
			{event: ev(gpu.Event{Kind: gpu.EventDoubleBitECC, Device: 0}), want: apiv1.Unhealthy},
			{probe: pr(nil), wait: quiet - time.Second, want: apiv1.Unhealthy},
			{probe: pr(nil), wait: time.Second, want: apiv1.Healthy},
		}},
		{"a new critical Xid restarts the quiet period", []step{
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: 0, Xid: 48}), want: apiv1.Unhealthy},
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: 0, Xid: 94}), wait: quiet - time.Second, want: apiv1.Unhealthy},
			{probe: pr(nil), wait: time.Second, want: apiv1.Unhealthy},
			{probe: pr(nil), wait: quiet, want: apiv1.Healthy},
		}},
		{"event without a device hits every GPU", []step{
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: -1, Xid: 79}), want: apiv1.Unhealthy},
		}},
		{"events for another GPU leave this one alone", []step{
			{event: ev(gpu.Event{Kind: gpu.EventXid, Device: 1, Xid: 79}), want: apiv1.Healthy},
		}},
		{"persistent fault lasts as long as the probe sees it", []step{
			{probe: pr(fmt.Errorf("row remapping failed: %w", gpu.ErrFaulted)), want: apiv1.Unhealthy},
			{probe: pr(nil), want: apiv1.Healthy},
		}},
		{"a probe that cannot tell gives Unknown", []step{
			{probe: pr(errors.New("ERROR_UNKNOWN")), want: apiv1.Unknown},
			{probe: pr(nil), want: apiv1.Healthy},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
			tr := health.NewTracker(clk, quiet)
			for i, s := range tt.steps {
				clk.SetTime(clk.Now().Add(s.wait))
				if s.event != nil {
					tr.Event(*s.event, []int{0, 1})
				}
				if s.probe != nil {
					tr.Probe(0, *s.probe)
				}
				if got := tr.State(0); got.Health != s.want {
					t.Fatalf("step %d: health %s (%q), want %s", i, got.Health, got.Reason, s.want)
				}
				if got := tr.State(0); got.Health != apiv1.Healthy && got.Reason == "" {
					t.Fatalf("step %d: %s without a reason", i, got.Health)
				}
				if got := tr.State(0); s.reason != "" && got.Reason != s.reason {
					t.Fatalf("step %d: reason %q, want %q", i, got.Reason, s.reason)
				}
			}
		})
	}
}
