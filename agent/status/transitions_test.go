package status_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// stamped runs Stamp on one GPU with health h at now and returns the device.
func stamped(tr *status.Transitions, prev *apiv1.GpuNodeStatus, h apiv1.Health, now time.Time) apiv1.Device {
	d := []apiv1.Device{{ID: 3, Health: h}}
	tr.Stamp(d, prev, now)
	return d[0]
}

func TestTransitionsMoveOnlyWithHealth(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tr := status.NewTransitions()
	steps := []struct {
		at     time.Time
		health apiv1.Health
		since  time.Time // want
		count  int32     // want
	}{
		{t0, apiv1.Healthy, t0, 0}, // first seen
		{at(10), apiv1.Healthy, t0, 0},
		{at(20), apiv1.Unhealthy, at(20), 0},
		{at(30), apiv1.Unhealthy, at(20), 0}, // later writes keep the time
		{at(40), apiv1.Healthy, at(40), 1},   // a recovery
		{at(50), apiv1.Unknown, at(50), 1},   // NVML failed: not a recovery when it returns
		{at(60), apiv1.Healthy, at(60), 1},
		{at(70), apiv1.Unhealthy, at(70), 1},
		{at(80), apiv1.Unknown, at(80), 1},
		{at(90), apiv1.Healthy, at(90), 2}, // Unhealthy, then Unknown, then Healthy: a recovery
		{at(95), apiv1.Healthy, at(90), 2},
	}
	for i, s := range steps {
		d := stamped(tr, nil, s.health, s.at.Add(400*time.Millisecond))
		if d.LastTransitionTime == nil || !d.LastTransitionTime.Time.Equal(s.since) || d.RecoveryCount != s.count {
			t.Fatalf("step %d (%s at %s): lastTransitionTime %v, recoveryCount %d; want %s, %d",
				i, s.health, s.at, d.LastTransitionTime, d.RecoveryCount, s.since, s.count)
		}
	}
}

func TestTransitionsCarryOverFromThePublishedStatus(t *testing.T) {
	before := metav1.Unix(500, 0)
	now := time.Unix(1000, 0)
	prev := &apiv1.GpuNodeStatus{Status: apiv1.GpuNodeStatusStatus{Devices: []apiv1.Device{
		{ID: 0, Health: apiv1.Healthy, LastTransitionTime: &before, RecoveryCount: 4},
		{ID: 1, Health: apiv1.Unhealthy, LastTransitionTime: &before, RecoveryCount: 1},
		{ID: 2, Health: apiv1.Healthy}, // published by an agent that did not stamp
		{ID: 3, Health: apiv1.Unknown, LastTransitionTime: &before},
	}}}
	devs := []apiv1.Device{{ID: 0, Health: apiv1.Healthy}, {ID: 1, Health: apiv1.Healthy},
		{ID: 2, Health: apiv1.Healthy}, {ID: 3, Health: apiv1.Healthy}, {ID: 4, Health: apiv1.Unhealthy}}
	status.NewTransitions().Stamp(devs, prev, now)
	want := []struct {
		since *time.Time
		count int32
	}{{&before.Time, 4}, {&now, 2}, {nil, 0}, {&now, 0}, {&now, 0}}
	for i, w := range want {
		d := devs[i]
		got := d.LastTransitionTime
		if (got == nil) != (w.since == nil) || got != nil && !got.Time.Equal(*w.since) || d.RecoveryCount != w.count {
			t.Errorf("GPU %d: lastTransitionTime %v, recoveryCount %d; want %v, %d", d.ID, got, d.RecoveryCount, w.since, w.count)
		}
	}
}
