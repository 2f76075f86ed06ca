package gpuclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	gpulisters "github.com/gpu-scheduler/gpu-scheduler/api/generated/listers/api/v1"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func hintPlugin(t *testing.T, claims ...*apiv1.GpuClaim) *Plugin {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, c := range claims {
		if err := idx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	return &Plugin{claimLister: gpulisters.NewGpuClaimLister(idx), clock: clocktesting.NewFakeClock(time.Now()), freshness: time.Minute}
}

func gpuPod(name, claim string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "uid-" + typesUID(name), Annotations: map[string]string{}}}
	if claim != "" {
		p.Annotations[apiv1.AnnotationClaim] = claim
	}
	return p
}

func TestPodDeletedHint(t *testing.T) {
	p := hintPlugin(t)
	pending := gpuPod("pending", "c")
	holder := gpuPod("holder", "other")
	holder.Spec.NodeName = "n"
	holder.Annotations[apiv1.AnnotationAllocated] = "n:0"
	sameClaim := gpuPod("twin", "c")
	plain := gpuPod("plain", "")
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
		{"matching node added", gpuPod("p", "c"), nil, a100, fwk.Queue, false},
		{"non-matching node added", gpuPod("p", "c"), nil, h100, fwk.QueueSkip, false},
		{"node relabelled to match", gpuPod("p", "c"), h100, a100, fwk.Queue, false},
		{"node matched already", gpuPod("p", "c"), a100, a100, fwk.QueueSkip, false},
		{"claim missing: let PreFilter explain", gpuPod("p", "missing"), nil, h100, fwk.Queue, false},
		{"wrong type", gpuPod("p", "c"), nil, &v1.Pod{}, fwk.Queue, true},
	}
	for _, tt := range tests {
		got, err := p.isSchedulableAfterNodeChange(logger, tt.pod, tt.old, tt.new)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s: hint = %v, %v; want %v, err %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestNodeStatusHint(t *testing.T) {
	p := hintPlugin(t)
	now := p.clock.Now()
	base := seedStatus("n", now)
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
	logger, _ := ktesting.NewTestContext(t)
	tests := []struct {
		name     string
		old, new any
		want     fwk.QueueingHint
		wantErr  bool
	}{
		{"added", nil, base, fwk.Queue, false},
		{"added, unstructured", nil, toUnstructured(t, base), fwk.Queue, false},
		{"GPU freed", base, freed, fwk.Queue, false},
		{"GPU recovered", base, recovered, fwk.Queue, false},
		{"heartbeat only", base, heartbeatOnly, fwk.QueueSkip, false},
		{"stale node fresh again", stale, base, fwk.Queue, false},
		{"GPU broke", base, broke, fwk.QueueSkip, false},
		{"unchanged, unstructured", toUnstructured(t, base), toUnstructured(t, base), fwk.QueueSkip, false},
		{"wrong type", nil, &v1.Pod{}, fwk.Queue, true},
	}
	for _, tt := range tests {
		got, err := p.isSchedulableAfterNodeStatusChange(logger, gpuPod("p", "c"), tt.old, tt.new)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s: hint = %v, %v; want %v, err %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestClaimHint(t *testing.T) {
	p := hintPlugin(t)
	c := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", Generation: 1}}
	other := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", Generation: 1}}
	specChanged := c.DeepCopy()
	specChanged.Generation = 2
	released := c.DeepCopy()
	released.Status.PodUID = ""
	held := c.DeepCopy()
	held.Status.PodUID = "someone"
	msgOnly := held.DeepCopy()
	msgOnly.Status.Message = "x"
	logger, _ := ktesting.NewTestContext(t)
	tests := []struct {
		name     string
		old, new any
		want     fwk.QueueingHint
		wantErr  bool
	}{
		{"the pod's claim created", nil, c, fwk.Queue, false},
		{"the pod's claim created, unstructured", nil, toUnstructured(t, c), fwk.Queue, false},
		{"another claim", nil, other, fwk.QueueSkip, false},
		{"spec changed", c, specChanged, fwk.Queue, false},
		{"released by its pod", held, released, fwk.Queue, false},
		{"message only", held, msgOnly, fwk.QueueSkip, false},
		{"wrong type", nil, &v1.Node{}, fwk.Queue, true},
	}
	for _, tt := range tests {
		got, err := p.isSchedulableAfterClaimChange(logger, gpuPod("p", "c"), tt.old, tt.new)
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
	want := map[fwk.EventResource]bool{fwk.Pod: true, fwk.Node: true, "gpunodestatuses.v1.gpu.scheduling": true, "gpuclaims.v1.gpu.scheduling": true}
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

// In a full cluster every freed GPU improves some GpuNodeStatus; only pods whose claim fits the
// node as reported now are requeued, not the whole backlog.
func TestNodeStatusHintAsksWhetherTheClaimFits(t *testing.T) {
	p := hintPlugin(t,
		claimObj("two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}),
		claimObj("four-fast", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}, Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600}}),
		claimObj("eight", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 8}}),
	)
	now := p.clock.Now()
	full := seedStatus("n", now) // GPUs 0-3 at 600 GB/s, 4-6 at 64 GB/s, 7 unhealthy
	for i := range 7 {
		full.Status.Devices[i].InUseBy = []string{"uid-other"}
	}
	full.Status.Free, full.Status.Healthy = 0, 7
	twoFreed := full.DeepCopy()
	twoFreed.Status.Devices[0].InUseBy, twoFreed.Status.Devices[1].InUseBy = nil, nil
	twoFreed.Status.Free = 2
	islandFreed := twoFreed.DeepCopy()
	islandFreed.Status.Devices[2].InUseBy, islandFreed.Status.Devices[3].InUseBy = nil, nil
	islandFreed.Status.Free = 4
	staleFreed := twoFreed.DeepCopy()
	staleFreed.Status.LastHeartbeatTime = metav1.NewTime(now.Add(-time.Hour))
	logger, _ := ktesting.NewTestContext(t)
	tests := []struct {
		name     string
		claim    string
		old, new *apiv1.GpuNodeStatus
		want     fwk.QueueingHint
	}{
		{"two freed, claim for two", "two", full, twoFreed, fwk.Queue},
		{"two freed, claim for a fast island of four", "four-fast", full, twoFreed, fwk.QueueSkip},
		{"island freed, claim for a fast island of four", "four-fast", twoFreed, islandFreed, fwk.Queue},
		{"island freed, claim for eight on a 7-healthy node", "eight", twoFreed, islandFreed, fwk.QueueSkip},
		{"freed but the report is stale", "two", full, staleFreed, fwk.QueueSkip},
		{"claim that does not exist", "missing", full, twoFreed, fwk.Queue},
	}
	for _, tt := range tests {
		got, err := p.isSchedulableAfterNodeStatusChange(logger, gpuPod("p", tt.claim), tt.old, tt.new)
		if got != tt.want || err != nil {
			t.Errorf("%s: hint = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}
