package status

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Transitions stamps each GPU's LastTransitionTime and RecoveryCount, as Kubernetes conditions
// stamp theirs: the time moves only when Health changes, so an operator can tell since when a
// GPU is Unhealthy and how often it came back. Both change only together with Health, so they
// never cause a status write of their own. Not safe for concurrent use: one agent loop owns it.
type Transitions struct {
	gpus map[int32]*transition
}

type transition struct {
	health     apiv1.Health
	since      *metav1.Time // nil: an older agent published the health without a time
	recoveries int32
	// unhealthy is whether the GPU was Unhealthy at some point since it was last Healthy, so
	// that Unhealthy -> Unknown (NVML failed meanwhile) -> Healthy still counts as a recovery,
	// and a node-wide Unknown -> Healthy alone does not.
	unhealthy bool
}

// NewTransitions makes an empty record.
func NewTransitions() *Transitions {
	return &Transitions{gpus: map[int32]*transition{}}
}

// Stamp sets LastTransitionTime and RecoveryCount on devices, whose Health is what is about to
// be published. A GPU this record has not seen yet starts from prev (the GpuNodeStatus as last
// read, nil when there is none), so that a restarted agent keeps the time and count its
// predecessor published; a GPU that prev does not list either was first seen now. Calling it
// again with the same health changes nothing.
func (t *Transitions) Stamp(devices []apiv1.Device, prev *apiv1.GpuNodeStatus, now time.Time) {
	for i := range devices {
		d := &devices[i]
		tr := t.gpus[d.ID]
		if tr == nil {
			tr = seed(d, prev, now)
			t.gpus[d.ID] = tr
		}
		if tr.health != d.Health {
			switch d.Health {
			case apiv1.Healthy:
				if tr.unhealthy {
					tr.recoveries++
				}
				tr.unhealthy = false
			case apiv1.Unhealthy:
				tr.unhealthy = true
			}
			tr.health, tr.since = d.Health, stamp(now)
		}
		d.LastTransitionTime, d.RecoveryCount = tr.since.DeepCopy(), tr.recoveries
	}
}

// seed is a GPU's record as prev published it, or a GPU first seen now.
func seed(d *apiv1.Device, prev *apiv1.GpuNodeStatus, now time.Time) *transition {
	if prev != nil {
		for _, p := range prev.Status.Devices {
			if p.ID == d.ID {
				return &transition{health: p.Health, since: p.LastTransitionTime.DeepCopy(),
					recoveries: p.RecoveryCount, unhealthy: p.Health == apiv1.Unhealthy}
			}
		}
	}
	return &transition{health: d.Health, since: stamp(now), unhealthy: d.Health == apiv1.Unhealthy}
}

// stamp is now as the API server stores it (whole seconds): a finer time in memory would
// differ from the written one on every comparison and cause a write per loop.
func stamp(now time.Time) *metav1.Time {
	t := metav1.NewTime(now).Rfc3339Copy()
	return &t
}
