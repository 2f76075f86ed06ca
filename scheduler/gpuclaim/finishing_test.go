package gpuclaim

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// finishedPod is a finished 1-GPU pod on n1 whose PodReadyToStartContainers condition is ready
// (True: the kubelet has not terminated it yet), or nil for no condition.
func finishedPod(name string, ready *v1.ConditionStatus) *v1.Pod {
	p := bound(gatePod(name, 1), "n1")
	p.Status.Phase = v1.PodSucceeded
	if ready != nil {
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReadyToStartContainers, Status: *ready}}
	}
	return p
}

func condPtr(s v1.ConditionStatus) *v1.ConditionStatus { return &s }

// A finished pod's GPUs are held until the kubelet reports it terminated (the condition turns
// False) or the pod is deleted; a pod already reported terminated, never started, or not asking
// for the device resource is not held; a hold ends after finishingMax.
func TestFinishingHoldsUntilTheKubeletLetsGo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	var mu sync.Mutex
	var done []string
	f, factory, reg, err := newFinishing(ctx, cs, func(p *v1.Pod) {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, p.Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("handler did not sync")
	}
	p := &Plugin{admit: newAdmitGate(gateResource), finishing: f}
	released := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), done...)
	}
	waitReleased := func(name string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, n := range released() {
				if n == name {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("pod %s was not released; released: %v", name, released())
	}

	running := finishedPod("running", condPtr(v1.ConditionTrue))
	if !p.holdsAfterFinish(running) {
		t.Fatal("a finished 1-GPU pod whose sandbox is still up is not held")
	}
	if _, err := cs.CoreV1().Pods("team").Create(ctx, running, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !f.hold(running, time.Now()) || !f.held(running.UID) {
		t.Fatal("hold of a pod the kubelet has not terminated returned false")
	}
	time.Sleep(100 * time.Millisecond)
	if got := released(); len(got) != 0 {
		t.Fatalf("released %v before the kubelet reported the pod terminated", got)
	}
	terminated := running.DeepCopy()
	terminated.Status.Conditions[0].Status = v1.ConditionFalse
	if _, err := cs.CoreV1().Pods("team").UpdateStatus(ctx, terminated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReleased("running")
	if f.held(running.UID) {
		t.Fatal("still held after release")
	}

	// The informer saw the terminated status first: hold says so and the caller frees.
	early := finishedPod("early", condPtr(v1.ConditionFalse))
	if _, err := cs.CoreV1().Pods("team").Create(ctx, early, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := f.lister.Pods("team").Get("early"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stale := finishedPod("early", condPtr(v1.ConditionTrue)) // the scheduler's older copy
	if f.hold(stale, time.Now()) {
		t.Fatal("hold of a pod the informer already shows terminated returned true")
	}

	// Deleted while held: released.
	gone := finishedPod("gone", condPtr(v1.ConditionTrue))
	if _, err := cs.CoreV1().Pods("team").Create(ctx, gone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.hold(gone, time.Now())
	if err := cs.CoreV1().Pods("team").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReleased("gone")

	// Not held: refused at admission (no condition), not asking for the resource, or the
	// device plugin off.
	if p.holdsAfterFinish(finishedPod("refused", nil)) {
		t.Error("a pod without the condition (refused at admission) is held")
	}
	plain := finishedPod("plain", condPtr(v1.ConditionTrue))
	plain.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	if p.holdsAfterFinish(plain) {
		t.Error("a pod not asking for the device resource is held")
	}
	if (&Plugin{}).holdsAfterFinish(running) {
		t.Error("held without the device plugin")
	}

	// A kubelet that never reports: the hold ends after finishingMax.
	stuck := finishedPod("stuck", condPtr(v1.ConditionTrue))
	f.hold(stuck, time.Now().Add(-finishingMax-time.Second))
	f.hold(finishedPod("recent", condPtr(v1.ConditionTrue)), time.Now())
	if got := f.expired(time.Now()); len(got) != 1 || got[0].UID != types.UID("stuck") {
		t.Fatalf("expired = %v, want only stuck", got)
	}
}
