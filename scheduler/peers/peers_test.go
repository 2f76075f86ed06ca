package peers

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TestOwnerSplitsKeysAndMovesOnlyWhatItMust: rendezvous hashing gives each of two peers about
// half of the keys, moves every key of a peer that goes to the one left, and gives a third
// peer a share taken from both without moving any key between the first two.
func TestOwnerSplitsKeysAndMovesOnlyWhatItMust(t *testing.T) {
	two := &View{self: "a", peers: []string{"a", "b"}}
	three := &View{self: "a", peers: []string{"a", "b", "c"}}
	alone := &View{self: "a", peers: []string{"a"}}
	const n = 10000
	count := map[string]int{}
	for i := range n {
		key := fmt.Sprintf("pod-uid-%08d", i)
		o2, o3 := two.Owner(key), three.Owner(key)
		count[o2]++
		if o3 != o2 && o3 != "c" {
			t.Fatalf("key %s moved from %s to %s when c joined", key, o2, o3)
		}
		if alone.Owner(key) != "a" || !alone.Mine(key) {
			t.Fatalf("a lone peer does not own key %s", key)
		}
		if two.Mine(key) != (o2 == "a") {
			t.Fatalf("Mine(%s) = %v with owner %s", key, two.Mine(key), o2)
		}
		if other := (&View{self: "b", peers: []string{"a", "b"}}).Owner(key); other != o2 {
			t.Fatalf("peers a and b disagree on key %s: %s vs %s", key, o2, other)
		}
	}
	for _, p := range []string{"a", "b"} {
		if c := count[p]; c < n*45/100 || c > n*55/100 {
			t.Errorf("peer %s owns %d of %d keys, want about half", p, c, n)
		}
	}
}

func newMembership(t *testing.T, client kubernetes.Interface, clk *clocktesting.FakeClock, identity string, changes *atomic.Int32) *Membership {
	t.Helper()
	m, err := New(Config{Client: client, Namespace: "gpu-scheduler", Profile: "gpu-scheduler", Identity: identity, Clock: clk,
		OnChange: func() {
			if changes != nil {
				changes.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func waitPeers(t *testing.T, m *Membership, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return m.Current().Size() == want, nil
	})
	if err != nil {
		t.Fatalf("%s sees peers %v, want %d", m.Identity(), m.Current().Peers(), want)
	}
}

// TestPeersJoinAndLeave: two processes that join see each other; one that stops deletes its
// lease, and the other owns everything again at once.
func TestPeersJoinAndLeave(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes atomic.Int32
	a := newMembership(t, client, clk, "sched-a", &changes)
	b := newMembership(t, client, clk, "sched-b", nil)
	for _, m := range []*Membership{a, b} {
		if err := m.Watch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.Current().Size() != 1 || !a.Current().Mine("anything") {
		t.Fatalf("before anyone joins, a sees %v and must own every key", a.Current().Peers())
	}
	a.Join(ctx)
	bctx, stopB := context.WithCancel(ctx)
	b.Join(bctx)
	waitPeers(t, a, 2)
	waitPeers(t, b, 2)
	if changes.Load() == 0 {
		t.Error("OnChange was not called when b joined")
	}
	l, err := client.CoordinationV1().Leases("gpu-scheduler").Get(ctx, apiv1.SchedulerPeerLeaseName("sched-b"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Labels[apiv1.LabelSchedulerPeer] != "gpu-scheduler" || ptr.Deref(l.Spec.HolderIdentity, "") != "sched-b" || l.Labels[apiv1.LabelLeaseNode] != "" {
		t.Errorf("b's peer lease: labels %v holder %v", l.Labels, l.Spec.HolderIdentity)
	}
	stopB()
	waitPeers(t, a, 1)

	// Leave, called by a process about to exit while its context still runs, deletes the lease
	// at once, and the renewals stop: it does not come back.
	c := newMembership(t, client, clk, "sched-c", nil)
	c.Join(ctx)
	waitPeers(t, a, 2)
	c.Leave()
	if _, err := client.CoordinationV1().Leases("gpu-scheduler").Get(ctx, apiv1.SchedulerPeerLeaseName("sched-c"), metav1.GetOptions{}); err == nil {
		t.Fatal("the peer lease is still there after Leave")
	}
	for range 3 {
		clk.Step(DefaultRenewEvery)
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := client.CoordinationV1().Leases("gpu-scheduler").Get(ctx, apiv1.SchedulerPeerLeaseName("sched-c"), metav1.GetOptions{}); err == nil {
		t.Fatal("the peer lease came back after Leave")
	}
	newMembership(t, client, clk, "never-joined", nil).Leave() // nothing to delete, no panic
}

// TestPeerThatStopsRenewingExpires: a peer whose lease stops changing (it crashed) counts for
// the lease duration after this process last saw it change, on this process's clock, whatever
// renewTime the lease claims.
func TestPeerThatStopsRenewingExpires(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The ghost's renewTime lies an hour in the future: a skewed clock must not keep it alive.
	future := metav1.NewMicroTime(clk.Now().Add(time.Hour))
	ghost := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: apiv1.SchedulerPeerLeaseName("ghost"), Namespace: "gpu-scheduler",
			Labels: map[string]string{apiv1.LabelSchedulerPeer: "gpu-scheduler"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To[int32](10), RenewTime: &future},
	}
	if _, err := client.CoordinationV1().Leases("gpu-scheduler").Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := ghost.DeepCopy()
	other.Name, other.Labels = apiv1.SchedulerPeerLeaseName("elsewhere"), map[string]string{apiv1.LabelSchedulerPeer: "another-profile"}
	other.Spec.HolderIdentity = ptr.To("elsewhere")
	if _, err := client.CoordinationV1().Leases("gpu-scheduler").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	a := newMembership(t, client, clk, "sched-a", &changes)
	if err := a.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.Current().Peers(); len(got) != 2 || got[0] != "ghost" || got[1] != "sched-a" {
		t.Fatalf("peers = %v, want [ghost sched-a] (a peer of another profile does not count)", got)
	}
	clk.Step(9 * time.Second)
	a.Refresh()
	if a.Current().Size() != 2 {
		t.Fatalf("the ghost expired after 9 s of a 10 s lease")
	}
	before := changes.Load()
	clk.Step(2 * time.Second)
	a.Refresh()
	if got := a.Current().Peers(); len(got) != 1 || got[0] != "sched-a" {
		t.Fatalf("peers after the ghost's lease ran out = %v", got)
	}
	if changes.Load() == before {
		t.Error("OnChange was not called when the ghost expired")
	}
}

// scoreSink keeps the compiler from dropping the call whose allocations are counted.
var scoreSink uint64

// The owner of a key is a pure function of the peers and the key, the same in every process:
// pinned here so that a change to the hash, which would move pods between live peers on a
// rolling update of mixed versions, is a deliberate one.

func TestScoreIsFNV1aMixed(t *testing.T) {
	h := fnv.New64a()
	_, _ = h.Write([]byte("peer-a\x00pod-uid-1"))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	if got := score("peer-a", "pod-uid-1"); got != x {
		t.Fatalf("score = %x, want %x", got, x)
	}
	if n := testing.AllocsPerRun(100, func() { scoreSink = score("peer-a", "node:h100-00017") }); n != 0 {
		t.Errorf("score allocates %v times per call", n)
	}
}
