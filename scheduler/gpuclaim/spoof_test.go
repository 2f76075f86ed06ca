package gpuclaim

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// spoofPlugin is livenessPlugin with the ledger on the plugin's fake clock.
func spoofPlugin(t *testing.T) (*Plugin, *clocktesting.FakeClock) {
	p := livenessPlugin(t)
	clk := p.clock.(*clocktesting.FakeClock)
	p.ledger.SetClock(clk.Now)
	return p, clk
}

// One node's agent may write only the GpuNodeStatus named after its node (the admission
// policy); a status naming another node in spec.nodeName must not rewrite that node's GPUs.
func TestStatusNotNamedAfterItsNodeIsIgnored(t *testing.T) {
	p, clk := spoofPlugin(t)
	h := p.nodeStatusHandler(t.Context())
	victim := ledgertest.SeedStatus("victim", clk.Now())
	h.OnAdd(victim, false)
	forged := ledgertest.SeedStatus("attacker", clk.Now())
	forged.Spec.NodeName = "victim"
	forged.Status.Devices = forged.Status.Devices[:1] // the victim's GPUs, as the attacker would have them
	h.OnAdd(forged, false)
	if n, _ := p.ledger.NodeView("victim"); n == nil || len(n.GPUs) != 8 {
		t.Fatalf("victim's GPUs after a forged status: %v; want its own 8", n)
	}
	if n, _ := p.ledger.NodeView("attacker"); n != nil {
		t.Errorf("a status not named after its node was taken for node attacker: %v", n)
	}
	// A status that was valid and then names another node is dropped.
	own := ledgertest.SeedStatus("attacker", clk.Now())
	h.OnAdd(own, false)
	h.OnUpdate(own, forged)
	if n, _ := p.ledger.NodeView("attacker"); n != nil {
		t.Errorf("node attacker kept its GPUs after its status named another node: %v", n)
	}
	if n, _ := p.ledger.NodeView("victim"); n == nil || len(n.GPUs) != 8 {
		t.Errorf("victim's GPUs after the forged update: %v; want its own 8", n)
	}
}

// A liveness lease is a sign of life only of the node its name says.
func TestLivenessLeaseOfAnotherNodeIsIgnored(t *testing.T) {
	p, clk := spoofPlugin(t)
	h := p.livenessHandler(t.Context())
	p.ledger.SetStatus(ledgertest.SeedStatus("dead", clk.Now().Add(-time.Hour)))
	oldest := clk.Now().Add(-p.freshness)
	forged := livenessLease("attacker", clk.Now())
	forged.Spec.HolderIdentity = ptr.To("dead")
	h.OnAdd(forged, false)
	if fresh(t, p.ledger, "dead", oldest) {
		t.Error("a lease named after another node kept node dead alive")
	}
	// A lease that was the node's own and then names another node stops counting for both.
	p, clk = spoofPlugin(t)
	h = p.livenessHandler(t.Context())
	oldest = clk.Now().Add(-p.freshness)
	p.ledger.SetStatus(ledgertest.SeedStatus("attacker", clk.Now().Add(-time.Hour)))
	own := livenessLease("attacker", clk.Now())
	h.OnAdd(own, false)
	if !fresh(t, p.ledger, "attacker", oldest) {
		t.Fatal("a node's own lease did not keep it fresh")
	}
	h.OnUpdate(own, forged)
	if fresh(t, p.ledger, "attacker", oldest) {
		t.Error("a lease that names another node than its own still counts")
	}
}

// A heartbeat or renewal stamped in the future counts as the time it was seen: once the updates
// stop, the node goes stale one freshness window later.
func TestFutureSignsOfLifeAreClamped(t *testing.T) {
	p, clk := spoofPlugin(t)
	future := clk.Now().Add(365 * 24 * time.Hour)
	p.nodeStatusHandler(t.Context()).OnAdd(ledgertest.SeedStatus("by-status", future), false)
	p.ledger.SetStatus(ledgertest.SeedStatus("by-lease", clk.Now().Add(-time.Hour)))
	p.livenessHandler(t.Context()).OnAdd(livenessLease("by-lease", future), false)
	for _, n := range []string{"by-status", "by-lease"} {
		if !fresh(t, p.ledger, n, clk.Now().Add(-p.freshness)) {
			t.Errorf("node %s: not fresh right after its sign of life", n)
		}
		if _, hb := p.ledger.NodeView(n); hb.After(clk.Now()) {
			t.Errorf("node %s: heartbeat %s is after the time it was seen (%s)", n, hb, clk.Now())
		}
	}
	clk.Step(p.freshness + time.Second)
	for _, n := range []string{"by-status", "by-lease"} {
		if fresh(t, p.ledger, n, clk.Now().Add(-p.freshness)) {
			t.Errorf("node %s: still fresh a freshness window after its last update, on a heartbeat stamped in the future", n)
		}
	}
}
