package gpuclaim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// seedStatus is the API reference's example node as an agent reports it.
func seedStatus(node string, heartbeat time.Time) *apiv1.GpuNodeStatus {
	s := &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: apiv1.GpuNodeStatusSpec{NodeName: node}}
	for i := int32(0); i < 8; i++ {
		d := apiv1.Device{ID: i, Health: apiv1.Healthy, Island: "nvlink-group-0", BandwidthGBps: 600}
		if i >= 4 {
			d.Island, d.BandwidthGBps = "nvlink-group-1", 64
		}
		s.Status.Devices = append(s.Status.Devices, d)
	}
	s.Status.Devices[7].Health = apiv1.Unhealthy
	s.Status.LastHeartbeatTime = metav1.NewTime(heartbeat)
	return s
}

func TestLedgerHoldsAndReleases(t *testing.T) {
	l := newLedger()
	now := time.Now()
	l.setStatus(seedStatus("a", now))
	req := allocator.Request{Count: 4, MinBandwidthGBps: 600}

	res, err := l.reserve("pod-1", "ns/c1", "a", req)
	if err != nil || !reflect.DeepEqual(res.IDs, []int{0, 1, 2, 3}) {
		t.Fatalf("reserve = %v, %v", res.IDs, err)
	}
	// A second 4-GPU Exclusive claim cannot get the same GPUs: only 4,5,6 are left.
	if _, err := l.reserve("pod-2", "ns/c2", "a", req); err == nil {
		t.Fatal("second reservation of 4 GPUs must fail: only 3 healthy free GPUs remain")
	}
	if uid, ok := l.claimReservedFor("ns/c1"); !ok || uid != "pod-1" {
		t.Fatalf("claim reservation not recorded: %v %v", uid, ok)
	}
	// The lease source keeps the hold when the reservation is forgotten by a restart...
	l.add("pod-1", "a", []int{0, 1, 2, 3}, false, fromLease)
	l.remove("pod-1", "", nil, fromReservation)
	if node, ids := l.holdsOf("pod-1"); node != "a" || !reflect.DeepEqual(ids, []int{0, 1, 2, 3}) {
		t.Fatalf("hold lost with one source left: %s %v", node, ids)
	}
	// ...and the hold goes with the last source.
	l.remove("pod-1", "a", nil, fromLease)
	if node, _ := l.holdsOf("pod-1"); node != "" {
		t.Fatalf("hold survived its last source")
	}
	// Unreserve is idempotent.
	l.unreserve("pod-1", "ns/c1")
	l.unreserve("pod-1", "ns/c1")
	if _, ok := l.claimReservedFor("ns/c1"); ok {
		t.Fatal("claim reservation survived unreserve")
	}
	n, _ := l.snapshot("a")
	for _, g := range n.GPUs {
		if g.ExclusiveHolder != "" || g.SharedHolders != 0 {
			t.Fatalf("GPU %d still held after release: %+v", g.ID, g)
		}
	}
}

func TestLedgerSharedAndForget(t *testing.T) {
	l := newLedger()
	l.setStatus(seedStatus("a", time.Now()))
	shared := allocator.Request{Count: 1, Exclusivity: allocator.Shared}
	r1, err := l.reserve("s1", "ns/s1", "a", shared)
	if err != nil {
		t.Fatal(err)
	}
	// Exclusive never lands on the shared GPU.
	for i := 0; i < 6; i++ {
		res, err := l.reserve(typesUID("x"+string(rune('0'+i))), "ns/x", "a", allocator.Request{Count: 1})
		if err != nil {
			t.Fatalf("exclusive %d: %v", i, err)
		}
		if res.IDs[0] == r1.IDs[0] {
			t.Fatalf("exclusive claim got shared GPU %d", r1.IDs[0])
		}
	}
	// Every healthy GPU is now held; a further Exclusive claim fails, a Shared one joins.
	if _, err := l.reserve("x9", "ns/x9", "a", allocator.Request{Count: 1}); err == nil {
		t.Fatal("no exclusive GPU should be left")
	}
	r2, err := l.reserve("s2", "ns/s2", "a", shared)
	if err != nil || r2.IDs[0] != r1.IDs[0] {
		t.Fatalf("shared claim should join GPU %v, got %v, %v", r1.IDs, r2.IDs, err)
	}
	l.forget("s1")
	l.forget("s2")
	if _, err := l.reserve("x9", "ns/x9", "a", allocator.Request{Count: 1}); err != nil {
		t.Fatalf("GPU freed by forget should be allocatable: %v", err)
	}
}

func TestLedgerCandidates(t *testing.T) {
	l := newLedger()
	now := time.Now()
	l.setStatus(seedStatus("a", now))
	l.setStatus(seedStatus("stale", now.Add(-time.Hour)))
	b := seedStatus("b", now)
	l.setStatus(b)
	l.add("p", "b", []int{0}, false, fromLease) // b's fast island has 3 free

	all := func(string) bool { return true }
	by, stale := l.candidates(&allocator.Request{Count: 4, MinBandwidthGBps: 600}, now.Add(-time.Minute), all)
	if stale != 1 {
		t.Fatalf("stale = %d, want 1", stale)
	}
	// Each candidate carries its room: a's fast island has 4 free of the node's 7 healthy GPUs;
	// no island of b holds the request, so its room is the node's 6 free GPUs.
	if !reflect.DeepEqual(by[fitIslandBandwidth], []candidate{{"a", room{4, 7}}}) || !reflect.DeepEqual(by[fitNode], []candidate{{"b", room{6, 6}}}) {
		t.Fatalf("tiers = %v", by)
	}
	by, _ = l.candidates(&allocator.Request{Count: 4, Topology: allocator.Required, MinBandwidthGBps: 600}, now.Add(-time.Minute), all)
	if len(by[fitIslandBandwidth]) != 1 || len(by[fitNode])+len(by[fitIsland]) != 0 {
		t.Fatalf("Required tiers = %v", by)
	}
	by, _ = l.candidates(&allocator.Request{Count: 2}, now.Add(-time.Minute), func(n string) bool { return n == "b" })
	if len(by[fitIslandBandwidth]) != 1 || by[fitIslandBandwidth][0].name != "b" {
		t.Fatalf("selector not applied: %v", by)
	}
	// The summary agrees with the allocator about whether a node fits at all.
	for _, req := range []allocator.Request{{Count: 7}, {Count: 8}, {Count: 3, Topology: allocator.Required, MinBandwidthGBps: 600}, {Count: 4, Topology: allocator.Required, MinBandwidthGBps: 600}} {
		by, _ := l.candidates(&req, now.Add(-time.Minute), func(n string) bool { return n == "b" })
		n, _ := l.snapshot("b")
		_, err := allocator.Allocate(n, req)
		fits := len(by[fitNode])+len(by[fitIsland])+len(by[fitIslandBandwidth]) > 0
		if fits != (err == nil) {
			t.Fatalf("summary says fits=%v, allocator says %v for %+v", fits, err, req)
		}
	}
}

// forget drops the claim reservation of the forgotten pod only: a claim since reserved for a
// newer pod stays with that pod.
func TestLedgerForgetClearsOnlyItsClaim(t *testing.T) {
	l := newLedger()
	l.setStatus(seedStatus("a", time.Now()))
	req := allocator.Request{Count: 1}
	if _, err := l.reserve("old", "ns/c1", "a", req); err != nil {
		t.Fatal(err)
	}
	if _, err := l.reserve("other", "ns/c2", "a", req); err != nil {
		t.Fatal(err)
	}
	// The claim moves to a new pod (the old one is gone but not yet forgotten).
	if _, err := l.reserve("new", "ns/c1", "a", req); err != nil {
		t.Fatal(err)
	}
	l.forget("old")
	if uid, ok := l.claimReservedFor("ns/c1"); !ok || uid != "new" {
		t.Fatalf("forgetting the old pod dropped the new pod's reservation: %q %v", uid, ok)
	}
	l.forget("new")
	if uid, ok := l.claimReservedFor("ns/c1"); ok {
		t.Fatalf("claim still reserved for %q after its pod was forgotten", uid)
	}
	if uid, ok := l.claimReservedFor("ns/c2"); !ok || uid != "other" {
		t.Fatalf("an unrelated claim lost its reservation: %q %v", uid, ok)
	}
	if len(l.claimOf) != 1 {
		t.Fatalf("reverse index keeps %d entries, want 1 (pod other): %v", len(l.claimOf), l.claimOf)
	}
}

// Snapshots are shared, read-only views: a later change builds a new view and leaves the one a
// Filter call may still be reading as it was; a pod's own holds are left out only for it.
func TestLedgerSnapshotsAreImmutableViews(t *testing.T) {
	l := newLedger()
	l.setStatus(seedStatus("a", time.Now()))
	before, _ := l.snapshot("a")
	if _, err := l.reserve("p1", "ns/c1", "a", allocator.Request{Count: 2}); err != nil {
		t.Fatal(err)
	}
	for _, g := range before.GPUs {
		if g.ExclusiveHolder != "" {
			t.Fatalf("a reservation changed a snapshot taken before it: GPU %d held by %s", g.ID, g.ExclusiveHolder)
		}
	}
	after, _ := l.snapshot("a")
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
		want fit
	}{
		{allocator.Request{Count: 3}, fitIslandBandwidth},
		{allocator.Request{Count: 3, MinBandwidthGBps: 600}, fitIsland},
		{allocator.Request{Count: 4}, fitNode},
		{allocator.Request{Count: 2, MinBandwidthGBps: 600}, fitIslandBandwidth},
		{allocator.Request{Count: 3, MinBandwidthGBps: 600, Topology: allocator.Required}, fitNone},
		{allocator.Request{Count: 2, MinBandwidthGBps: 900, Exclusivity: allocator.Shared}, fitIslandBandwidth},
		{allocator.Request{Count: 2, MinBandwidthGBps: 900}, fitIsland},
		{allocator.Request{Count: 5}, fitNone},
	} {
		if got := s.fits(&c.req); got != c.want {
			t.Errorf("fits(%+v) = %d, want %d", c.req, got, c.want)
		}
	}
}

// place answers from its cache only while the node is unchanged and the request shape is the
// same; a pod's own leftover holds are offered to it and never cached.
func TestLedgerPlaceCache(t *testing.T) {
	l := newLedger()
	l.setStatus(seedStatus("a", time.Now()))
	req := allocator.Request{Count: 2}
	key := requestKey(&req)
	first, _, err, ok := l.place("a", "p1", key, req)
	if err != nil || !ok || len(first.IDs) != 2 {
		t.Fatalf("place = %v, %v, %v", first.IDs, err, ok)
	}
	again, _, _, _ := l.place("a", "p2", key, req)
	if !reflect.DeepEqual(again.IDs, first.IDs) {
		t.Fatalf("same shape on an unchanged node placed differently: %v vs %v", again.IDs, first.IDs)
	}
	// Another pod takes those GPUs: the cached answer must not be served any more.
	if _, err := l.reserve("p1", "ns/c1", "a", req); err != nil {
		t.Fatal(err)
	}
	next, _, err, _ := l.place("a", "p2", key, req)
	if err != nil || reflect.DeepEqual(next.IDs, first.IDs) {
		t.Fatalf("after the node changed, place still offers the taken GPUs %v (err %v)", next.IDs, err)
	}
	// p1 holds GPUs here: its own placement ignores its holds and may reuse them.
	own, _, err, _ := l.place("a", "p1", key, req)
	if err != nil || !reflect.DeepEqual(own.IDs, first.IDs) {
		t.Fatalf("p1 is not offered its own held GPUs again: %v, %v", own.IDs, err)
	}
	// A different shape is a different entry; an unfit answer is cached as such.
	big := allocator.Request{Count: 64}
	if _, _, err, _ := l.place("a", "p2", requestKey(&big), big); err == nil {
		t.Fatal("64 GPUs placed on an 8-GPU node")
	}
	if _, _, err, _ := l.place("a", "p2", requestKey(&big), big); err == nil {
		t.Fatal("cached unfit answer lost its error")
	}
	if _, _, _, ok := l.place("missing", "p2", key, req); ok {
		t.Fatal("place on a node without GpuNodeStatus reported ok")
	}
	if requestKey(&allocator.Request{Count: 1, PreferIDs: []int{1, 2}}) == requestKey(&allocator.Request{Count: 1, PreferIDs: []int{1}}) {
		t.Fatal("requests with different preferIds share a key")
	}
}

// snapshotForTest is the view of node that pod self's Filter would see.
func snapshotForTest(l *ledger, node string, self types.UID) (*allocator.Node, time.Time) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.snapshotExcept(node, self)
}

// The shape groups follow every change of a node (status, holds, deletion): candidates, which
// judges each group once, finds exactly what judging every node finds.
func TestLedgerShapeGroupsMatchEveryNode(t *testing.T) {
	l := newLedger()
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
			l.setStatus(seedStatus(n, now.Add(-time.Duration(rng.IntN(2))*time.Hour)))
		case 1:
			l.deleteStatus(n)
		case 2, 3:
			l.add(uid, n, []int{rng.IntN(8), rng.IntN(8)}, rng.IntN(2) == 0, fromLease)
		case 4:
			l.remove(uid, n, nil, fromLease)
		}
		for _, req := range reqs {
			byFit, stale := l.candidates(&req, now.Add(-time.Minute), func(string) bool { return true })
			var want [fitIslandBandwidth + 1][]candidate
			wantStale := 0
			for name, e := range l.nodes {
				if e.base == nil {
					continue
				}
				f, r := e.sum.fitsWithFree(&req)
				if f == fitNone {
					continue
				}
				if e.heartbeat.Before(now.Add(-time.Minute)) {
					wantStale++
					continue
				}
				want[f] = append(want[f], candidate{name, r})
			}
			for f := range want {
				got := slices.Clone(byFit[f])
				byName := func(a, b candidate) int { return strings.Compare(a.name, b.name) }
				slices.SortFunc(got, byName)
				slices.SortFunc(want[f], byName)
				if !slices.Equal(got, want[f]) {
					t.Fatalf("step %d, %+v, tier %d: candidates %v, every node judged %v", step, req, f, got, want[f])
				}
			}
			if stale != wantStale {
				t.Fatalf("step %d, %+v: stale %d, want %d", step, req, stale, wantStale)
			}
			releaseCandidates(byFit)
		}
	}
	if len(l.shapes) == 0 {
		t.Fatal("no shape groups at all")
	}
}
