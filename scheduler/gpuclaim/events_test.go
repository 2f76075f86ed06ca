package gpuclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	gpulisters "github.com/gpu-scheduler/gpu-scheduler/api/generated/listers/api/v1"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func hintPlugin(t *testing.T, claims ...*apiv1.GpuClaim) *Plugin {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, c := range claims {
		if err := idx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	return &Plugin{claimLister: gpulisters.NewGpuClaimLister(idx), clock: clocktesting.NewFakeClock(time.Now()), freshness: time.Minute, ledger: ledger.New(), pods: newPodTracker()}
}

func TestPodDeletedHint(t *testing.T) {
	p := hintPlugin(t)
	pending := ledgertest.Pod("pending", "c")
	holder := ledgertest.Pod("holder", "other")
	holder.Spec.NodeName = "n"
	holder.Annotations[apiv1.AnnotationAllocated] = "n:0"
	sameClaim := ledgertest.Pod("twin", "c")
	plain := ledgertest.Pod("plain", "")
	plain.Spec.NodeName = "n"
	tests := []struct {
		name    string
		deleted any
		want    fwk.QueueingHint
		wantErr bool
	}{
		{"pod holding GPUs", holder, fwk.Queue, false},
		{"pending pod of the same claim", sameClaim, fwk.Queue, false},
		{"pod without GPUs", plain, fwk.QueueSkip, false},
		{"wrong type", &v1.Node{}, fwk.Queue, true},
	}
	logger, _ := ktesting.NewTestContext(t)
	for _, tt := range tests {
		got, err := p.isSchedulableAfterPodDeleted(logger, pending, tt.deleted, nil)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s: hint = %v, %v; want %v, err %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNodeChangeHint(t *testing.T) {
	claim := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{"gpu-type": "a100"}}}}
	p := hintPlugin(t, claim)
	a100 := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"gpu-type": "a100"}}}
	h100 := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"gpu-type": "h100"}}}
	logger, _ := ktesting.NewTestContext(t)
	tests := []struct {
		name     string
		pod      *v1.Pod
		old, new any
		want     fwk.QueueingHint
		wantErr  bool
	}{
		{"matching node added", ledgertest.Pod("p", "c"), nil, a100, fwk.Queue, false},
		{"non-matching node added", ledgertest.Pod("p", "c"), nil, h100, fwk.QueueSkip, false},
		{"node relabelled to match", ledgertest.Pod("p", "c"), h100, a100, fwk.Queue, false},
		{"node matched already", ledgertest.Pod("p", "c"), a100, a100, fwk.QueueSkip, false},
		{"claim missing: let PreFilter explain", ledgertest.Pod("p", "missing"), nil, h100, fwk.Queue, false},
		{"wrong type", ledgertest.Pod("p", "c"), nil, &v1.Pod{}, fwk.Queue, true},
	}
	for _, tt := range tests {
		got, err := p.isSchedulableAfterNodeChange(logger, tt.pod, tt.old, tt.new)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s: hint = %v, %v; want %v, err %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestEventsToRegisterNames(t *testing.T) {
	p := hintPlugin(t)
	events, err := p.EventsToRegister(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Only built-in resources: GpuNodeStatus and GpuClaim changes reach waiting pods through the
	// plugin's own informers (a registered custom resource costs the scheduler a second,
	// dynamic informer).
	want := map[fwk.EventResource]bool{fwk.Pod: true, fwk.Node: true}
	for _, e := range events {
		if !want[e.Event.Resource] {
			t.Errorf("unexpected event resource %q", e.Event.Resource)
		}
		delete(want, e.Event.Resource)
		if e.QueueingHintFn == nil {
			t.Errorf("event %s has no hint", e.Event.Label())
		}
	}
	if len(want) != 0 {
		t.Errorf("events not registered: %v", want)
	}
}

func TestMayHelp(t *testing.T) {
	p := hintPlugin(t)
	now := p.clock.Now()
	base := ledgertest.SeedStatus("n", now)
	base.Status.Free, base.Status.Healthy = 3, 7
	freed := base.DeepCopy()
	freed.Status.Free = 4
	recovered := base.DeepCopy()
	recovered.Status.Devices[7].Health = apiv1.Healthy
	heartbeatOnly := base.DeepCopy()
	heartbeatOnly.Status.LastHeartbeatTime = metav1.NewTime(now.Add(time.Second))
	stale := base.DeepCopy()
	stale.Status.LastHeartbeatTime = metav1.NewTime(now.Add(-time.Hour))
	broke := base.DeepCopy()
	broke.Status.Devices[0].Health = apiv1.Unhealthy
	broke.Status.Healthy = 6
	rewired := base.DeepCopy()
	rewired.Status.Devices[4].BandwidthGBps = 600
	for _, tt := range []struct {
		name     string
		old, new *apiv1.GpuNodeStatus
		want     bool
	}{
		{"GPU freed", base, freed, true},
		{"GPU recovered", base, recovered, true},
		{"bandwidth changed", base, rewired, true},
		{"heartbeat only", base, heartbeatOnly, false},
		// Freshness is the ledger's to judge, with the liveness lease (becameFresh).
		{"stale status fresh again", stale, base, false},
		{"GPU broke", base, broke, false},
		{"unchanged", base, base.DeepCopy(), false},
	} {
		if got := p.mayHelp(tt.old, tt.new); got != tt.want {
			t.Errorf("%s: mayHelp = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestBecameFresh(t *testing.T) {
	p := hintPlugin(t) // freshness: a minute
	now := p.clock.Now()
	for _, tt := range []struct {
		name          string
		before, after time.Time
		want          bool
	}{
		{"stale to fresh", now.Add(-time.Hour), now, true},
		{"never seen to fresh", time.Time{}, now, true},
		{"fresh to fresher", now.Add(-30 * time.Second), now, false},
		{"stale to less stale", now.Add(-time.Hour), now.Add(-2 * time.Minute), false},
		{"fresh to stale (lease gone)", now, now.Add(-time.Hour), false},
		{"unchanged stale", now.Add(-time.Hour), now.Add(-time.Hour), false},
	} {
		if got := p.becameFresh(tt.before, tt.after); got != tt.want {
			t.Errorf("%s: becameFresh = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPodDeletedHintOnlyReads: the delete hint requeues a waiting pod that fits once the deleted
// pod's GPUs are free, without changing the ledger itself. A retry that runs before the plugin's
// own pod handler has freed them fails; the handler's release then has the activator send the
// pod back, and it binds.
func TestPodDeletedHintOnlyReads(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("seven", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 7}}),
		ledgertest.Claim("four", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}}))
	holder := ledgertest.Pod("holder", "seven")
	if got, st, _ := e.schedule(t, holder); st != nil || got != "a" {
		t.Fatalf("holder: node %q, status %v", got, st)
	}
	waiting := ledgertest.Pod("waiting", "four")
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), waiting, nil); st.IsSuccess() {
		t.Fatal("a 4-GPU pod fit beside a 7-GPU pod on an 8-GPU node with one GPU unhealthy")
	}
	// The holder finishes; only the queue's hint has seen it so far. (The fake client's Binding
	// does not copy the allocation onto the pod as the API server does: set it here.)
	node, ids := e.p.ledger.HoldsOf(holder.UID)
	if node != "a" || len(ids) != 7 {
		t.Fatalf("the ledger holds %s %v for the holder", node, ids)
	}
	bound := holder.DeepCopy()
	bound.Spec.NodeName = node
	bound.Annotations[apiv1.AnnotationAllocated] = apiv1.Allocation{Node: node, IDs: ids}.String()
	logger, _ := ktesting.NewTestContext(t)
	if hint, err := e.p.isSchedulableAfterPodDeleted(logger, waiting, bound, nil); err != nil || hint != fwk.Queue {
		t.Fatalf("hint %v, %v; want Queue", hint, err)
	}
	if got, _ := e.p.ledger.HoldsOf(holder.UID); got != "a" {
		t.Fatal("the hint changed the ledger: the holder's GPUs are no longer held")
	}
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), waiting, nil); st.IsSuccess() {
		t.Fatal("a retry before the pod handler ran found the holder's GPUs free")
	}
	// The plugin's pod handler sees the delete: the activator sends the waiting pod back.
	e.p.podGone(bound)
	e.p.activateChanged(t.Context())
	if !e.activated.has("ns/waiting") {
		t.Fatal("the waiting pod was not activated after the holder's GPUs were freed")
	}
	// And it binds, taking over the holder's leases, which nobody has released yet.
	if got, st, _ := e.schedule(t, waiting); st != nil || got != "a" {
		t.Fatalf("the retry right after the hint: node %q, status %v; want node a", got, st)
	}
}
