package gpuclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWaitingPendingStats(t *testing.T) {
	w := newWaitingPods()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if n, age := w.pendingStats(now); n != 0 || age != 0 {
		t.Errorf("empty: %d, %v", n, age)
	}
	old := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "a", CreationTimestamp: metav1.NewTime(now.Add(-10 * time.Minute))}}
	young := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "b", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))}}
	w.add(old, "ns/a", "")
	w.add(young, "ns/b", "")
	if n, age := w.pendingStats(now); n != 2 || age != 600 {
		t.Errorf("two waiting: %d, %v; want 2, 600", n, age)
	}
	w.remove("a")
	if n, age := w.pendingStats(now); n != 1 || age != 60 {
		t.Errorf("after the old one left: %d, %v; want 1, 60", n, age)
	}
}
