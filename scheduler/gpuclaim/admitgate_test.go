package gpuclaim

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const gateResource = "gpu.scheduling/gpu"

func gatePod(name string, gpus int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID(name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{gateResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
		}}}},
	}
}

func bound(pod *v1.Pod, node string) *v1.Pod {
	pod = pod.DeepCopy()
	pod.Spec.NodeName = node
	return pod
}

func started(pod *v1.Pod) *v1.Pod {
	pod = pod.DeepCopy()
	pod.Status.StartTime = &metav1.Time{Time: time.Now()}
	return pod
}

// acquireAsync runs acquire and reports its outcome on the returned channel.
func acquireAsync(ctx context.Context, g *admitGate, pod *v1.Pod, node string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- g.acquire(ctx, pod, node) }()
	return done
}

func wantBlocked(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s: acquire returned (%v), want it to wait", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

func wantAcquired(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: acquire: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: acquire still waits", what)
	}
}

// The second pod of a GPU count waits until the kubelet has admitted the first (startTime);
// other counts and other nodes do not wait.
func TestAdmitGateOnePodPerCountUntilAdmitted(t *testing.T) {
	ctx := context.Background()
	g := newAdmitGate(gateResource)
	a, b, c, d := gatePod("a", 1), gatePod("b", 1), gatePod("c", 2), gatePod("d", 1)

	wantAcquired(t, acquireAsync(ctx, g, a, "n1"), "first 1-GPU pod")
	bDone := acquireAsync(ctx, g, b, "n1")
	wantBlocked(t, bDone, "second 1-GPU pod while the first is not admitted")
	wantAcquired(t, acquireAsync(ctx, g, c, "n1"), "a 2-GPU pod beside an unadmitted 1-GPU pod")
	wantAcquired(t, acquireAsync(ctx, g, d, "n2"), "a 1-GPU pod on another node")

	// The informer sees a bound, then started: only the start lets b go.
	g.observe(bound(a, "n1"))
	wantBlocked(t, bDone, "after a is seen bound")
	g.observe(started(bound(a, "n1")))
	wantAcquired(t, bDone, "after a is admitted")

	// b is now the one not admitted: a third pod of its count waits for it in turn.
	e := gatePod("e", 1)
	eDone := acquireAsync(ctx, g, e, "n1")
	wantBlocked(t, eDone, "third 1-GPU pod while b is not admitted")
	g.forget(b.UID) // b's binding failed (Unreserve) or b was deleted
	wantAcquired(t, eDone, "after b is forgotten")
}

// A pod bound by someone else (another scheduler process, before a restart) counts as soon as
// the informer sees it; a pod asking for nothing of the resource never waits.
func TestAdmitGateCountsPodsFromTheInformer(t *testing.T) {
	ctx := context.Background()
	g := newAdmitGate(gateResource)
	other := bound(gatePod("other", 4), "n1")
	g.observe(other)
	done := acquireAsync(ctx, g, gatePod("mine", 4), "n1")
	wantBlocked(t, done, "a 4-GPU pod beside another's unadmitted 4-GPU pod")

	plain := gatePod("plain", 0)
	plain.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	wantAcquired(t, acquireAsync(ctx, g, plain, "n1"), "a pod without the resource")

	finished := bound(other, "n1")
	finished.Status.Phase = v1.PodFailed // the kubelet refused it
	g.observe(finished)
	wantAcquired(t, done, "after the other pod was refused")
}

// Init and app containers both count: a pod whose init container asks for 1 and app container
// for 2 waits for unadmitted pods of either count.
func TestAdmitGateInitContainerSizes(t *testing.T) {
	g := newAdmitGate(gateResource)
	p := gatePod("p", 2)
	p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{gateResource: *resource.NewQuantity(1, resource.DecimalSI)},
	}}}
	if got := g.sizes(p); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("sizes = %v, want [1 2]", got)
	}
	g.observe(bound(gatePod("one", 1), "n1"))
	done := acquireAsync(context.Background(), g, p, "n1")
	wantBlocked(t, done, "a pod with a 1-GPU init container beside an unadmitted 1-GPU pod")
	g.forget("one")
	wantAcquired(t, done, "after the 1-GPU pod is gone")
}

// A wait that is given up names the pod it waited for; the gate is off without a resource.
func TestAdmitGateGivesUpWithReason(t *testing.T) {
	g := newAdmitGate(gateResource)
	g.observe(bound(gatePod("stuck", 1), "n1"))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := g.acquire(ctx, gatePod("next", 1), "n1")
	if err == nil || !strings.Contains(err.Error(), "team/stuck") || !strings.Contains(err.Error(), "n1") {
		t.Fatalf("acquire = %v, want an error naming node n1 and pod team/stuck", err)
	}
	if off := newAdmitGate(""); off != nil {
		t.Fatalf("newAdmitGate(\"\") = %v, want nil (off)", off)
	}
	var off *admitGate
	if err := off.acquire(context.Background(), gatePod("x", 1), "n1"); err != nil {
		t.Fatalf("nil gate acquire = %v", err)
	}
	off.observe(bound(gatePod("x", 1), "n1"))
	off.forget("x")
}
