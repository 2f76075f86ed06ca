package runner

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name, node string, unschedulable bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	if unschedulable {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/2 nodes are available"}}
	}
	return p
}

// TestRecorderFull: a fill run is over only once a pod was found unschedulable and no pod has
// bound for the quiet period since then, counted from whichever came last.
func TestRecorderFull(t *testing.T) {
	const quiet = 20 * time.Second
	r := newRecorder(time.Now().Add(-time.Hour)) // the clock reads about 1h
	r.observePod(pod("a", "n0", false), false)
	if r.full(quiet) {
		t.Fatal("full before any pod was unschedulable")
	}
	r.observePod(pod("b", "", true), false)
	if r.full(quiet) {
		t.Fatal("full right after the first unschedulable pod")
	}
	// The first unschedulable pod and the last binding both lie over the quiet period back.
	r.mu.Lock()
	r.firstUnplaced, r.lastBind = r.now()-2*quiet, r.now()-quiet-time.Second
	r.mu.Unlock()
	if !r.full(quiet) {
		t.Fatal("not full although nothing bound for longer than the quiet period")
	}
	// A new binding restarts the quiet period.
	r.observePod(pod("c", "n1", false), false)
	if r.full(quiet) {
		t.Fatal("full right after a binding")
	}
	// A later unschedulable pod leaves firstUnplaced at the first one.
	r.mu.Lock()
	first := r.firstUnplaced
	r.mu.Unlock()
	r.observePod(pod("d", "", true), false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstUnplaced != first {
		t.Fatalf("firstUnplaced moved from %s to %s on a later unschedulable pod", first, r.firstUnplaced)
	}
}
