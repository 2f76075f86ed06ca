package gpuclaim

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	framework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// harness builds the plugin over fake clientsets and a real framework handle, with the given
// nodes (their GpuNodeStatus is the API reference's two-island box) and claims.
type testEnv struct {
	p     *Plugin
	fh    framework.Framework
	kube  *fake.Clientset
	gpu   *gpufake.Clientset
	nodes []*v1.Node
	clock *clocktesting.FakeClock

	activated *recordingActivator
	// events are the events the plugin emitted through the framework's recorder.
	events *events.FakeRecorder
}

func newTestEnv(t *testing.T, nodes []*v1.Node, objs ...runtime.Object) *testEnv {
	t.Helper()
	return newTestEnvArgs(t, nil, nodes, objs...)
}

// newTestEnvArgs is newTestEnv with plugin args. The plugin is registered in the framework at
// Permit, so that the framework keeps the pods Permit makes wait (RunPermitPlugins,
// WaitOnPermit); the other extension points are called directly by schedule.
func newTestEnvArgs(t *testing.T, args *Args, nodes []*v1.Node, objs ...runtime.Object) *testEnv {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	kube := fake.NewClientset()
	var gpuObjs []runtime.Object
	for _, n := range nodes {
		gpuObjs = append(gpuObjs, ledgertest.SeedStatus(n.Name, clk.Now()))
	}
	gpuObjs = append(gpuObjs, objs...)
	gpu := gpufake.NewSimpleClientset(gpuObjs...)
	return newTestEnvOn(t, args, nodes, kube, gpu, clk)
}

// newTestEnvOn builds the plugin and its framework on existing fake clientsets: two calls on
// the same clientsets make two scheduler processes sharing one API server.
func newTestEnvOn(t *testing.T, args *Args, nodes []*v1.Node, kube *fake.Clientset, gpu *gpufake.Clientset, clk *clocktesting.FakeClock) *testEnv {
	t.Helper()
	return newTestEnvIn(t, NewProcess(), args, nodes, kube, gpu, clk)
}

// newTestEnvIn is newTestEnvOn with the plugin made in proc.
func newTestEnvIn(t *testing.T, proc *Process, args *Args, nodes []*v1.Node, kube *fake.Clientset, gpu *gpufake.Clientset, clk *clocktesting.FakeClock) *testEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	// The nodes are in the API too, for the plugin's node informer (its topology domains).
	for _, n := range nodes {
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating node %s: %v", n.Name, err)
		}
	}
	factory := informers.NewSharedInformerFactory(kube, 0)
	act := &recordingActivator{}
	rec := events.NewFakeRecorder(1000)
	schedmetrics.Register() // the framework's Permit records metrics
	var p *Plugin
	registry := frameworkruntime.Registry{queuesort.Name: queuesort.New, Name: func(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		var obj runtime.Object
		if args != nil {
			obj = args
		}
		var err error
		p, err = newPlugin(ctx, obj, h, gpu, clk, proc)
		if p != nil {
			p.status.pendingGrace = 0  // tests read the reason at once; TestPendingWaitsForItsGrace sets one
			p.status.releaseSpread = 0 // likewise; TestReleaseLeftToAnotherScheduler sets one
		}
		return p, err
	}}
	profile := &config.KubeSchedulerProfile{SchedulerName: "gpu-scheduler", Plugins: &config.Plugins{
		QueueSort: config.PluginSet{Enabled: []config.Plugin{{Name: queuesort.Name}}},
		Permit:    config.PluginSet{Enabled: []config.Plugin{{Name: Name}}},
		Bind:      config.PluginSet{Enabled: []config.Plugin{{Name: Name}}},
	}}
	fh, err := frameworkruntime.NewFramework(ctx, registry, profile,
		frameworkruntime.WithClientSet(kube),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(nil, nodes)),
		frameworkruntime.WithPodActivator(act),
		frameworkruntime.WithEventRecorder(rec),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()))
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return &testEnv{p: p, fh: fh, kube: kube, gpu: gpu, nodes: nodes, clock: clk, activated: act, events: rec}
}

// recordingActivator records the pods the plugin sends back to the active queue.
type recordingActivator struct {
	mu   sync.Mutex
	pods []string
}

func (a *recordingActivator) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range pods {
		a.pods = append(a.pods, k)
	}
}

func (a *recordingActivator) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods = nil
}

func (a *recordingActivator) has(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Contains(a.pods, key)
}

// schedule runs the extension points in the framework's order for one pod and returns the
// chosen node, or the first failing status.
func (e *testEnv) schedule(t *testing.T, pod *v1.Pod) (string, *fwk.Status, fwk.CycleState) {
	t.Helper()
	if _, err := e.kube.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	best, st, cs := e.reserve(t, pod)
	if !st.IsSuccess() {
		return "", st, cs
	}
	return e.bind(t, pod, best, cs)
}

// reserve runs the scheduling cycle up to Reserve for a pod that exists already.
func (e *testEnv) reserve(t *testing.T, pod *v1.Pod) (string, *fwk.Status, fwk.CycleState) {
	t.Helper()
	ctx := t.Context()
	cs := framework.NewCycleState()
	res, st := e.p.PreFilter(ctx, cs, pod, nil)
	if !st.IsSuccess() {
		return "", st, cs
	}
	var feasible []fwk.NodeInfo
	for _, n := range e.nodes {
		if res != nil && !res.AllNodes() && !res.NodeNames.Has(n.Name) {
			continue
		}
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		if st := e.p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
			continue
		}
		feasible = append(feasible, ni)
	}
	if len(feasible) > 0 {
		if st := e.p.PreScore(ctx, cs, pod, feasible); !st.IsSuccess() {
			t.Fatalf("PreScore: %v", st)
		}
	}
	best, bestScore := "", int64(-1)
	for _, ni := range feasible {
		score, st := e.p.Score(ctx, cs, pod, ni)
		if !st.IsSuccess() {
			t.Fatalf("Score(%s): %v", ni.Node().Name, st)
		}
		if score > bestScore {
			best, bestScore = ni.Node().Name, score
		}
	}
	if best == "" {
		return "", fwk.NewStatus(fwk.Unschedulable, "no node passed Filter"), cs
	}
	if st := e.p.Reserve(ctx, cs, pod, best); !st.IsSuccess() {
		return "", st, cs
	}
	return best, nil, cs
}

// bind runs PreBind, Bind and PostBind for a reserved pod.
func (e *testEnv) bind(t *testing.T, pod *v1.Pod, best string, cs fwk.CycleState) (string, *fwk.Status, fwk.CycleState) {
	t.Helper()
	ctx := t.Context()
	if st := e.p.PreBind(ctx, cs, pod, best); !st.IsSuccess() {
		e.p.Unreserve(ctx, cs, pod, best)
		return "", st, cs
	}
	if st := e.p.Bind(ctx, cs, pod, best); !st.IsSuccess() {
		e.p.Unreserve(ctx, cs, pod, best)
		return "", st, cs
	}
	e.p.PostBind(ctx, cs, pod, best)
	return best, nil, cs
}

func TestScheduleCycle(t *testing.T) {
	nodes := []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", map[string]string{"gpu-type": "a100"})}
	e := newTestEnv(t, nodes,
		ledgertest.Claim("fast", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}, Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600}, Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{"gpu-type": "a100"}}}),
	)
	pod := ledgertest.Pod("p", "fast")
	got, st, _ := e.schedule(t, pod)
	if st != nil || got != "b" {
		t.Fatalf("scheduled on %q, status %v; want node b (the selector)", got, st)
	}
	// One lease per GPU, held by the pod, labelled for listing.
	leases, _ := e.kube.CoordinationV1().Leases("gpu-scheduler").List(t.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	var names []string
	for _, l := range leases.Items {
		names = append(names, l.Name)
		if *l.Spec.HolderIdentity != string(pod.UID) || l.Labels[apiv1.LabelLeaseNode] != "b" || l.Labels[apiv1.LabelPodUID] != string(pod.UID) {
			t.Fatalf("lease %s: holder %s labels %v", l.Name, *l.Spec.HolderIdentity, l.Labels)
		}
	}
	if want := []string{"gpu-b-0", "gpu-b-1", "gpu-b-2", "gpu-b-3"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("leases %v, want %v", names, want)
	}
	// The Binding carries the allocation annotations.
	var binding *v1.Binding
	for _, a := range e.kube.Actions() {
		if c, ok := a.(clienttesting.CreateAction); ok && a.GetSubresource() == "binding" {
			binding = c.GetObject().(*v1.Binding)
		}
	}
	if binding == nil || binding.Target.Name != "b" || binding.Annotations[apiv1.AnnotationAllocated] != "b:0,1,2,3" || binding.Annotations[apiv1.AnnotationGPUIDs] != "0,1,2,3" {
		t.Fatalf("binding %+v", binding)
	}
	// The claim is Bound, with the allocation.
	c, _ := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "fast", metav1.GetOptions{})
	if c.Status.Phase != apiv1.ClaimBound || c.Status.Allocated != "b:0,1,2,3" || c.Status.PodUID != string(pod.UID) || !reflect.DeepEqual(c.Status.GpuIDs, []int32{0, 1, 2, 3}) {
		t.Fatalf("claim status %+v", c.Status)
	}
	// The same 4 fast GPUs cannot be had again on b; nothing else fits the Required claim.
	createClaimStatusLess(t, e, ledgertest.Claim("fast2", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}, Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600}, Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{"gpu-type": "a100"}}}))
	if _, st, _ := e.schedule(t, ledgertest.Pod("q", "fast2")); st == nil || st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "no node has 4 healthy free GPUs in one island with ≥ 600 GB/s for GpuClaim ns/fast2") {
		t.Fatalf("second claim status %v", st)
	}
}

// createClaimStatusLess adds a claim and waits until the plugin's informer has it.
func createClaimStatusLess(t *testing.T, e *testEnv, c *apiv1.GpuClaim) {
	t.Helper()
	if _, err := e.gpu.GpuV1().GpuClaims(c.Namespace).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		_, err := e.p.claimLister.GpuClaims(c.Namespace).Get(c.Name)
		return err == nil
	})
}

func eventuallyTrue(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond) // informer catch-up on fake clients; bounded by the deadline
	}
}

func TestPreFilterRejections(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("mig", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.MIG}}),
		ledgertest.Claim("ok", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}),
	)
	tests := []struct {
		pod  *v1.Pod
		code fwk.Code
		want string
	}{
		{ledgertest.Pod("plain", ""), fwk.Skip, ""},
		{ledgertest.Pod("missing", "nope"), fwk.UnschedulableAndUnresolvable, "GpuClaim ns/nope named by pod missing does not exist"},
		{ledgertest.Pod("mig", "mig"), fwk.UnschedulableAndUnresolvable, "GpuClaim ns/mig is invalid: spec.devices.migProfile is empty"},
		{ledgertest.Pod("empty", ""), fwk.Skip, ""},
	}
	tests[3].pod.Annotations[apiv1.AnnotationClaim] = ""
	tests[3].code, tests[3].want = fwk.UnschedulableAndUnresolvable, "has an empty gpu.scheduling/claim annotation"
	for _, tt := range tests {
		_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), tt.pod, nil)
		if st.Code() != tt.code || !strings.Contains(st.Message(), tt.want) {
			t.Errorf("pod %s: status %v %q, want %v containing %q", tt.pod.Name, st.Code(), st.Message(), tt.code, tt.want)
		}
	}
	// A claim held by a live pod refuses a second pod.
	holder := ledgertest.Pod("holder", "ok")
	if _, st, _ := e.schedule(t, holder); st != nil {
		t.Fatal(st)
	}
	e.p.pods.observe(holder)
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), ledgertest.Pod("second", "ok"), nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "GpuClaim ns/ok is held by pod ns/holder; one claim serves one pod at a time") {
		t.Fatalf("second pod of a held claim: %v", st)
	}
	// Once the holder is gone, the claim is free again.
	e.p.podGone(holder)
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), ledgertest.Pod("second", "ok"), nil); !st.IsSuccess() {
		t.Fatalf("claim of a deleted pod still held: %v", st)
	}
}

func TestPreBindLosesLeaseRace(t *testing.T) {
	other := "other-pod"
	heldByOther := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-a-5", Namespace: "gpu-scheduler",
			Labels: map[string]string{apiv1.LabelLeaseNode: "a", apiv1.LabelLeaseGPU: "5"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &other},
	}
	for _, tc := range []struct {
		name string
		// seen: the lease informer shows the other pod's lease before PreBind; otherwise the
		// lease exists only in the API server (its create fails) and the informer never sees it.
		seen bool
		// samePod: the lease names the very pod being scheduled, as a racing scheduler's
		// attempt at it does.
		samePod bool
		want    string
		creates int // creates of gpu-a-5 the plugin sends
		// all is every lease create the plugin sends: a loss the informer shows costs none,
		// not even for the pod's other GPU.
		all int
	}{
		{name: "seen in the informer", seen: true, want: "GPU 5 on node a (lease gpu-a-5, seen in the informer): GPU lease held by another pod", creates: 0, all: 0},
		{name: "seen, held by another attempt at the same pod", seen: true, samePod: true, want: "GPU 5 on node a (lease gpu-a-5, seen in the informer, taken by another attempt at this pod): GPU lease held by another pod", creates: 0, all: 0},
		{name: "not seen yet", seen: false, want: "GPU 5 on node a (lease gpu-a-5): GPU lease held by another pod", creates: 1, all: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
				ledgertest.Claim("two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}))
			pod := ledgertest.Pod("p", "two")
			if _, err := e.kube.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// The race: the other lease is made after this scheduler reserved GPU 5.
			best, st, cs := e.reserve(t, pod)
			if st != nil {
				t.Fatal(st)
			}
			if tc.seen {
				held := heldByOther.DeepCopy()
				if tc.samePod {
					held.Spec.HolderIdentity = ptrTo(string(pod.UID))
					held.CreationTimestamp = metav1.NewTime(e.p.clock.Now()) // a recent attempt, not a leftover
				}
				if _, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Create(t.Context(), held, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				eventuallyTrue(t, func() bool { _, err := e.p.leaseLister.Leases("gpu-scheduler").Get("gpu-a-5"); return err == nil })
			} else {
				e.kube.PrependReactor("create", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
					if a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease).Name == "gpu-a-5" {
						return true, nil, apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), "gpu-a-5")
					}
					return false, nil, nil
				})
				e.kube.PrependReactor("get", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
					if a.(clienttesting.GetAction).GetName() == "gpu-a-5" {
						return true, heldByOther.DeepCopy(), nil
					}
					return false, nil, nil
				})
			}
			_, st, _ = e.bind(t, pod, best, cs)
			// An error, so the pod is retried after backoff rather than waiting for an event.
			if st == nil || st.Code() != fwk.Error || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("status %v, want a lost lease race: %s", st, tc.want)
			}
			creates, all := 0, 0
			for _, a := range e.kube.Actions() {
				if c, ok := a.(clienttesting.CreateAction); ok && a.GetResource().Resource == "leases" {
					l := c.GetObject().(*coordinationv1.Lease)
					if l.Labels[apiv1.LabelLeaseNode] == "" {
						continue // the scheduler's peer lease, not a GPU's
					}
					if tc.seen && all == 0 && l.Name == "gpu-a-5" {
						continue // the test's own create of the held lease
					}
					all++
					if l.Name == "gpu-a-5" {
						creates++
					}
				}
			}
			if creates != tc.creates || all != tc.all {
				t.Fatalf("the plugin sent %d creates of lease gpu-a-5 and %d in all, want %d and %d", creates, all, tc.creates, tc.all)
			}
			// Unreserve released what this attempt created and left the held lease alone.
			leases, _ := e.kube.CoordinationV1().Leases("gpu-scheduler").List(t.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
			for _, l := range leases.Items {
				if l.Name != "gpu-a-5" || (*l.Spec.HolderIdentity != other && !tc.samePod) {
					t.Fatalf("lease %s held by %s left after the lost race", l.Name, *l.Spec.HolderIdentity)
				}
			}
			// The lease informer may hand over the create of a released lease after Unreserve
			// dropped it from the ledger, and its delete just after: the ledger holds the GPU
			// until then, which errs on the safe side.
			eventuallyTrue(t, func() bool { n, ids := e.p.ledger.HoldsOf(pod.UID); return n == "" && len(ids) == 0 })
		})
	}
}

func TestUnreserveIsIdempotent(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("one", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	pod := ledgertest.Pod("p", "one")
	cs := framework.NewCycleState()
	if _, st := e.p.PreFilter(t.Context(), cs, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := e.p.Reserve(t.Context(), cs, pod, "a"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := e.p.PreBind(t.Context(), cs, pod, "a"); !st.IsSuccess() {
		t.Fatal(st)
	}
	e.p.Unreserve(t.Context(), cs, pod, "a")
	e.p.Unreserve(t.Context(), cs, pod, "a")
	e.p.Unreserve(context.Background(), framework.NewCycleState(), pod, "a") // no state at all
	leases, _ := e.kube.CoordinationV1().Leases("gpu-scheduler").List(t.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if len(leases.Items) != 0 {
		t.Fatalf("leases left after Unreserve: %v", leases.Items)
	}
}

func TestPreBindTakesOverLeaseOfDeletedPod(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}))
	// The pod that held GPU 5 was deleted; its lease is not released yet.
	dead := ledgertest.Pod("dead", "")
	if _, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-a-5", Namespace: "gpu-scheduler", Labels: map[string]string{apiv1.LabelLeaseNode: "a", apiv1.LabelLeaseGPU: "5"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptrTo(string(dead.UID))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Only the tracker learns of the deletion: the release queue is left out, because the fake
	// clientset ignores delete preconditions and a racing release could remove the new lease.
	eventuallyTrue(t, func() bool { n, ids := e.p.ledger.HoldsOf(dead.UID); return n == "a" && len(ids) == 1 })
	e.p.pods.gone(dead.UID)
	e.p.ledger.Forget(dead.UID)
	pod := ledgertest.Pod("p", "two")
	if _, st, _ := e.schedule(t, pod); st != nil {
		t.Fatalf("status %v; the lease of a deleted pod should be taken over", st)
	}
	l, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Get(t.Context(), "gpu-a-5", metav1.GetOptions{})
	if err != nil || *l.Spec.HolderIdentity != string(pod.UID) {
		t.Fatalf("lease gpu-a-5 = %+v, %v; want it held by the new pod", l, err)
	}
	// The stale lease was seen in the informer and deleted before the create: no create of
	// gpu-a-5 failed (the test's own create and the plugin's one).
	creates := 0
	for _, a := range e.kube.Actions() {
		if c, ok := a.(clienttesting.CreateAction); ok && a.GetResource().Resource == "leases" {
			if obj, ok := c.GetObject().(*coordinationv1.Lease); ok && obj.Name == "gpu-a-5" {
				creates++
			}
		}
	}
	if creates != 2 {
		t.Fatalf("%d creates of lease gpu-a-5, want 2 (the stale lease deleted first from the informer's copy)", creates)
	}
}

// TestWaitingPodsActivatedByPluginInformers: a pod turned away because its claim did not
// exist yet goes back to the active queue as soon as the plugin's own informer sees the claim,
// whatever the scheduler's queueing hints saw first.
func TestWaitingPodsActivatedByPluginInformers(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	pod := ledgertest.Pod("early", "late")
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil); st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("status %v, want the missing claim reported", st)
	}
	createClaimStatusLess(t, e, ledgertest.Claim("late", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	eventuallyTrue(t, func() bool { return e.activated.has("ns/early") })
}

// A pod whose tier PostFilter relaxed (every node of the best tier failed another plugin's
// filter, e.g. a new node's not-ready taint) must still be offered the best tier's nodes:
// dropping them left such a pod pending with "no node has N healthy free GPUs" and nothing
// to requeue it once the taint was gone.
func TestRelaxedTierKeepsBetterNodes(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("four", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}, Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyPreferred, MinBandwidthGBps: 600}}))
	pod := ledgertest.Pod("p", "four")
	activations := func() int {
		e.activated.mu.Lock()
		defer e.activated.mu.Unlock()
		return len(e.activated.pods)
	}
	for attempt, wantRelaxed := range []bool{true, true, false} {
		cs := framework.NewCycleState()
		res, st := e.p.PreFilter(t.Context(), cs, pod, nil)
		if !st.IsSuccess() || !res.NodeNames.Has("a") {
			t.Fatalf("attempt %d: PreFilter %v, nodes %v; want node a offered", attempt, st, res)
		}
		// Node a fails another filter every time: PostFilter widens at most twice, then stops.
		before := activations()
		_, st = e.p.PostFilter(t.Context(), cs, pod, nil)
		if st.Code() != fwk.Unschedulable {
			t.Fatalf("attempt %d: PostFilter %v", attempt, st)
		}
		if relaxed := activations() > before; relaxed != wantRelaxed {
			t.Fatalf("attempt %d: requeued at once = %v, want %v (%q)", attempt, relaxed, wantRelaxed, st.Message())
		}
	}
}

// Preemption's dry run: a clone of the cycle state with a pod taken off a node must see that
// pod's GPUs as free, without changing the cycle's own state or other clones, and putting
// the pod back (a reprieve) must take them again.
func TestPreemptionDryRunSeesRemovedPodsGPUs(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("low", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 7}}),
		ledgertest.Claim("high", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}}))
	low := ledgertest.Pod("low", "low")
	if _, st, _ := e.schedule(t, low); st != nil {
		t.Fatal(st)
	}
	high := ledgertest.Pod("high", "high")
	cs := framework.NewCycleState()
	if _, st := e.p.PreFilter(t.Context(), cs, high, nil); st.Code() != fwk.Unschedulable {
		t.Fatalf("PreFilter on a full node: %v", st)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(e.nodes[0])
	lowInfo, _ := framework.NewPodInfo(low)
	if st := e.p.Filter(t.Context(), cs, high, ni); st.Code() != fwk.Unschedulable {
		t.Fatalf("Filter before any removal: %v", st)
	}
	dry := cs.Clone()
	other := cs.Clone()
	if st := e.p.RemovePod(t.Context(), dry, high, lowInfo, ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := e.p.Filter(t.Context(), dry, high, ni); !st.IsSuccess() {
		t.Fatalf("Filter with the low pod taken off: %v", st)
	}
	for name, s := range map[string]fwk.CycleState{"the cycle's state": cs, "another clone": other} {
		if st := e.p.Filter(t.Context(), s, high, ni); st.Code() != fwk.Unschedulable {
			t.Fatalf("Filter on %s after a dry run removed a pod: %v", name, st)
		}
	}
	if st := e.p.AddPod(t.Context(), dry, high, lowInfo, ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := e.p.Filter(t.Context(), dry, high, ni); st.Code() != fwk.Unschedulable {
		t.Fatalf("Filter after the low pod was put back: %v", st)
	}
	// No node had room, so PostFilter has nothing to widen and requeues nothing.
	before := len(e.activated.pods)
	if _, st := e.p.PostFilter(t.Context(), cs, high, nil); st.Code() != fwk.Unschedulable || len(e.activated.pods) != before {
		t.Fatalf("PostFilter with no room anywhere: %v, activations %d -> %d", st, before, len(e.activated.pods))
	}
}

// The activator sends back only the waiting pods whose claim fits a node that changed.
func TestActivatorWakesOnlyPodsThatFitAChangedNode(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", map[string]string{"gpu-type": "h100"})},
		ledgertest.Claim("one", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}),
		ledgertest.Claim("eight", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 8}}), // 7 healthy GPUs per node
		ledgertest.Claim("on-b", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{"gpu-type": "h100"}}}))
	for _, p := range []*v1.Pod{ledgertest.Pod("one", "one"), ledgertest.Pod("eight", "eight"), ledgertest.Pod("on-b", "on-b")} {
		e.p.waiting.add(p, "ns/"+p.Name, "")
	}
	e.p.activateChanged(t.Context()) // nothing changed: nothing to do
	if len(e.activated.pods) != 0 {
		t.Fatalf("activated %v with no node changed", e.activated.pods)
	}
	e.p.gpusChanged("a")
	e.p.activateChanged(t.Context())
	if !e.activated.has("ns/one") || e.activated.has("ns/eight") || e.activated.has("ns/on-b") {
		t.Fatalf("after node a changed, activated %v; want only ns/one", e.activated.pods)
	}
	e.p.gpusChanged("b")
	e.p.activateChanged(t.Context())
	if !e.activated.has("ns/on-b") || e.activated.has("ns/eight") {
		t.Fatalf("after node b changed, activated %v; want ns/on-b too, never ns/eight", e.activated.pods)
	}
}

// A finished pod requeues only the pending pods whose claim fits its node once its GPUs are
// free, judged from the ledger without that pod (its release may not have landed yet).
func TestPodDeletedHintAsksWhetherTheClaimFits(t *testing.T) {
	fast := &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600}
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("big", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}, Topology: fast}),
		ledgertest.Claim("rest", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 3}}),
		ledgertest.Claim("want-fast", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}, Topology: fast}),
		ledgertest.Claim("want-two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}))
	big, rest := ledgertest.Pod("big", "big"), ledgertest.Pod("rest", "rest")
	for _, p := range []*v1.Pod{big, rest} {
		if _, st, _ := e.schedule(t, p); st != nil {
			t.Fatal(st)
		}
	}
	bound := func(p *v1.Pod) *v1.Pod {
		out := p.DeepCopy()
		node, ids := e.p.ledger.HoldsOf(p.UID)
		out.Spec.NodeName = node
		out.Annotations[apiv1.AnnotationAllocated] = apiv1.Allocation{Node: node, IDs: ids}.String()
		return out
	}
	logger, _ := ktesting.NewTestContext(t)
	for _, tt := range []struct {
		deleted, pending *v1.Pod
		want             fwk.QueueingHint
	}{
		{bound(rest), ledgertest.Pod("p1", "want-two"), fwk.Queue},
		{bound(rest), ledgertest.Pod("p2", "want-fast"), fwk.QueueSkip}, // the 600 GB/s island is still held
		{bound(big), ledgertest.Pod("p3", "want-fast"), fwk.Queue},
	} {
		got, err := e.p.isSchedulableAfterPodDeleted(logger, tt.pending, tt.deleted, nil)
		if got != tt.want || err != nil {
			t.Errorf("%s deleted, %s pending: %v %v, want %v", tt.deleted.Name, tt.pending.Name, got, err, tt.want)
		}
	}
}

// A claim update sends back the pods naming it only when it can matter: a new spec
// (generation) or a change of holder; a status message alone does not.
func TestClaimUpdateActivatesItsPods(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	e.p.waiting.add(ledgertest.Pod("p", "c"), "ns/c", "")
	e.p.waiting.add(ledgertest.Pod("q", "other"), "ns/other", "")
	c := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", Generation: 1}}
	held := c.DeepCopy()
	held.Status.PodUID = "someone"
	msgOnly := held.DeepCopy()
	msgOnly.Status.Message = "x"
	released := held.DeepCopy()
	released.Status.PodUID = ""
	specChanged := held.DeepCopy()
	specChanged.Generation = 2
	h := e.p.claimHandler(t.Context())
	for _, tt := range []struct {
		name     string
		old, new *apiv1.GpuClaim
		want     bool
	}{
		{"message only", held, msgOnly, false},
		{"released by its pod", held, released, true},
		{"spec changed", held, specChanged, true},
	} {
		e.activated.mu.Lock()
		e.activated.pods = nil
		e.activated.mu.Unlock()
		h.OnUpdate(tt.old, tt.new)
		if got := e.activated.has("ns/p"); got != tt.want {
			t.Errorf("%s: pod of the claim activated = %v, want %v", tt.name, got, tt.want)
		}
		if e.activated.has("ns/q") {
			t.Errorf("%s: a pod of another claim was activated", tt.name)
		}
	}
}

// The plugin writes claims only for pods of its own profile: a second release (another
// --scheduler-name) next to it keeps its claims to itself.
func TestOursFollowsTheProfileName(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	if got := e.p.handle.ProfileName(); got != "gpu-scheduler" {
		t.Fatalf("test profile %q", got)
	}
	for name, want := range map[string]bool{"gpu-scheduler": true, "gpu-canary": false, "default-scheduler": false} {
		p := ledgertest.Pod("p", "c")
		p.Spec.SchedulerName = name
		if got := e.p.ours(p); got != want {
			t.Errorf("pod of %q: ours = %v, want %v", name, got, want)
		}
	}
}

// A node whose GpuNodeStatus is labelled for another scheduler is in that release's pool: this
// scheduler leaves it out however free its GPUs are, and takes it in once the label names it.
func TestNodesOfAnotherSchedulersPoolAreLeftOut(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil)},
		ledgertest.Claim("one", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.setHealth(t, "a", apiv1.Unhealthy) // only b could serve the claim
	label := func(owner string) {
		t.Helper()
		st, err := e.gpu.GpuV1().GpuNodeStatuses().Get(t.Context(), "b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.Labels = map[string]string{apiv1.LabelSchedulerName: owner}
		if _, err := e.gpu.GpuV1().GpuNodeStatuses().Update(t.Context(), st, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label("gpu-canary")
	eventuallyTrue(t, func() bool { n, _ := e.p.ledger.NodeView("b"); return n == nil })
	pod := ledgertest.Pod("p", "one")
	if node, st, _ := e.schedule(t, pod); st.IsSuccess() {
		t.Fatalf("pod placed on %s, a node of scheduler gpu-canary's pool", node)
	} else {
		wantStatus(t, "pod with only gpu-canary's node free", st, fwk.Unschedulable, "no node has 1 healthy free GPUs")
	}
	label("gpu-scheduler")
	eventuallyTrue(t, func() bool { n, _ := e.p.ledger.NodeView("b"); return n != nil })
	if err := e.kube.CoreV1().Pods(pod.Namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if node, st, _ := e.schedule(t, pod); !st.IsSuccess() || node != "b" {
		t.Fatalf("pod once b's status names this scheduler: node %q, %v; want b", node, st)
	}
}

// The plugin's informers keep no managedFields: at 5,000 nodes its caches hold every GPU
// lease and claim, and nothing reads those entries.
func TestInformersDropManagedFields(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1"}}
	c := ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	c.ManagedFields = mf
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("n1", nil)}, c)
	got, err := e.p.claimLister.GpuClaims("ns").Get("c")
	if err != nil {
		t.Fatal(err)
	}
	if got.ManagedFields != nil {
		t.Errorf("cached claim keeps managedFields %v", got.ManagedFields)
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: *e.p.args.LeaseNamespace, Name: "gpu-n1-0",
		Labels: map[string]string{apiv1.LabelLeaseNode: "n1"}, ManagedFields: mf}}
	if _, err := e.kube.CoordinationV1().Leases(l.Namespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := e.p.leaseLister.Leases(l.Namespace).Get(l.Name)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("lease never reached the plugin's cache: %v", err)
	}
	cached, _ := e.p.leaseLister.Leases(l.Namespace).Get(l.Name)
	if cached.ManagedFields != nil {
		t.Errorf("cached lease keeps managedFields %v", cached.ManagedFields)
	}
}

// A node whose agent's status is older than the freshness limit is schedulable again once the
// agent's liveness lease is renewed: the plugin's liveness informer sees the renewal, the node
// turns fresh and the waiting pod is sent back to the queue. The liveness lease holds nothing.
func TestLivenessLeaseMakesAStaleNodeSchedulable(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("one", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.clock.Step(30 * time.Minute) // the status (written at the start) is 30 minutes old
	pod := ledgertest.Pod("one", "one")
	if _, st, _ := e.schedule(t, pod); st == nil || !strings.Contains(st.Message(), "GpuNodeStatus and agent liveness lease older than") {
		t.Fatalf("status %v on a stale node; want the stale node reported", st)
	}
	e.p.waiting.add(pod, "ns/one", "")
	ns := *e.p.args.LeaseNamespace
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpu-a-agent", Labels: map[string]string{apiv1.LabelAgentLiveness: apiv1.SchedulerName}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), RenewTime: &metav1.MicroTime{Time: e.clock.Now()}},
	}
	if _, err := e.kube.CoordinationV1().Leases(ns).Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		e.p.activateChanged(t.Context())
		return e.activated.has("ns/one")
	})
	holds := e.p.ledger.HeldGPUs("a")
	if holds != 0 {
		t.Errorf("node a has %d GPUs held after the liveness lease came", holds)
	}
	if got, st, _ := e.schedule(t, ledgertest.Pod("one-again", "one")); st != nil || got != "a" {
		t.Fatalf("scheduled on %q, status %v; want node a, fresh by its lease", got, st)
	}
}
