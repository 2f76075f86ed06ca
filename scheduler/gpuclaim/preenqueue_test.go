package gpuclaim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/peers"
)

func peerLease(identity, profile string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: apiv1.SchedulerPeerLeaseName(identity), Namespace: "gpu-scheduler",
			Labels: map[string]string{apiv1.LabelSchedulerPeer: profile}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &now},
	}
}

// TestPeersDivideThePods: with a second process serving the profile, PreEnqueue lets through
// the pods this process owns and holds back the others, naming the owner; a gang's pods all
// go one way; when the peer goes, the pods held back are sent back to the queue and let
// through; a pod held back for peerTakeover is let through even while its owner lives.
func TestPeersDivideThePods(t *testing.T) {
	t.Setenv(peers.IdentityEnv, "self")
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("g0", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, GangRef: "train"}),
		ledgertest.Claim("g1", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, GangRef: "train"}),
		ledgertest.Claim("g2", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, GangRef: "train"}))
	if e.p.peers == nil || e.p.peers.Identity() != "self" {
		t.Fatalf("the plugin has no peer membership named from %s", peers.IdentityEnv)
	}
	// Alone, it takes every pod.
	if st := e.p.PreEnqueue(t.Context(), ledgertest.Pod("lonely", "c")); st != nil {
		t.Fatalf("a lone scheduler held back a pod: %v", st)
	}
	if _, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Create(t.Context(), peerLease("other", "gpu-scheduler"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A peer of another profile does not count.
	if _, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Create(t.Context(), peerLease("stranger", "team-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool { return e.p.peers.Current().Size() == 2 })
	if got := e.p.peers.Current().Peers(); strings.Join(got, ",") != "other,self" {
		t.Fatalf("peers %v, want other and self", got)
	}

	view := peers.NewView("self", "other")
	var mine, theirs []*v1.Pod
	for i := range 40 {
		pod := ledgertest.Pod(fmt.Sprintf("p%02d", i), "c")
		st := e.p.PreEnqueue(t.Context(), pod)
		owner := view.Owner(string(pod.UID))
		switch {
		case owner == "self" && st == nil:
			mine = append(mine, pod)
		case owner == "other" && st.Code() == fwk.UnschedulableAndUnresolvable && strings.Contains(st.Message(), "gpu-scheduler other"):
			theirs = append(theirs, pod)
		default:
			t.Fatalf("pod %s (owner %s): status %v", pod.Name, owner, st)
		}
	}
	if len(mine) < 10 || len(theirs) < 10 {
		t.Fatalf("self takes %d of 40 pods, other %d: want both about half", len(mine), len(theirs))
	}
	if n := e.p.deferred.leftToPeers(); n != len(theirs) {
		t.Errorf("left to peers: %d, want %d", n, len(theirs))
	}
	var gang []bool
	var members []*v1.Pod
	for _, c := range []string{"g0", "g1", "g2"} {
		pod := ledgertest.Pod("member-"+c, c)
		members = append(members, pod)
		gang = append(gang, e.p.PreEnqueue(t.Context(), pod) == nil)
	}
	if gang[0] != gang[1] || gang[1] != gang[2] {
		t.Errorf("a gang's pods were divided between the peers: %v", gang)
	}
	if !gang[0] {
		theirs = append(theirs, members...) // held back with the others
	}
	// A pod bound meanwhile (by the peer) is forgotten.
	bound := theirs[0].DeepCopy()
	bound.Spec.NodeName = "a"
	e.p.observePod(t.Context(), bound)
	if n := e.p.deferred.leftToPeers(); n != len(theirs)-1 {
		t.Errorf("left to peers after one was bound: %d, want %d", n, len(theirs)-1)
	}

	// Held back for peerTakeover: this process tries it too.
	e.clock.Step(peerTakeover)
	if st := e.p.PreEnqueue(t.Context(), theirs[1]); st != nil {
		t.Fatalf("a pod left to its peer for %s is still held back: %v", peerTakeover, st)
	}

	// The peer goes: its pods come back, and are let through.
	e.activated.reset()
	if err := e.kube.CoordinationV1().Leases("gpu-scheduler").Delete(t.Context(), apiv1.SchedulerPeerLeaseName("other"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool { return e.activated.has("ns/" + theirs[2].Name) })
	if e.activated.has("ns/" + theirs[0].Name) {
		t.Errorf("the bound pod %s was sent back to the queue", theirs[0].Name)
	}
	for _, pod := range theirs[2:] {
		if st := e.p.PreEnqueue(t.Context(), pod); st != nil {
			t.Fatalf("pod %s held back with no peer left: %v", pod.Name, st)
		}
	}
	if n := e.p.deferred.leftToPeers(); n != 0 {
		t.Errorf("left to peers with none left: %d", n)
	}
}

// TestPreferOwnNodes: with two peers each tier is narrowed to this process's own nodes where it
// has some, and a tier where it has none is kept whole; alone, nothing changes.
func TestPreferOwnNodes(t *testing.T) {
	view := peers.NewView("self", "other")
	var best, worse []ledger.Candidate
	for i := range 20 {
		best = append(best, ledger.Candidate{Name: fmt.Sprintf("n%02d", i)})
	}
	for i := range 30 {
		name := fmt.Sprintf("w%02d", i)
		if view.Owner("node:"+name) == "other" {
			worse = append(worse, ledger.Candidate{Name: name})
		}
	}
	got := preferOwnNodes(view, [][]ledger.Candidate{best, worse})
	if len(got[0]) == 0 || len(got[0]) == len(best) {
		t.Fatalf("best tier: %d of %d nodes kept, want this process's share", len(got[0]), len(best))
	}
	for _, c := range got[0] {
		if view.Owner("node:"+c.Name) != "self" {
			t.Errorf("node %s of the other peer offered", c.Name)
		}
	}
	if len(got[1]) != len(worse) {
		t.Errorf("a tier with no own node was cut to %d of %d", len(got[1]), len(worse))
	}
	alone := preferOwnNodes(peers.NewView("self"), [][]ledger.Candidate{best})
	if len(alone[0]) != len(best) {
		t.Errorf("a lone scheduler narrowed its tier to %d of %d", len(alone[0]), len(best))
	}
}

// TestJoinPeers: under leader election a process joins its peers at its first scheduling
// cycle, never before (a standby must own no pods); without it, as soon as it is made.
func TestJoinPeers(t *testing.T) {
	t.Setenv(peers.IdentityEnv, "self")
	lease := apiv1.SchedulerPeerLeaseName("self")
	joined := func(e *testEnv) bool {
		_, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Get(t.Context(), lease, metav1.GetOptions{})
		return err == nil
	}
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	time.Sleep(200 * time.Millisecond)
	if joined(e) {
		t.Fatal("a process under leader election joined its peers before it scheduled")
	}
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), ledgertest.Pod("p", "missing"), nil); st.IsSuccess() {
		t.Fatalf("PreFilter of a pod whose claim is missing succeeded")
	}
	eventuallyTrue(t, func() bool { return joined(e) })

	proc := NewProcess()
	proc.JoinPeersAtStart(true)
	clk := clocktesting.NewFakeClock(time.Now())
	e = newTestEnvIn(t, proc, nil, []*v1.Node{ledgertest.Node("a", nil)}, fake.NewClientset(), gpufake.NewSimpleClientset(ledgertest.SeedStatus("a", clk.Now())), clk)
	eventuallyTrue(t, func() bool { return joined(e) })

	// At exit the command leaves the peers of every plugin the process made.
	proc.LeavePeers()
	if joined(e) {
		t.Fatal("the peer lease is still there after LeavePeers")
	}
}
