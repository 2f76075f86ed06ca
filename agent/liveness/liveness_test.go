package liveness_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/agent/liveness"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

const ns = "gpu-scheduler"

func newRenewer(t *testing.T, node string, kube *fake.Clientset, clk *clocktesting.FakePassiveClock, interval time.Duration) *liveness.Renewer {
	t.Helper()
	r, err := liveness.New(liveness.Config{Node: node, Namespace: ns, Client: kube, Clock: clk, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func leaseWrites(kube *fake.Clientset) (gets, creates, updates int) {
	for _, a := range kube.Actions() {
		if a.GetResource().Resource != "leases" {
			continue
		}
		switch a.GetVerb() {
		case "get":
			gets++
		case "create":
			creates++
		case "update":
			updates++
		}
	}
	return
}

// The first renewal creates the lease at once; later ones update the copy written last,
// without reading it first, each when the spread interval says.
func TestRenewCreatesThenUpdatesOnSchedule(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	kube := fake.NewClientset(node)
	r := newRenewer(t, "n1", kube, clk, 3*time.Minute)
	if !r.Due().IsZero() {
		t.Fatalf("first renewal due at %s, want at once", r.Due())
	}
	if ok, err := r.Renew(ctx, node); !ok || err != nil {
		t.Fatalf("first Renew = %v, %v", ok, err)
	}
	second := r.Due()
	if d := second.Sub(clk.Now()); d <= 0 || d > 3*time.Minute {
		t.Fatalf("second renewal due after %s, want within (0, 3m] (spread)", d)
	}
	clk.SetTime(second.Add(-time.Second))
	if ok, _ := r.Renew(ctx, node); ok {
		t.Fatal("renewed before it was due")
	}
	clk.SetTime(second)
	if ok, err := r.Renew(ctx, node); !ok || err != nil {
		t.Fatalf("second Renew = %v, %v", ok, err)
	}
	if d := r.Due().Sub(clk.Now()); d != r.Interval() || d < 144*time.Second || d > 3*time.Minute {
		t.Fatalf("third renewal due after %s, want the node's interval %s in [2m24s, 3m]", d, r.Interval())
	}
	if gets, creates, updates := leaseWrites(kube); gets != 1 || creates != 1 || updates != 1 {
		t.Errorf("%d gets, %d creates, %d updates; want 1, 1, 1", gets, creates, updates)
	}
	l, err := kube.CoordinationV1().Leases(ns).Get(ctx, "gpu-n1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Spec.RenewTime.Time.Equal(clk.Now()) || *l.Spec.HolderIdentity != "n1" || l.Labels[apiv1.LabelAgentLiveness] != apiv1.SchedulerName {
		t.Errorf("lease %+v %v", l.Spec, l.Labels)
	}
}

// A restarted agent finds its lease and renews it (read, then update); someone else's change
// (a conflict) makes it read again and renew in the same call.
func TestRenewAdoptsExistingLeaseAndRecoversFromConflict(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	old := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpu-n1-agent", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: clk.Now().Add(-time.Hour)}}}
	kube := fake.NewClientset(old)
	r := newRenewer(t, "n1", kube, clk, time.Minute)
	if ok, err := r.Renew(ctx, nil); !ok || err != nil { // no node needed: the lease exists
		t.Fatalf("Renew of an existing lease = %v, %v", ok, err)
	}
	conflicts := 1
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, "gpu-n1-agent", errors.New("changed"))
		}
		return false, nil, nil
	})
	clk.SetTime(r.Due())
	if ok, err := r.Renew(ctx, nil); !ok || err != nil {
		t.Fatalf("Renew after a conflict = %v, %v", ok, err)
	}
	l, _ := kube.CoordinationV1().Leases(ns).Get(ctx, "gpu-n1-agent", metav1.GetOptions{})
	if !l.Spec.RenewTime.Time.Equal(clk.Now()) || l.Labels[apiv1.LabelAgentLiveness] == "" {
		t.Errorf("lease not renewed or not labelled: %+v %v", l.Spec, l.Labels)
	}
}

// A liveness lease another source wrote for this node, held by another node and carrying the
// GPU leases' label: the agent's renewal makes it its own (holderIdentity its node, no
// gpu.scheduling/node label), the only lease the chart's agent policy lets it write.
func TestRenewTakesBackALeaseWrittenElsewhere(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	old := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpu-n1-agent", Namespace: ns,
		Labels: map[string]string{apiv1.LabelLeaseNode: "n1", apiv1.LabelAgentLiveness: "other"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n2"), RenewTime: &metav1.MicroTime{Time: clk.Now().Add(time.Hour)}}}
	kube := fake.NewClientset(old)
	r := newRenewer(t, "n1", kube, clk, time.Minute)
	if ok, err := r.Renew(ctx, nil); !ok || err != nil {
		t.Fatalf("Renew = %v, %v", ok, err)
	}
	l, err := kube.CoordinationV1().Leases(ns).Get(ctx, "gpu-n1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != "n1" || l.Labels[apiv1.LabelAgentLiveness] != apiv1.SchedulerName {
		t.Errorf("lease held by %q labelled %v; want n1 and %s=%s", ptr.Deref(l.Spec.HolderIdentity, ""), l.Labels, apiv1.LabelAgentLiveness, apiv1.SchedulerName)
	}
	if _, ok := l.Labels[apiv1.LabelLeaseNode]; ok {
		t.Errorf("the liveness lease keeps the GPU leases' label %s: %v", apiv1.LabelLeaseNode, l.Labels)
	}
}

// A failing API server is retried after 1 s, 2 s, 4 s ..., never spun on; the first success
// resets the wait.
func TestRenewBacksOff(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	kube := fake.NewClientset(node)
	failing := true
	kube.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, apierrors.NewServiceUnavailable("down")
		}
		return false, nil, nil
	})
	r := newRenewer(t, "n1", kube, clk, 3*time.Minute)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if ok, err := r.Renew(ctx, node); ok || err == nil {
			t.Fatalf("try %d: Renew = %v, %v; want an error", i, ok, err)
		}
		if got := r.Due().Sub(clk.Now()); got != want {
			t.Fatalf("try %d: retry after %s, want %s", i, got, want)
		}
		if ok, _ := r.Renew(ctx, node); ok {
			t.Fatalf("try %d: renewed before the retry time", i)
		}
		clk.SetTime(r.Due())
	}
	failing = false
	if ok, err := r.Renew(ctx, node); !ok || err != nil {
		t.Fatalf("Renew once the server answers = %v, %v", ok, err)
	}
	if got := r.Due().Sub(clk.Now()); got <= 0 || got > 3*time.Minute {
		t.Fatalf("next renewal after %s, want the spread interval", got)
	}
}

// A fleet started at once renews spread over the interval from its second renewal on: of
// 1,000 nodes, no 18-second tenth of the 3-minute interval holds more than twice its share.
func TestRenewalsOfAFleetAreSpread(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	kube := fake.NewClientset()
	const nodes, interval = 1000, 3 * time.Minute
	buckets := make([]int, 10)
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		r := newRenewer(t, name, kube, clk, interval)
		if _, err := r.Renew(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u"}}); err != nil {
			t.Fatal(err)
		}
		d := r.Due().Sub(clk.Now())
		if d <= 0 || d > interval {
			t.Fatalf("node %s: second renewal after %s", name, d)
		}
		buckets[int(d*10/(interval+1))]++
	}
	for i, n := range buckets {
		if n > 2*nodes/10 {
			t.Errorf("%d of %d second renewals in tenth %d of the interval: %v", n, nodes, i, buckets)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	kube := fake.NewClientset()
	for _, cfg := range []liveness.Config{
		{Node: "", Namespace: ns, Client: kube, Interval: time.Minute},
		{Node: "n", Namespace: "", Client: kube, Interval: time.Minute},
		{Node: "n", Namespace: ns, Client: kube},
	} {
		if _, err := liveness.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}
