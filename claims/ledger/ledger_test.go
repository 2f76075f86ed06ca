package ledger

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

func TestLedgerHoldsAndReleases(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(ledgertest.SeedStatus("a", now))
	req := allocator.Request{Count: 4, MinBandwidthGBps: 600}

	res, err := l.Reserve("pod-1", "ns/c1", "a", req)
	if err != nil || !reflect.DeepEqual(res.IDs, []int{0, 1, 2, 3}) {
		t.Fatalf("reserve = %v, %v", res.IDs, err)
	}
	// A second 4-GPU Exclusive claim cannot get the same GPUs: only 4,5,6 are left.
	if _, err := l.Reserve("pod-2", "ns/c2", "a", req); err == nil {
		t.Fatal("second reservation of 4 GPUs must fail: only 3 healthy free GPUs remain")
	}
	if uid, ok := l.ClaimReservedFor("ns/c1"); !ok || uid != "pod-1" {
		t.Fatalf("claim reservation not recorded: %v %v", uid, ok)
	}
	// The lease source keeps the hold when the reservation is forgotten by a restart...
	l.Add("pod-1", "a", []int{0, 1, 2, 3}, false, FromLease)
	l.Remove("pod-1", "", nil, FromReservation)
	if node, ids := l.HoldsOf("pod-1"); node != "a" || !reflect.DeepEqual(ids, []int{0, 1, 2, 3}) {
		t.Fatalf("hold lost with one Source left: %s %v", node, ids)
	}
	// ...and the hold goes with the last source.
	l.Remove("pod-1", "a", nil, FromLease)
	if node, _ := l.HoldsOf("pod-1"); node != "" {
		t.Fatalf("hold survived its last Source")
	}
	// Unreserve is idempotent.
	l.Unreserve("pod-1", "ns/c1")
	l.Unreserve("pod-1", "ns/c1")
	if _, ok := l.ClaimReservedFor("ns/c1"); ok {
		t.Fatal("claim reservation survived unreserve")
	}
	n, _ := l.NodeView("a")
	for _, g := range n.GPUs {
		if g.ExclusiveHolder != "" || g.SharedHolders != 0 {
			t.Fatalf("GPU %d still held after release: %+v", g.ID, g)
		}
	}
}

func TestLedgerSharedAndForget(t *testing.T) {
	l := New()
	l.SetStatus(ledgertest.SeedStatus("a", time.Now()))
	shared := allocator.Request{Count: 1, Exclusivity: allocator.Shared}
	r1, err := l.Reserve("s1", "ns/s1", "a", shared)
	if err != nil {
		t.Fatal(err)
	}
	// Exclusive never lands on the shared GPU.
	for i := 0; i < 6; i++ {
		res, err := l.Reserve(types.UID("x"+string(rune('0'+i))), "ns/x", "a", allocator.Request{Count: 1})
		if err != nil {
			t.Fatalf("exclusive %d: %v", i, err)
		}
		if res.IDs[0] == r1.IDs[0] {
			t.Fatalf("exclusive claim got shared GPU %d", r1.IDs[0])
		}
	}
	// Every healthy GPU is now held; a further Exclusive claim fails, a Shared one joins.
	if _, err := l.Reserve("x9", "ns/x9", "a", allocator.Request{Count: 1}); err == nil {
		t.Fatal("no exclusive GPU should be left")
	}
	r2, err := l.Reserve("s2", "ns/s2", "a", shared)
	if err != nil || r2.IDs[0] != r1.IDs[0] {
		t.Fatalf("shared claim should join GPU %v, got %v, %v", r1.IDs, r2.IDs, err)
	}
	l.Forget("s1")
	l.Forget("s2")
	if _, err := l.Reserve("x9", "ns/x9", "a", allocator.Request{Count: 1}); err != nil {
		t.Fatalf("GPU freed by forget should be allocatable: %v", err)
	}
}

func TestLedgerCandidates(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(ledgertest.SeedStatus("a", now))
	l.SetStatus(ledgertest.SeedStatus("stale", now.Add(-time.Hour)))
	b := ledgertest.SeedStatus("b", now)
	l.SetStatus(b)
	l.Add("p", "b", []int{0}, false, FromLease) // b's fast island has 3 free

	all := func(string) bool { return true }
	by, stale := l.Candidates(&allocator.Request{Count: 4, MinBandwidthGBps: 600}, now.Add(-time.Minute), all)
	if stale != 1 {
		t.Fatalf("stale = %d, want 1", stale)
	}
	// Each candidate carries its room: a's fast island has 4 free of the node's 7 healthy GPUs;
	// no island of b holds the request, so its room is the node's 6 free GPUs.
	if !reflect.DeepEqual(by[FitIslandBandwidth], []Candidate{{"a", room{4, 7}}}) || !reflect.DeepEqual(by[FitNode], []Candidate{{"b", room{6, 6}}}) {
		t.Fatalf("tiers = %v", by)
	}
	by, _ = l.Candidates(&allocator.Request{Count: 4, Topology: allocator.Required, MinBandwidthGBps: 600}, now.Add(-time.Minute), all)
	if len(by[FitIslandBandwidth]) != 1 || len(by[FitNode])+len(by[FitIsland]) != 0 {
		t.Fatalf("Required tiers = %v", by)
	}
	by, _ = l.Candidates(&allocator.Request{Count: 2}, now.Add(-time.Minute), func(n string) bool { return n == "b" })
	if len(by[FitIslandBandwidth]) != 1 || by[FitIslandBandwidth][0].Name != "b" {
		t.Fatalf("selector not applied: %v", by)
	}
	// The summary agrees with the allocator about whether a node fits at all.
	for _, req := range []allocator.Request{{Count: 7}, {Count: 8}, {Count: 3, Topology: allocator.Required, MinBandwidthGBps: 600}, {Count: 4, Topology: allocator.Required, MinBandwidthGBps: 600}} {
		by, _ := l.Candidates(&req, now.Add(-time.Minute), func(n string) bool { return n == "b" })
		n, _ := l.NodeView("b")
		_, err := allocator.Allocate(n, req)
		fits := len(by[FitNode])+len(by[FitIsland])+len(by[FitIslandBandwidth]) > 0
		if fits != (err == nil) {
			t.Fatalf("summary says fits=%v, allocator says %v for %+v", fits, err, req)
		}
	}
}

// forget drops the claim reservation of the forgotten pod only: a claim since reserved for a
// newer pod stays with that pod.
func TestLedgerForgetClearsOnlyItsClaim(t *testing.T) {
	l := New()
	l.SetStatus(ledgertest.SeedStatus("a", time.Now()))
	req := allocator.Request{Count: 1}
	if _, err := l.Reserve("old", "ns/c1", "a", req); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve("other", "ns/c2", "a", req); err != nil {
		t.Fatal(err)
	}
	// The claim moves to a new pod (the old one is gone but not yet forgotten).
	if _, err := l.Reserve("new", "ns/c1", "a", req); err != nil {
		t.Fatal(err)
	}
	l.Forget("old")
	if uid, ok := l.ClaimReservedFor("ns/c1"); !ok || uid != "new" {
		t.Fatalf("forgetting the old pod dropped the new pod's reservation: %q %v", uid, ok)
	}
	l.Forget("new")
	if uid, ok := l.ClaimReservedFor("ns/c1"); ok {
		t.Fatalf("claim still reserved for %q after its pod was forgotten", uid)
	}
	if uid, ok := l.ClaimReservedFor("ns/c2"); !ok || uid != "other" {
		t.Fatalf("an unrelated claim lost its reservation: %q %v", uid, ok)
	}
	if len(l.claimOf) != 1 {
		t.Fatalf("reverse index keeps %d entries, want 1 (pod other): %v", len(l.claimOf), l.claimOf)
	}
}

// Snapshots are shared, read-only views: a later change builds a new view and leaves the one a
// Filter call may still be reading as it was; a pod's own holds are left out only for it.
func TestLedgerSnapshotsAreImmutableViews(t *testing.T) {
	l := New()
	l.SetStatus(ledgertest.SeedStatus("a", time.Now()))
	before, _ := l.NodeView("a")
	if _, err := l.Reserve("p1", "ns/c1", "a", allocator.Request{Count: 2}); err != nil {
		t.Fatal(err)
	}
	for _, g := range before.GPUs {
		if g.ExclusiveHolder != "" {
			t.Fatalf("a reservation changed a snapshot taken before it: GPU %d held by %s", g.ID, g.ExclusiveHolder)
		}
	}
	after, _ := l.NodeView("a")
	held := 0
	for _, g := range after.GPUs {
		if g.ExclusiveHolder == "p1" {
			held++
		}
	}
	if held != 2 {
		t.Fatalf("snapshot after the reservation shows %d GPUs held by p1, want 2", held)
	}
	own, _ := snapshotForTest(l, "a", "p1")
	for _, g := range own.GPUs {
		if g.ExclusiveHolder != "" {
			t.Fatalf("p1's own snapshot shows GPU %d held by %s", g.ID, g.ExclusiveHolder)
		}
	}
	if other, _ := snapshotForTest(l, "a", "p2"); other != after {
		t.Error("a pod without holds on the node should get the shared view, not a copy")
	}
}

// fits with and without a bandwidth floor agrees with walking the lists.
func TestSummaryFitsBandwidthFloor(t *testing.T) {
	s := nodeSummary{islands: []islandSummary{
		{free: []int{600, 600, 300}, shareable: []int{600, 600, 300}},
		{free: []int{900}, shareable: []int{900, 900}},
	}}
	for i := range s.islands {
		is := &s.islands[i]
		is.minFree, is.minShareable = minOf(is.free), minOf(is.shareable)
	}
	for _, c := range []struct {
		req  allocator.Request
		want Fit
	}{
		{allocator.Request{Count: 3}, FitIslandBandwidth},
		{allocator.Request{Count: 3, MinBandwidthGBps: 600}, FitIsland},
		{allocator.Request{Count: 4}, FitNode},
		{allocator.Request{Count: 2, MinBandwidthGBps: 600}, FitIslandBandwidth},
		{allocator.Request{Count: 3, MinBandwidthGBps: 600, Topology: allocator.Required}, FitNone},
		{allocator.Request{Count: 2, MinBandwidthGBps: 900, Exclusivity: allocator.Shared}, FitIslandBandwidth},
		{allocator.Request{Count: 2, MinBandwidthGBps: 900}, FitIsland},
		{allocator.Request{Count: 5}, FitNone},
	} {
		if got := s.fits(&c.req); got != c.want {
			t.Errorf("fits(%+v) = %d, want %d", c.req, got, c.want)
		}
	}
}

// place answers from its cache only while the node is unchanged and the request shape is the
// same; a pod's own leftover holds are offered to it and never cached.
func TestLedgerPlaceCache(t *testing.T) {
	l := New()
	l.SetStatus(ledgertest.SeedStatus("a", time.Now()))
	req := allocator.Request{Count: 2}
	key := RequestKey(&req)
	first, _, err, ok := l.Place("a", "p1", key, req)
	if err != nil || !ok || len(first.IDs) != 2 {
		t.Fatalf("place = %v, %v, %v", first.IDs, err, ok)
	}
	again, _, _, _ := l.Place("a", "p2", key, req)
	if !reflect.DeepEqual(again.IDs, first.IDs) {
		t.Fatalf("same shape on an unchanged node placed differently: %v vs %v", again.IDs, first.IDs)
	}
	// Another pod takes those GPUs: the cached answer must not be served any more.
	if _, err := l.Reserve("p1", "ns/c1", "a", req); err != nil {
		t.Fatal(err)
	}
	next, _, err, _ := l.Place("a", "p2", key, req)
	if err != nil || reflect.DeepEqual(next.IDs, first.IDs) {
		t.Fatalf("after the node changed, place still offers the taken GPUs %v (err %v)", next.IDs, err)
	}
	// p1 holds GPUs here: its own placement ignores its holds and may reuse them.
	own, _, err, _ := l.Place("a", "p1", key, req)
	if err != nil || !reflect.DeepEqual(own.IDs, first.IDs) {
		t.Fatalf("p1 is not offered its own held GPUs again: %v, %v", own.IDs, err)
	}
	// A different shape is a different entry; an unfit answer is cached as such.
	big := allocator.Request{Count: 64}
	if _, _, err, _ := l.Place("a", "p2", RequestKey(&big), big); err == nil {
		t.Fatal("64 GPUs placed on an 8-GPU node")
	}
	if _, _, err, _ := l.Place("a", "p2", RequestKey(&big), big); err == nil {
		t.Fatal("cached unfit answer lost its error")
	}
	if _, _, _, ok := l.Place("missing", "p2", key, req); ok {
		t.Fatal("place on a node without GpuNodeStatus reported ok")
	}
	if RequestKey(&allocator.Request{Count: 1, PreferIDs: []int{1, 2}}) == RequestKey(&allocator.Request{Count: 1, PreferIDs: []int{1}}) {
		t.Fatal("requests with different preferIds share a key")
	}
}

// snapshotForTest is the view of node that pod self's Filter would see.
func snapshotForTest(l *Ledger, node string, self types.UID) (*allocator.Node, time.Time) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.snapshotExcept(node, self)
}

// The shape groups follow every change of a node (status, holds, deletion): candidates, which
// judges each group once, finds exactly what judging every node finds.
func TestLedgerShapeGroupsMatchEveryNode(t *testing.T) {
	l := New()
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "d", "e", "f"}
	reqs := []allocator.Request{{Count: 1}, {Count: 2, MinBandwidthGBps: 600}, {Count: 4, Topology: allocator.Required, MinBandwidthGBps: 600},
		{Count: 3, Exclusivity: allocator.Shared}, {Count: 6}}
	for step := range 400 {
		n := names[rng.IntN(len(names))]
		uid := types.UID(fmt.Sprintf("pod-%d", rng.IntN(8)))
		switch rng.IntN(5) {
		case 0:
			l.SetStatus(ledgertest.SeedStatus(n, now.Add(-time.Duration(rng.IntN(2))*time.Hour)))
		case 1:
			l.DeleteStatus(n)
		case 2, 3:
			l.Add(uid, n, []int{rng.IntN(8), rng.IntN(8)}, rng.IntN(2) == 0, FromLease)
		case 4:
			l.Remove(uid, n, nil, FromLease)
		}
		for _, req := range reqs {
			byFit, stale := l.Candidates(&req, now.Add(-time.Minute), func(string) bool { return true })
			var want [FitIslandBandwidth + 1][]Candidate
			wantStale := 0
			for name, e := range l.nodes {
				if e.base == nil {
					continue
				}
				f, r := e.sum.fitsWithFree(&req)
				if f == FitNone {
					continue
				}
				if e.heartbeat.Before(now.Add(-time.Minute)) {
					wantStale++
					continue
				}
				want[f] = append(want[f], Candidate{name, r})
			}
			for f := range want {
				got := slices.Clone(byFit[f])
				byName := func(a, b Candidate) int { return strings.Compare(a.Name, b.Name) }
				slices.SortFunc(got, byName)
				slices.SortFunc(want[f], byName)
				if !slices.Equal(got, want[f]) {
					t.Fatalf("step %d, %+v, tier %d: candidates %v, every node judged %v", step, req, f, got, want[f])
				}
			}
			if stale != wantStale {
				t.Fatalf("step %d, %+v: stale %d, want %d", step, req, stale, wantStale)
			}
			ReleaseCandidates(byFit)
		}
	}
	if len(l.shapes) == 0 {
		t.Fatal("no shape groups at all")
	}
}
