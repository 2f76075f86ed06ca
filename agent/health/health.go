// Package health decides whether each GPU is Healthy from two sources: NVML events (critical
// Xid errors, double-bit ECC) and probes (does the GPU answer; does it report a persistent
// fault). Unlike the NVIDIA device plugin, a GPU that recovers becomes Healthy again:
//
//   - a fault the probe sees (lost, failed row remapping) lasts exactly as long as the probe sees it;
//   - an event fault clears when the GPU has been reset, which shows as the probe seeing the
//     GPU lost and then answering again (Xid 79 and GPU resets look like this), or when the
//     GPU has answered every probe for a quiet period after the last critical event.
package health

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// ignoredXids are caused by applications (illegal memory access, MMU faults from user code,
// graphics exceptions, preemption, ...), not by the GPU; the NVIDIA device plugin skips the
// same set.
var ignoredXids = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// Critical tells whether an Xid means the GPU is broken.
func Critical(xid uint64) bool { return !ignoredXids[xid] }

// State is one GPU's health and, when not Healthy, why.
type State struct {
	Health apiv1.Health
	Reason string
}

// Tracker holds the health of a node's GPUs. It is not safe for concurrent use: the agent's
// loop owns it.
type Tracker struct {
	clock clock.PassiveClock
	quiet time.Duration
	gpus  map[int]*gpuState
}

type gpuState struct {
	probeFault   string // what the last probe saw; empty when it passed
	probeUnknown string // the last probe could not tell
	lostNow      bool   // the last probe found the GPU lost
	lostSeen     bool   // the probe saw the GPU lost since the last event fault
	eventFault   string
	eventAt      time.Time
}

// NewTracker makes a tracker whose event faults clear after quiet without further faults.
func NewTracker(c clock.PassiveClock, quiet time.Duration) *Tracker {
	return &Tracker{clock: c, quiet: quiet, gpus: map[int]*gpuState{}}
}

func (t *Tracker) gpu(i int) *gpuState {
	s, ok := t.gpus[i]
	if !ok {
		s = &gpuState{}
		t.gpus[i] = s
	}
	return s
}

// Event applies an event to GPU ev.Device, or to every GPU in all when the event names none.
// It reports whether the event is a critical fault (ignored Xids and lost notices are not:
// for those the agent probes instead).
func (t *Tracker) Event(ev gpu.Event, all []int) bool {
	var reason string
	switch ev.Kind {
	case gpu.EventXid:
		if !Critical(ev.Xid) {
			return false
		}
		reason = fmt.Sprintf("Xid %d", ev.Xid)
	case gpu.EventDoubleBitECC:
		reason = "double-bit ECC error"
	default:
		return false
	}
	targets := []int{ev.Device}
	if ev.Device < 0 {
		targets = all
		reason += " on an unidentified GPU"
	}
	now := t.clock.Now()
	for _, i := range targets {
		s := t.gpu(i)
		// A GPU that is lost right now (its event was read after the probe saw it gone) is
		// reset when it answers again, so the loss counts for this fault too.
		s.eventFault, s.eventAt, s.lostSeen = reason, now, s.lostNow
	}
	return true
}

// Probe records the result of probing GPU i.
func (t *Tracker) Probe(i int, err error) {
	s := t.gpu(i)
	switch {
	case err == nil:
		if s.eventFault != "" && (s.lostSeen || t.clock.Since(s.eventAt) >= t.quiet) {
			s.eventFault = ""
		}
		s.probeFault, s.probeUnknown, s.lostNow, s.lostSeen = "", "", false, false
	case errors.Is(err, gpu.ErrLost):
		s.probeFault, s.probeUnknown, s.lostNow, s.lostSeen = "GPU lost: "+err.Error(), "", true, true
	case errors.Is(err, gpu.ErrFaulted):
		s.probeFault, s.probeUnknown, s.lostNow = err.Error(), "", false
	default:
		s.probeUnknown = "probe failed: " + err.Error()
	}
}

// State is GPU i's health now. When both a probe and an event found a fault the reason names
// both, so that an operator sees the Xid behind a lost GPU.
func (t *Tracker) State(i int) State {
	s := t.gpu(i)
	switch {
	case s.probeFault != "" && s.eventFault != "":
		return State{Health: apiv1.Unhealthy, Reason: s.probeFault + "; after " + s.eventFault}
	case s.probeFault != "":
		return State{Health: apiv1.Unhealthy, Reason: s.probeFault}
	case s.eventFault != "":
		return State{Health: apiv1.Unhealthy, Reason: s.eventFault}
	case s.probeUnknown != "":
		return State{Health: apiv1.Unknown, Reason: s.probeUnknown}
	default:
		return State{Health: apiv1.Healthy}
	}
}
