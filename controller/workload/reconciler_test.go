package workload

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/controller/claimstest"
)

type testEnv struct {
	c      client.Client
	r      *Reconciler
	clock  *clocktesting.FakeClock
	events *events.FakeRecorder
	key    types.NamespacedName
}

func newEnv(t *testing.T, spec apiv1.GpuWorkloadSpec) *testEnv {
	t.Helper()
	return newEnvWith(t, spec, interceptor.Funcs{})
}

// newEnvWith is newEnv with calls to the fake API server intercepted (errors it would return).
func newEnvWith(t *testing.T, spec apiv1.GpuWorkloadSpec, funcs interceptor.Funcs) *testEnv {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if len(spec.Template.Spec.Containers) == 0 {
		spec.Template.Spec.Containers = []corev1.Container{{Name: "main", Image: "img"}}
	}
	gw := &apiv1.GpuWorkload{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ns", UID: "gw-uid", Generation: 1}, Spec: spec}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(gw).WithStatusSubresource(&apiv1.GpuWorkload{}, &corev1.Pod{}).WithInterceptorFuncs(funcs).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := events.NewFakeRecorder(100)
	r := newReconciler(interceptor.NewClient(c, claimstest.MetadataOnly(t)), c, rec, Options{Clock: clk, Jitter: func() float64 { return 0.5 }})
	return &testEnv{c: c, r: r, clock: clk, events: rec, key: types.NamespacedName{Namespace: "ns", Name: "train"}}
}

func (e *testEnv) reconcile(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: e.key})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (e *testEnv) workload(t *testing.T) *apiv1.GpuWorkload {
	t.Helper()
	gw := &apiv1.GpuWorkload{}
	if err := e.c.Get(context.Background(), e.key, gw); err != nil {
		t.Fatal(err)
	}
	return gw
}

func (e *testEnv) podNames(t *testing.T) []string {
	t.Helper()
	var list corev1.PodList
	if err := e.c.List(context.Background(), &list, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// setPod changes a pod the way the scheduler and kubelet would.
func (e *testEnv) setPod(t *testing.T, name string, change func(*corev1.Pod)) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	change(pod)
	status := pod.Status
	if err := e.c.Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = status
	if err := e.c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

func running(node, ids string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Annotations[apiv1.AnnotationAllocated] = node + ":" + ids
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
}

func failed(p *corev1.Pod) {
	p.Status.Phase = corev1.PodFailed
	p.Status.Message = "GPU 0 has fallen off the bus"
}

func inlineSpec(replicas, maxRetries, backoff int32) apiv1.GpuWorkloadSpec {
	return apiv1.GpuWorkloadSpec{
		Replicas:     ptr.To(replicas),
		Claim:        apiv1.WorkloadClaim{Spec: &apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}},
		RetryPolicy:  &apiv1.RetryPolicy{MaxRetries: ptr.To(maxRetries), BackoffSeconds: ptr.To(backoff)},
		NodeStrategy: apiv1.StrategyRoundRobin,
	}
}

func TestReplicasGetPodsAndOwnedClaims(t *testing.T) {
	spec := inlineSpec(2, 1, 4)
	spec.PriorityClassName = "batch-high"
	spec.Template.Annotations = map[string]string{
		apiv1.AnnotationAllocated: "node-x:0", apiv1.AnnotationGPUIDs: "0", apiv1.AnnotationClaim: "stolen", "team": "ml",
	}
	spec.Template.Spec.Priority = ptr.To[int32](1000)
	spec.Template.Spec.SchedulerName = "default-scheduler"
	e := newEnv(t, spec)
	e.reconcile(t)
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-0", "train-1-0"}) {
		t.Fatalf("pods %v", got)
	}
	pod := &corev1.Pod{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "train-1-0"}, pod); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.SchedulerName != apiv1.SchedulerName || pod.Annotations[apiv1.AnnotationClaim] != "train-1-0" ||
		pod.Annotations[apiv1.AnnotationNodeStrategy] != "round-robin" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever ||
		!metav1.IsControlledBy(pod, e.workload(t)) || pod.Spec.PriorityClassName != "batch-high" || pod.Spec.Priority != nil {
		t.Fatalf("pod %+v", pod)
	}
	// What only the scheduler may write is dropped; the rest of the template stays.
	if _, ok := pod.Annotations[apiv1.AnnotationAllocated]; ok || pod.Annotations[apiv1.AnnotationGPUIDs] != "" || pod.Annotations["team"] != "ml" {
		t.Fatalf("pod annotations %v", pod.Annotations)
	}
	claim := &apiv1.GpuClaim{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "train-1-0"}, claim); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(claim, pod) || claim.Spec.Devices.Count != 2 || claim.Spec.GangRef != "" {
		t.Fatalf("claim %+v", claim)
	}
	// Both owner references block their owner's foreground deletion (the chart's RBAC grants
	// the finalizers updates that OwnerReferencesPermissionEnforcement asks for).
	for what, refs := range map[string][]metav1.OwnerReference{"pod": pod.OwnerReferences, "claim": claim.OwnerReferences} {
		if len(refs) != 1 || refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
			t.Errorf("%s owner references %+v, want one controller reference with blockOwnerDeletion", what, refs)
		}
	}
	gw := e.workload(t)
	if !slices.Contains(gw.Finalizers, apiv1.FinalizerWorkload) || gw.Status.Phase != apiv1.WorkloadPending || gw.Status.Ready != "0/2" {
		t.Fatalf("workload %+v", gw.Status)
	}

	e.setPod(t, "train-0-0", running("node-a", "0,1"))
	e.setPod(t, "train-1-0", running("node-b", "2,3"))
	e.reconcile(t)
	gw = e.workload(t)
	want := []apiv1.ReplicaStatus{
		{Index: 0, Pod: "train-0-0", Claim: "train-0-0", Phase: corev1.PodRunning, Node: "node-a", GpuIDs: []int32{0, 1}},
		{Index: 1, Pod: "train-1-0", Claim: "train-1-0", Phase: corev1.PodRunning, Node: "node-b", GpuIDs: []int32{2, 3}},
	}
	if gw.Status.Phase != apiv1.WorkloadRunning || gw.Status.Ready != "2/2" || gw.Status.GPUs != 4 ||
		!slices.Equal(gw.Status.Nodes, []string{"node-a", "node-b"}) || len(gw.Status.Replicas) != 2 {
		t.Fatalf("status %+v", gw.Status)
	}
	for i, rs := range gw.Status.Replicas {
		if rs.Index != want[i].Index || rs.Pod != want[i].Pod || rs.Claim != want[i].Claim || rs.Phase != want[i].Phase || rs.Node != want[i].Node || !slices.Equal(rs.GpuIDs, want[i].GpuIDs) {
			t.Fatalf("replica %d: %+v, want %+v", i, rs, want[i])
		}
	}
}

// TestRetryAfterBackoffThenFail walks a failure through the backoff on a fake clock: nothing
// happens before the wait is over, the replica's next attempt replaces its pod after it, and
// the next failure with no retries left fails the workload and frees the others' GPUs.
func TestRetryAfterBackoffThenFail(t *testing.T) {
	failedBefore := testutil.ToFloat64(failedTotal.WithLabelValues(ReasonPodFailed))
	retriesBefore := testutil.ToFloat64(retriesTotal)
	scheduledBefore := testutil.ToFloat64(scheduledTotal.WithLabelValues("round-robin"))
	e := newEnv(t, inlineSpec(2, 1, 4))
	e.reconcile(t)
	e.setPod(t, "train-0-0", running("node-a", "0,1"))
	e.setPod(t, "train-1-0", running("node-a", "2,3"))
	e.reconcile(t)

	e.setPod(t, "train-0-0", failed)
	res := e.reconcile(t)
	wait := 4*time.Second + 200*time.Millisecond // 4 s + half of 10 %
	if res.RequeueAfter != wait {
		t.Fatalf("requeue after %s, want %s", res.RequeueAfter, wait)
	}
	gw := e.workload(t)
	if gw.Status.NextRetryTime == nil || !gw.Status.NextRetryTime.Time.Equal(e.clock.Now().Add(wait)) ||
		gw.Status.Message != "pod train-0-0 failed: GPU 0 has fallen off the bus; retry 1 of 1 in 4.2s" {
		t.Fatalf("status %+v", gw.Status)
	}
	e.clock.Step(wait - time.Millisecond)
	if res := e.reconcile(t); res.RequeueAfter != time.Millisecond {
		t.Fatalf("a millisecond early: requeue after %s", res.RequeueAfter)
	}
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-0", "train-1-0"}) {
		t.Fatalf("retried early: pods %v", got)
	}
	e.clock.Step(time.Millisecond)
	e.reconcile(t)
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-1", "train-1-0"}) {
		t.Fatalf("after the backoff: pods %v, want train-0-0 replaced by train-0-1", got)
	}
	gw = e.workload(t)
	if gw.Status.Retries != 1 || gw.Status.NextRetryTime != nil || gw.Status.Replicas[0].Attempt != 1 {
		t.Fatalf("status %+v", gw.Status)
	}

	e.setPod(t, "train-0-1", running("node-a", "0,1"))
	e.reconcile(t)
	e.setPod(t, "train-0-1", failed)
	e.reconcile(t)
	gw = e.workload(t)
	if gw.Status.Phase != apiv1.WorkloadFailed || gw.Status.Message != "pod train-0-1 failed: GPU 0 has fallen off the bus; no retries left (1 of 1 used)" {
		t.Fatalf("status %+v", gw.Status)
	}
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-1"}) {
		t.Fatalf("pods %v: the running replica must be deleted, the failed pod kept", got)
	}
	// Failed is final: nothing comes back.
	e.clock.Step(time.Hour)
	e.reconcile(t)
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-1"}) {
		t.Fatalf("after Failed: pods %v", got)
	}
	// The counters: one failure by reason, one retry, and the workload scheduled twice (before
	// and after its retry) under its strategy.
	if got := testutil.ToFloat64(failedTotal.WithLabelValues(ReasonPodFailed)) - failedBefore; got != 1 {
		t.Errorf("failed{PodFailed} went up by %g, want 1", got)
	}
	if got := testutil.ToFloat64(retriesTotal) - retriesBefore; got != 1 {
		t.Errorf("retries went up by %g, want 1", got)
	}
	if got := testutil.ToFloat64(scheduledTotal.WithLabelValues("round-robin")) - scheduledBefore; got != 2 {
		t.Errorf("scheduled{round-robin} went up by %g, want 2", got)
	}
	var all []string
	for len(e.events.Events) > 0 {
		all = append(all, <-e.events.Events)
	}
	for _, want := range []string{"Warning PodFailed pod train-0-0 failed: GPU 0 has fallen off the bus; retry 1 of 1 in 4.2s", "Normal Running Pending → Running: all 2 replicas run on node-a", "Normal Pending Running → Pending: pod train-0-0 failed", "Normal Retrying retry 1 of 1: recreating 1 pods after: pod train-0-0 failed", "Warning Failed Running → Failed: pod train-0-1 failed"} {
		if !slices.ContainsFunc(all, func(ev string) bool { return strings.HasPrefix(ev, want) }) {
			t.Errorf("no event %q in %q", want, all)
		}
	}
}

func TestGangRetriesAsAWhole(t *testing.T) {
	spec := inlineSpec(3, 2, 1)
	spec.Gang = true
	e := newEnv(t, spec)
	e.reconcile(t)
	claim := &apiv1.GpuClaim{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "train-2-0"}, claim); err != nil {
		t.Fatal(err)
	}
	if claim.Spec.GangRef != "train-0" || ptr.Deref(claim.Spec.GangSize, 0) != 3 {
		t.Fatalf("claim gang %q size %v", claim.Spec.GangRef, claim.Spec.GangSize)
	}
	// The scheduler gave up waiting for the gang: the members' PodScheduled says so.
	e.setPod(t, "train-1-0", func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/2 nodes are available: rejected due to timeout after waiting 1m0s at plugin GpuClaimPlugin."}}
	})
	res := e.reconcile(t)
	e.clock.Step(res.RequeueAfter)
	e.reconcile(t)
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-1", "train-1-1", "train-2-1"}) {
		t.Fatalf("pods %v: the whole gang is retried", got)
	}
	gw := e.workload(t)
	if gw.Status.Retries != 1 {
		t.Fatalf("retries %d, want 1 for a gang", gw.Status.Retries)
	}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "train-0-1"}, claim); err != nil {
		t.Fatal(err)
	}
	if claim.Spec.GangRef != "train-1" {
		t.Fatalf("the retried gang is gang %q, want train-1", claim.Spec.GangRef)
	}
}

func TestDeleteRemovesPodsAndClaimsFirst(t *testing.T) {
	e := newEnv(t, inlineSpec(2, 1, 1))
	e.reconcile(t)
	if err := e.c.Delete(context.Background(), e.workload(t)); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t) // deletes the pods and claims
	if got := e.podNames(t); len(got) != 0 {
		t.Fatalf("pods left: %v", got)
	}
	var claims apiv1.GpuClaimList
	if err := e.c.List(context.Background(), &claims, client.InNamespace("ns")); err != nil || len(claims.Items) != 0 {
		t.Fatalf("claims left: %d (%v)", len(claims.Items), err)
	}
	e.reconcile(t) // no pods left: the finalizer goes, and the workload with it
	err := e.c.Get(context.Background(), e.key, &apiv1.GpuWorkload{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("workload still there: %v", err)
	}
}

func TestScaleDownDeletesHighIndices(t *testing.T) {
	e := newEnv(t, inlineSpec(3, 1, 1))
	e.reconcile(t)
	gw := e.workload(t)
	gw.Spec.Replicas = ptr.To[int32](1)
	if err := e.c.Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-0"}) {
		t.Fatalf("pods %v", got)
	}
}

// refusePods makes the fake API server refuse every pod create with err.
func refusePods(err error) interceptor.Funcs {
	return interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*corev1.Pod); ok {
			return err
		}
		return c.Create(ctx, obj, opts...)
	}}
}

func TestInvalidTemplateFailsAtOnce(t *testing.T) {
	invalid := apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Pod").GroupKind(), "train-0-0",
		field.ErrorList{field.Invalid(field.NewPath("spec", "containers").Index(0).Child("image"), "", "must not be empty")})
	e := newEnvWith(t, inlineSpec(1, 3, 1), refusePods(invalid))
	e.reconcile(t)
	gw := e.workload(t)
	if gw.Status.Phase != apiv1.WorkloadFailed || !strings.Contains(gw.Status.Message, "spec.containers[0].image") {
		t.Fatalf("status %+v", gw.Status)
	}
	c := meta.FindStatusCondition(gw.Status.Conditions, apiv1.WorkloadConditionFailed)
	if c == nil || c.Reason != ReasonInvalidPod {
		t.Fatalf("Failed condition %+v", c)
	}
}

func TestRefusedCreateIsRetriedNotFailed(t *testing.T) {
	quota := apierrors.NewForbidden(corev1.Resource("pods"), "train-0-0", errors.New("exceeded quota: gpu-pods"))
	e := newEnvWith(t, inlineSpec(1, 3, 1), refusePods(quota))
	_, err := e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: e.key})
	if err == nil || !strings.Contains(err.Error(), "exceeded quota") {
		t.Fatalf("Reconcile error %v, want the quota refusal (the controller retries)", err)
	}
	if gw := e.workload(t); gw.Status.Phase == apiv1.WorkloadFailed {
		t.Fatalf("a quota refusal failed the workload: %+v", gw.Status)
	}
	if ev := <-e.events.Events; !strings.HasPrefix(ev, "Warning FailedCreate") || !strings.Contains(ev, "exceeded quota") {
		t.Fatalf("event %q", ev)
	}
}

// With claim.templateName the replicas' pods name the template and the controller makes no
// claim itself: the claim-template controller makes one per pod, named by ClaimNameForPod, and
// the status names it. A retry's pod names the template again and so gets a new claim.
func TestTemplateNameReplicasUseTheTemplate(t *testing.T) {
	spec := apiv1.GpuWorkloadSpec{
		Replicas:    ptr.To[int32](2),
		Claim:       apiv1.WorkloadClaim{TemplateName: "x2"},
		RetryPolicy: &apiv1.RetryPolicy{MaxRetries: ptr.To[int32](1), BackoffSeconds: ptr.To[int32](1)},
	}
	// A template annotation of the pod template is replaced by the workload's.
	spec.Template.Annotations = map[string]string{apiv1.AnnotationClaimTemplate: "other", apiv1.AnnotationClaim: "stolen"}
	e := newEnv(t, spec)
	e.reconcile(t)
	if got := e.podNames(t); !slices.Equal(got, []string{"train-0-0", "train-1-0"}) {
		t.Fatalf("pods %v", got)
	}
	for _, name := range []string{"train-0-0", "train-1-0"} {
		pod := &corev1.Pod{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		if _, named := pod.Annotations[apiv1.AnnotationClaim]; named || pod.Annotations[apiv1.AnnotationClaimTemplate] != "x2" {
			t.Fatalf("pod %s annotations %v, want the template x2 and no claim", name, pod.Annotations)
		}
	}
	var claims apiv1.GpuClaimList
	if err := e.c.List(context.Background(), &claims); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 0 {
		t.Fatalf("the workload controller made claims %v; the claim-template controller makes them", claims.Items)
	}

	e.setPod(t, "train-0-0", running("node-a", "0,1"))
	e.setPod(t, "train-1-0", failed)
	e.reconcile(t)
	gw := e.workload(t)
	if rs := gw.Status.Replicas; len(rs) != 2 || rs[0].Claim != "train-0-0-x2" || rs[0].Node != "node-a" {
		t.Fatalf("replicas %+v, want replica 0 on node-a with claim train-0-0-x2", rs)
	}
	// The retry after the backoff: a new pod naming the template, so a claim of its own.
	e.clock.Step(2 * time.Second)
	e.reconcile(t)
	e.reconcile(t)
	pod := &corev1.Pod{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "train-1-1"}, pod); err != nil {
		t.Fatalf("no retry pod train-1-1: %v (pods %v)", err, e.podNames(t))
	}
	if pod.Annotations[apiv1.AnnotationClaimTemplate] != "x2" {
		t.Fatalf("retry pod annotations %v", pod.Annotations)
	}
	if rs := e.workload(t).Status.Replicas[1]; rs.Pod != "train-1-1" || rs.Claim != "train-1-1-x2" {
		t.Fatalf("replica 1 %+v, want pod train-1-1 with claim train-1-1-x2", rs)
	}
}

// Two releases side by side: the gpu-controller of the default release leaves alone a
// GpuWorkload whose template names the canary's scheduler (no finalizer, no pods), and the
// canary's controller runs it with pods of its scheduler.
func TestWorkloadOfAnotherReleaseIsLeftAlone(t *testing.T) {
	spec := inlineSpec(1, 0, 1)
	spec.Template.Spec.SchedulerName = "gpu-canary"
	e := newEnv(t, spec)
	e.reconcile(t)
	if got := e.podNames(t); len(got) != 0 {
		t.Fatalf("the gpu-scheduler release made pods %v for a gpu-canary workload", got)
	}
	if gw := e.workload(t); len(gw.Finalizers) != 0 || gw.Status.Phase != "" {
		t.Fatalf("the gpu-scheduler release touched the gpu-canary workload: finalizers %v, status %+v", gw.Finalizers, gw.Status)
	}
	e.r.schedulerName = "gpu-canary"
	e.reconcile(t)
	pod := &corev1.Pod{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "train-0-0"}, pod); err != nil {
		t.Fatalf("the gpu-canary release made no replica: %v", err)
	}
	if pod.Spec.SchedulerName != "gpu-canary" {
		t.Errorf("replica of the gpu-canary release asks for scheduler %q", pod.Spec.SchedulerName)
	}
}

// A claim of a replica pod's name that the pod does not own (made by hand) is never deleted or
// taken over (claims.Existing): the reconcile says why the replica waits.
func TestClaimOfThePodsNameNotOwnedIsLeftAlone(t *testing.T) {
	e := newEnv(t, inlineSpec(1, 1, 4))
	mine := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-0-0"}, Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}}
	if err := e.c.Create(context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	_, err := e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: e.key})
	if err == nil || !strings.Contains(err.Error(), "not owned by pod train-0-0") {
		t.Fatalf("Reconcile error %v, want one saying the claim is not the pod's", err)
	}
	got := &apiv1.GpuClaim{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "train-0-0"}, got); err != nil {
		t.Fatalf("the user's claim is gone: %v", err)
	}
	if got.UID != mine.UID || len(got.OwnerReferences) != 0 || got.Spec.Devices.Count != 1 {
		t.Fatalf("the user's claim was changed: %+v", got)
	}
}
