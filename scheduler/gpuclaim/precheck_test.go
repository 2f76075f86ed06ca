package gpuclaim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	clienttesting "k8s.io/client-go/testing"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// heldLeases creates the leases of GPUs ids on node a held by holder, and waits until the
// plugin's lease informer shows them.
func heldLeases(t *testing.T, e *testEnv, holder *v1.Pod, ids ...int) {
	t.Helper()
	for _, id := range ids {
		name := fmt.Sprintf("gpu-a-%d", id)
		if _, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Create(t.Context(), &coordinationv1.Lease{
			// The fake clientset sets no creation time: without one the lease looks older than
			// the orphan grace, and the orphan sweep may delete it before the informer shows it.
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpu-scheduler", CreationTimestamp: metav1.Now(),
				Labels: map[string]string{apiv1.LabelLeaseNode: "a", apiv1.LabelLeaseGPU: fmt.Sprint(id)}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo(string(holder.UID))},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventuallyTrue(t, func() bool { _, err := e.p.leaseLister.Leases("gpu-scheduler").Get(name); return err == nil })
	}
}

// TestPrecheckDeletesStaleLeasesTogether: a pod placed on a whole box whose last pod went
// away before the release queue deleted its leases deletes them all at once, not one after
// another (each delete is a round trip before the creates can start).
func TestPrecheckDeletesStaleLeasesTogether(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	dead := ledgertest.Pod("dead", "")
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	heldLeases(t, e, dead, all...)
	e.p.pods.gone(dead.UID)
	b := &deleteBarrier{want: len(all), wait: 300 * time.Millisecond}
	e.p.client = barrierClient{Interface: e.kube, b: b}

	if err := e.p.precheck(t.Context(), ledgertest.Pod("p", "eight"), "a", all, false); err != nil {
		t.Fatal(err)
	}
	if b.maxSeen != len(all) {
		t.Errorf("at most %d stale lease deletes were in flight together, want all %d", b.maxSeen, len(all))
	}
	left, err := e.kube.CoordinationV1().Leases("gpu-scheduler").List(t.Context(), metav1.ListOptions{})
	if err != nil || len(left.Items) != 0 {
		t.Errorf("leases left after the precheck: %d (%v), want none", len(left.Items), err)
	}
}

// TestPrecheckLostDeletesNothing: when one GPU of the set is held by a live pod the attempt is
// lost, and the stale leases of the other GPUs are left to the release queue rather than
// deleted for an attempt that creates nothing.
func TestPrecheckLostDeletesNothing(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	dead, live := ledgertest.Pod("dead", ""), ledgertest.Pod("live", "")
	heldLeases(t, e, dead, 0, 1, 2)
	heldLeases(t, e, live, 3)
	e.p.pods.gone(dead.UID)
	e.kube.ClearActions()

	err := e.p.precheck(t.Context(), ledgertest.Pod("p", "four"), "a", []int{0, 1, 2, 3}, false)
	if !errors.Is(err, errLeaseConflict) {
		t.Fatalf("precheck: %v, want a lease conflict on GPU 3", err)
	}
	for _, a := range e.kube.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("the lost attempt deleted lease %s", a.(clienttesting.DeleteAction).GetName())
		}
	}
}

// deleteBarrier holds every lease delete until want deletes have arrived, or for wait at most,
// and records the most that were in flight together.
type deleteBarrier struct {
	want int
	wait time.Duration

	mu      sync.Mutex
	in      int
	maxSeen int
	all     chan struct{}
}

func (b *deleteBarrier) arrive() {
	b.mu.Lock()
	if b.all == nil {
		b.all = make(chan struct{})
	}
	b.in++
	b.maxSeen = max(b.maxSeen, b.in)
	all := b.all
	if b.in == b.want {
		close(all)
	}
	b.mu.Unlock()
	select {
	case <-all:
	case <-time.After(b.wait):
	}
	b.mu.Lock()
	b.in--
	b.mu.Unlock()
}

// barrierClient is a clientset whose lease deletes pass a deleteBarrier first.
type barrierClient struct {
	kubernetes.Interface
	b *deleteBarrier
}

func (c barrierClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return barrierCoordination{c.Interface.CoordinationV1(), c.b}
}

type barrierCoordination struct {
	coordinationv1client.CoordinationV1Interface
	b *deleteBarrier
}

func (c barrierCoordination) Leases(ns string) coordinationv1client.LeaseInterface {
	return barrierLeases{c.CoordinationV1Interface.Leases(ns), c.b}
}

type barrierLeases struct {
	coordinationv1client.LeaseInterface
	b *deleteBarrier
}

func (l barrierLeases) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	l.b.arrive()
	return l.LeaseInterface.Delete(ctx, name, opts)
}

// TestLeaseOfAGonePodHoldsNothing: a lease that reaches the informer after its holder was seen
// going away does not hold the GPU in the ledger, while a live pod's lease does.
func TestLeaseOfAGonePodHoldsNothing(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	dead, live := ledgertest.Pod("dead", ""), ledgertest.Pod("live", "")
	e.p.pods.gone(dead.UID)
	heldLeases(t, e, dead, 0, 1)
	// The informer hands leases to the plugin in order: once the live pod's shows in the
	// ledger, the dead pod's have been handled too.
	heldLeases(t, e, live, 2)
	eventuallyTrue(t, func() bool { n, _ := e.p.ledger.HoldsOf(live.UID); return n == "a" })
	if n, ids := e.p.ledger.HoldsOf(dead.UID); n != "" || len(ids) > 0 {
		t.Errorf("the ledger holds GPUs %v on node %q for a pod seen gone", ids, n)
	}
}
