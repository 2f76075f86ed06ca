package gpuclaim

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

func livenessLease(node string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + node + "-agent", Namespace: "gpu-scheduler", ResourceVersion: "7",
			Labels:          map[string]string{apiv1.LabelAgentLiveness: apiv1.SchedulerName},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Node", Name: node}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "gpu-agent"}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](600),
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// fresh tells whether the ledger offers node to a 1-GPU request with the freshness limit at
// oldest, by every path the plugin asks it: PreFilter's candidates, the activator's FitsOn and
// Filter's place.
func fresh(t *testing.T, l *ledger.Ledger, node string, oldest time.Time) bool {
	t.Helper()
	req := allocator.Request{Count: 1}
	by, stale := l.Candidates(&req, oldest, func(string) bool { return true })
	defer ledger.ReleaseCandidates(by)
	listed := false
	for _, tier := range by {
		for _, c := range tier {
			listed = listed || c.Name == node
		}
	}
	_, heartbeat, _, ok := l.Place(node, "", ledger.RequestKey(&req), req)
	byPlace := ok && !heartbeat.Before(oldest)
	if fits := l.FitsOn(node, &req, oldest); fits != listed || fits != byPlace || listed == (stale > 0) {
		t.Fatalf("node %s: FitsOn %v, candidates %v (stale %d), place %v disagree", node, fits, listed, stale, byPlace)
	}
	return listed
}

// A node is fresh while the newer of its status heartbeat and its agent's lease renewal is.
func TestLedgerFreshnessFromLivenessLease(t *testing.T) {
	now := time.Now()
	oldest := now.Add(-10 * time.Minute)

	l := ledger.New()
	l.SetStatus(ledgertest.SeedStatus("a", now.Add(-25*time.Minute))) // unchanged for 25 minutes
	if fresh(t, l, "a", oldest) {
		t.Fatal("a status 25 minutes old without a lease renewal is fresh")
	}
	if before, after := l.SetRenewed("a", now.Add(-time.Minute)); !before.Equal(now.Add(-25*time.Minute)) || !after.Equal(now.Add(-time.Minute)) {
		t.Errorf("SetRenewed = %s, %s; want the status heartbeat, then the renewal", before, after)
	}
	if !fresh(t, l, "a", oldest) {
		t.Fatal("an old status with a lease renewed a minute ago is not fresh: the node gets no pods")
	}
	// A status write does not take the renewal back, nor the renewal a newer status heartbeat.
	l.SetStatus(ledgertest.SeedStatus("a", now.Add(-20*time.Minute)))
	if !fresh(t, l, "a", oldest) {
		t.Fatal("a status write made the node stale although its lease is fresh")
	}

	// The agent stops renewing: its last status refresh keeps the node fresh for the
	// freshness limit, no longer.
	l.SetStatus(ledgertest.SeedStatus("b", now))
	l.SetRenewed("b", now.Add(-30*time.Minute))
	if !fresh(t, l, "b", oldest) {
		t.Fatal("a status written now is not fresh")
	}
	later := now.Add(11 * time.Minute)
	if fresh(t, l, "b", later.Add(-10*time.Minute)) {
		t.Fatal("a node whose lease stopped renewing is still fresh 11 minutes after its last status write")
	}

	// The lease going away leaves the status alone to judge.
	l.SetRenewed("a", time.Time{})
	if fresh(t, l, "a", oldest) {
		t.Fatal("a deleted lease still keeps the node fresh")
	}
}

// The ledger keeps a renewal for a node whose status has not arrived yet (informers deliver in
// any order), but such a node is never schedulable, and an entry with nothing left is dropped.
func TestLedgerRenewalWithoutStatus(t *testing.T) {
	now := time.Now()
	l := ledger.New()
	if before, after := l.SetRenewed("n", now); !before.IsZero() || !after.IsZero() {
		t.Errorf("SetRenewed without a status = %s, %s; want zero: no status, never fresh", before, after)
	}
	if l.FitsOn("n", &allocator.Request{Count: 1}, now.Add(-time.Minute)) {
		t.Fatal("a node without a status fits")
	}
	l.SetStatus(ledgertest.SeedStatus("n", now.Add(-time.Hour)))
	if !fresh(t, l, "n", now.Add(-time.Minute)) {
		t.Fatal("the renewal seen before the status was forgotten")
	}
	l.DeleteStatus("n")
	l.SetRenewed("n", time.Time{})
	if l.Nodes() != 0 {
		t.Errorf("ledger keeps %d entries after the status and the lease went", l.Nodes())
	}
}

// livenessPlugin is a plugin with a ledger, a fake clock and a 10-minute freshness limit.
func livenessPlugin(t *testing.T) *Plugin {
	p := hintPlugin(t)
	p.freshness, p.ledger = 10*time.Minute, ledger.New()
	return p
}

// A renewal that makes a stale node fresh sends the waiting pods back to the queue, as a fresh
// GpuNodeStatus does; a renewal of a node that was fresh anyway does not.
func TestLivenessRenewalHint(t *testing.T) {
	p := livenessPlugin(t)
	now := p.clock.Now()
	h := p.livenessHandler(t.Context())
	p.ledger.SetStatus(ledgertest.SeedStatus("stale", now.Add(-time.Hour)))
	p.ledger.SetStatus(ledgertest.SeedStatus("fresh", now.Add(-time.Minute)))
	p.ledger.SetStatus(ledgertest.SeedStatus("old-lease", now.Add(-time.Hour)))
	for _, tt := range []struct {
		name     string
		old, new *coordinationv1.Lease
		want     bool
	}{
		{"stale node renewed", livenessLease("stale", now.Add(-time.Hour)), livenessLease("stale", now), true},
		{"stale node's first lease", nil, livenessLease("stale", now), true},
		{"fresh node renewed", livenessLease("fresh", now.Add(-time.Minute)), livenessLease("fresh", now), false},
		{"renewal still stale", livenessLease("old-lease", now.Add(-50*time.Minute)), livenessLease("old-lease", now.Add(-40*time.Minute)), false},
		{"node without a status", nil, livenessLease("unknown", now), false},
	} {
		p.changed.take()
		p.ledger.SetRenewed(*tt.new.Spec.HolderIdentity, time.Time{})
		if tt.old != nil {
			p.ledger.SetRenewed(*tt.old.Spec.HolderIdentity, tt.old.Spec.RenewTime.Time)
		}
		if tt.old == nil {
			h.OnAdd(tt.new, false)
		} else {
			h.OnUpdate(tt.old, tt.new)
		}
		if got := len(p.changed.take()) > 0; got != tt.want {
			t.Errorf("%s: waiting pods reactivated = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A status write on a node that its lease keeps fresh wakes nobody, even though the status's
// own heartbeat was stale; a status write that makes a stale node fresh does.
func TestStatusHeartbeatHintCountsTheLease(t *testing.T) {
	p := livenessPlugin(t)
	now := p.clock.Now()
	h := p.nodeStatusHandler(t.Context())
	old := ledgertest.SeedStatus("n", now.Add(-25*time.Minute))
	h.OnAdd(old, false)
	p.ledger.SetRenewed("n", now.Add(-time.Minute))
	p.changed.take()
	refreshed := ledgertest.SeedStatus("n", now)
	h.OnUpdate(old, refreshed)
	if len(p.changed.take()) != 0 {
		t.Error("a status refresh of a node its lease keeps fresh reactivated waiting pods")
	}
	p.ledger.SetRenewed("n", time.Time{}) // the lease went; the status alone judges
	stale := ledgertest.SeedStatus("n", now.Add(-time.Hour))
	h.OnUpdate(refreshed, stale)
	p.changed.take()
	h.OnUpdate(stale, ledgertest.SeedStatus("n", now))
	if len(p.changed.take()) == 0 {
		t.Error("a status write that made a stale node fresh reactivated nobody")
	}
}

// The lease informer keeps only what the plugin reads; tombstones and foreign objects pass.
func TestSlimLiveness(t *testing.T) {
	obj, err := slimLiveness(livenessLease("n", time.Unix(1e9, 0)))
	if err != nil {
		t.Fatal(err)
	}
	l := obj.(*coordinationv1.Lease)
	if l.Name != "gpu-n-agent" || l.Namespace != "gpu-scheduler" || l.ResourceVersion != "7" || *l.Spec.HolderIdentity != "n" || !l.Spec.RenewTime.Equal(&metav1.MicroTime{Time: time.Unix(1e9, 0)}) {
		t.Errorf("slim lease lost what is read: %+v", l)
	}
	if l.Labels != nil || l.OwnerReferences != nil || l.ManagedFields != nil || l.Spec.LeaseDurationSeconds != nil {
		t.Errorf("slim lease keeps what is not read: %+v", l)
	}
	node, renewed, ok := livenessOf(cache.DeletedFinalStateUnknown{Obj: l})
	if !ok || node != "n" || !renewed.Equal(time.Unix(1e9, 0)) {
		t.Errorf("livenessOf(tombstone) = %q, %s, %v", node, renewed, ok)
	}
	if _, _, ok := livenessOf(&v1.Pod{}); ok {
		t.Error("livenessOf read a pod")
	}
	if _, _, ok := livenessOf(&coordinationv1.Lease{}); ok {
		t.Error("livenessOf read a lease without a holder")
	}
}
