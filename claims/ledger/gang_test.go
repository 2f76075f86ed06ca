package ledger

import (
	"slices"
	"testing"
	"time"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

func TestGangFitsIsBestFit(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(ledgertest.SeedStatus("a", now)) // 7 healthy GPUs: 0-3 in one island, 4-6 in the other
	l.SetStatus(ledgertest.SeedStatus("b", now))
	if _, err := l.Reserve("other", "ns/other", "b", reqOf(4)); err != nil { // b keeps 3 free
		t.Fatal(err)
	}
	all := func(*apiv1.GpuClaim, string) bool { return true }
	m := func(n int) GangMember { return GangMember{Claim: &apiv1.GpuClaim{}, Req: reqOf(n)} }
	tests := []struct {
		members []GangMember
		want    int
	}{
		{[]GangMember{m(4), m(3), m(3)}, 3}, // 4 and 3 on a, 3 on b
		{[]GangMember{m(3), m(3), m(4)}, 3}, // order of the members does not matter
		{[]GangMember{m(4), m(4)}, 1},       // b has only 3 left
		{[]GangMember{m(1), m(1), m(1), m(1), m(1), m(1), m(1), m(1), m(1), m(1), m(1)}, 10},
	}
	for i, tt := range tests {
		if got := l.GangFits(tt.members, now.Add(-time.Minute), all); got != tt.want {
			t.Errorf("case %d: %d members fit, want %d", i, got, tt.want)
		}
	}
	// The plan names the node of each member counted, largest first, best fit.
	if placed, nodes := l.GangPlan([]GangMember{m(3), m(4), m(3)}, now.Add(-time.Minute), all); placed != 3 || !slices.Equal(nodes, []string{"a", "a", "b"}) {
		t.Errorf("plan: %d placed on %v, want 3 on [a a b]", placed, nodes)
	}
	// Stale nodes and nodes the selector rules out do not count.
	if got := l.GangFits([]GangMember{m(1)}, now.Add(time.Minute), all); got != 0 {
		t.Errorf("stale nodes: %d fit", got)
	}
	if got := l.GangFits([]GangMember{m(1)}, now.Add(-time.Minute), func(_ *apiv1.GpuClaim, n string) bool { return false }); got != 0 {
		t.Errorf("no node selected: %d fit", got)
	}
}

func reqOf(n int) allocator.Request { return allocator.Request{Count: n} }
