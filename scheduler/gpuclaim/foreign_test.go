package gpuclaim

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// foreignLease is a lease of a GPU lease's name without the scheduler's labels, as a person or
// another tool would make it.
func foreignLease(name string, renewed *time.Time, seconds *int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpu-scheduler"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone"), LeaseDurationSeconds: seconds},
	}
	if renewed != nil {
		l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
	}
	return l
}

// heldBy returns who the ledger says holds GPU id of node ("" for nobody).
func heldBy(t *testing.T, e *testEnv, node string, id int) string {
	t.Helper()
	n, _ := e.p.ledger.NodeView(node)
	if n == nil {
		t.Fatalf("node %s has no status in the ledger", node)
	}
	for _, g := range n.GPUs {
		if g.ID == id {
			return g.ExclusiveHolder
		}
	}
	t.Fatalf("node %s has no GPU %d", node, id)
	return ""
}

// A lease named gpu-{node}-{id} that the scheduler did not make holds that GPU: no pod can lock
// it while it is there. It counts as held by an unknown holder until it expires, and is then
// collected, so the GPU is neither offered in vain nor blocked forever.
func TestForeignLeaseHoldsItsGPUUntilItExpires(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	now := e.clock.Now()
	ctx := t.Context()
	leases := e.kube.CoordinationV1().Leases("gpu-scheduler")
	for _, l := range []*coordinationv1.Lease{
		foreignLease("gpu-a-0", &now, ptr.To[int32](60)),                       // live for a minute
		foreignLease("gpu-a-1", nil, nil),                                      // no renewal: expired
		foreignLease("gpu-a-2", ptr.To(now.Add(time.Hour)), ptr.To[int32](60)), // stamped in the future
	} {
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A half-labelled one (our node label, no GPU label) reaches the GPU lease informer.
	half := foreignLease("gpu-a-3", &now, ptr.To[int32](60))
	half.Labels = map[string]string{apiv1.LabelLeaseNode: "a"}
	if _, err := leases.Create(ctx, half, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		return heldBy(t, e, "a", 0) != "" && heldBy(t, e, "a", 1) != "" && heldBy(t, e, "a", 2) != "" && heldBy(t, e, "a", 3) != ""
	})
	if h := heldBy(t, e, "a", 0); h != "lease:gpu-a-0" {
		t.Errorf("GPU a/0 held by %q; want the unknown holder lease:gpu-a-0", h)
	}

	// The first scan collects the lease that never renews, and keeps the live ones.
	e.p.collectOrphans(ctx)
	gone := func(name string) bool {
		_, err := leases.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	if !gone("gpu-a-1") {
		t.Error("a foreign lease without a renewal was not collected")
	}
	for _, name := range []string{"gpu-a-0", "gpu-a-2", "gpu-a-3"} {
		if gone(name) {
			t.Errorf("live foreign lease %s collected", name)
		}
	}
	eventuallyTrue(t, func() bool { return heldBy(t, e, "a", 1) == "" })
	if !hasEvent(e, "ForeignGpuLeaseCollected") {
		t.Error("no event for the collected lease")
	}

	// A minute on, with no renewal seen, the others have expired, the one stamped an hour ahead
	// included: its renewal counts as the time it was seen.
	e.clock.Step(61 * time.Second)
	e.p.collectOrphans(ctx)
	for _, name := range []string{"gpu-a-0", "gpu-a-2", "gpu-a-3"} {
		if !gone(name) {
			t.Errorf("expired foreign lease %s not collected", name)
		}
	}
	eventuallyTrue(t, func() bool {
		return heldBy(t, e, "a", 0) == "" && heldBy(t, e, "a", 2) == "" && heldBy(t, e, "a", 3) == ""
	})

	// The GPUs are the scheduler's to lock again.
	c := ledgertest.Claim("all", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 7}, Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyIgnore}})
	createClaimStatusLess(t, e, c)
	if got, st, _ := e.schedule(t, ledgertest.Pod("p", "all")); st != nil || got != "a" {
		t.Fatalf("pod for every healthy GPU of a: %q, %v", got, st)
	}
}
