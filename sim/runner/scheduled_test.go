package runner

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// The pods' binding moments come from their schedulers' Scheduled events: on the events' own
// microsecond stamps, a controller's pod under its plan slot; other reasons, other kinds,
// events stamped before the recorder started (an earlier run's) and a second event for a pod
// change nothing.
func TestObserveScheduled(t *testing.T) {
	start := time.Now()
	rec := newRecorder(start)
	rec.pods["a"] = &podRecord{created: time.Second, createdOK: true}
	rec.pods["slot-1"] = &podRecord{created: 2 * time.Second, createdOK: true}
	rec.alias = map[string]string{"job-x7": "slot-1"}
	rec.pods["early"] = &podRecord{}
	ev := func(reason, kind, pod string, at time.Duration) eventsv1.Event {
		return eventsv1.Event{Reason: reason, EventTime: metav1.NewMicroTime(start.Add(at)),
			Regarding: corev1.ObjectReference{Kind: kind, Name: pod}}
	}
	n := rec.observeScheduled([]eventsv1.Event{
		ev(ReasonScheduled, "Pod", "a", 1500*time.Millisecond+250*time.Microsecond),
		ev(ReasonScheduled, "Pod", "a", 9*time.Second),
		ev(ReasonScheduled, "Pod", "job-x7", 2600*time.Millisecond),
		ev("FailedScheduling", "Pod", "early", 3*time.Second),
		ev(ReasonScheduled, "Node", "early", 3*time.Second),
		ev(ReasonScheduled, "Pod", "early", -time.Minute),
		ev(ReasonScheduled, "Pod", "unknown", 3*time.Second),
	})
	if n != 2 {
		t.Errorf("stamped %d pods, want 2 (a and slot-1)", n)
	}
	if p := rec.pods["a"]; !p.scheduledOK || p.scheduled != 1500*time.Millisecond+250*time.Microsecond {
		t.Errorf("a: scheduled %s (%t), want 1.50025s from the first event", p.scheduled, p.scheduledOK)
	}
	if p := rec.pods["slot-1"]; !p.scheduledOK || p.scheduled != 2600*time.Millisecond {
		t.Errorf("slot-1: scheduled %s (%t), want 2.6s from its pod job-x7's event", p.scheduled, p.scheduledOK)
	}
	if p := rec.pods["early"]; p.scheduledOK {
		t.Errorf("early: stamped at %s by an event that is not its Scheduled event of this run", p.scheduled)
	}
	steps := rec.steps([]scenario.PodPlan{{Name: "a"}, {Name: "early"}}, 0, false)
	if len(steps) != 2 || !steps[0].ScheduledOK || steps[0].Scheduled != rec.pods["a"].scheduled || steps[1].ScheduledOK {
		t.Errorf("steps %+v: want a's stamp carried into its timeline, none for early", steps)
	}
}
