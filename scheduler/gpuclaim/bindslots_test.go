package gpuclaim

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func TestBindSlotsWaitForALeave(t *testing.T) {
	b := newBindSlots(2)
	b.enter("a")
	b.enter("a") // counted once
	if err := b.wait(t.Context()); err != nil {
		t.Fatalf("one pod of two writing: wait = %v, want at once", err)
	}
	b.enter("b")
	done := make(chan error, 1)
	go func() { done <- b.wait(t.Context()) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned (%v) with both slots taken", err)
	case <-time.After(100 * time.Millisecond):
	}
	b.leave("never-entered") // frees nothing
	select {
	case err := <-done:
		t.Fatalf("wait returned (%v) when a pod that held no slot left", err)
	case <-time.After(100 * time.Millisecond):
	}
	b.leave("a")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait after a leave: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return when a slot freed")
	}
	if got := b.writing(); got != 1 {
		t.Errorf("writing = %d, want 1", got)
	}

	b.enter("c")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.wait(ctx); err == nil {
		t.Error("wait with a cancelled context and no slot free returned no error")
	}
	if err := newBindSlots(0).wait(ctx); err != nil {
		t.Errorf("no bound: wait = %v", err)
	}
}

// With maxPodsBinding 1, the next claim pod's scheduling cycle waits in PreFilter while a pod's
// lease is being created, and goes on once that pod is bound; a pod whose PreBind fails frees
// its slot through Unreserve.
func TestPreFilterWaitsForABindingSlot(t *testing.T) {
	claim := func(name string) *apiv1.GpuClaim {
		return ledgertest.Claim(name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	}
	e := newTestEnvArgs(t, &Args{MaxPodsBinding: ptr.To[int32](1)}, []*v1.Node{ledgertest.Node("a", nil)}, claim("c1"), claim("c2"), claim("c3"))
	creating, release := make(chan struct{}, 8), make(chan struct{})
	fail := false
	e.kube.PrependReactor("create", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if _, gpu := a.(clienttesting.CreateAction).GetObject().(metav1.Object).GetLabels()[apiv1.LabelLeaseNode]; !gpu {
			return false, nil, nil // the scheduler's peer lease
		}
		select {
		case creating <- struct{}{}:
		default:
		}
		<-release
		if fail {
			l := a.(clienttesting.CreateAction).GetObject().(metav1.Object)
			return true, nil, apierrors.NewAlreadyExists(a.GetResource().GroupResource(), l.GetName())
		}
		return false, nil, nil
	})
	// preFilterDone runs pod's PreFilter in the background.
	preFilterDone := func(pod *v1.Pod) chan error {
		done := make(chan error, 1)
		go func() {
			_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil)
			done <- st.AsError()
		}()
		return done
	}
	mustWait := func(done chan error, why string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("PreFilter returned (%v) %s", err, why)
		case <-time.After(200 * time.Millisecond):
		}
	}
	mustReturn := func(done chan error, why string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("PreFilter %s: %v", why, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("PreFilter still waiting %s", why)
		}
	}

	p1 := ledgertest.Pod("p1", "c1")
	bound := make(chan *fwk.Status, 1)
	go func() {
		_, st, _ := e.schedule(t, p1)
		bound <- st
	}()
	<-creating // p1 is in PreBind, creating its lease
	p2 := ledgertest.Pod("p2", "c2")
	done := preFilterDone(p2)
	mustWait(done, "while the one binding slot was p1's")
	release <- struct{}{}
	if st := <-bound; st != nil {
		t.Fatalf("binding p1: %v", st)
	}
	mustReturn(done, "after p1 was bound")

	// A failed PreBind gives the slot back through Unreserve.
	fail = true
	p3 := ledgertest.Pod("p3", "c3")
	go func() {
		_, st, _ := e.schedule(t, p2)
		bound <- st
	}()
	<-creating
	done = preFilterDone(p3)
	mustWait(done, "while the one binding slot was p2's")
	close(release) // every create from now on fails at once (a lost race, then its take-over)
	if st := <-bound; st == nil {
		t.Fatal("p2 was bound though its lease create failed")
	}
	mustReturn(done, "after p2's PreBind failed")
}
