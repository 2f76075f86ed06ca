package claimtemplate

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/controller/claimstest"
)

type env struct {
	c      client.Client
	r      *Reconciler
	events *events.FakeRecorder
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	rec := events.NewFakeRecorder(10)
	return &env{c: c, r: newReconciler(interceptor.NewClient(c, claimstest.MetadataOnly(t)), rec, nil), events: rec}
}

func (e *env) reconcile(t *testing.T, pod string) reconcile.Result {
	t.Helper()
	res, err := e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: pod}})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (e *env) claim(t *testing.T, name string) (*apiv1.GpuClaim, bool) {
	t.Helper()
	c := &apiv1.GpuClaim{}
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, c)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, true
}

func (e *env) event(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-e.events.Events:
		return ev
	default:
		return ""
	}
}

func pod(name, template string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
		Annotations: map[string]string{apiv1.AnnotationClaimTemplate: template}}}
}

func template(name string) *apiv1.GpuClaimTemplate {
	return &apiv1.GpuClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: apiv1.GpuClaimTemplateSpec{
		Metadata: apiv1.ClaimTemplateMetadata{Labels: map[string]string{"team": "ml"}, Annotations: map[string]string{"note": "x"}},
		Spec:     apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 8, Policy: apiv1.PolicyContiguous}, GangRef: "train", GangSize: ptr.To[int32](4)},
	}}
}

func mustClaim(t *testing.T, p *corev1.Pod, tmpl *apiv1.GpuClaimTemplate) *apiv1.GpuClaim {
	t.Helper()
	c, err := apiv1.ClaimFromTemplate(p, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMakesTheClaimOwnedByThePod(t *testing.T) {
	e := newEnv(t, pod("train-0", "x8"), template("x8"))
	e.reconcile(t, "train-0")
	c, ok := e.claim(t, "train-0-x8")
	if !ok {
		t.Fatal("no claim train-0-x8 made")
	}
	if c.Spec.Devices.Count != 8 || c.Spec.GangRef != "train" || *c.Spec.GangSize != 4 {
		t.Errorf("claim spec %+v, want the template's", c.Spec)
	}
	if c.Labels["team"] != "ml" || c.Annotations["note"] != "x" {
		t.Errorf("claim labels %v annotations %v, want the template's", c.Labels, c.Annotations)
	}
	ref := metav1.GetControllerOf(c)
	if ref == nil || ref.Kind != "Pod" || ref.Name != "train-0" || ref.UID != "uid-train-0" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("owner %+v, want pod train-0 as controller blocking deletion", c.OwnerReferences)
	}
	// Reconciling again changes nothing and reports nothing.
	e.reconcile(t, "train-0")
	if ev := e.event(t); ev != "" {
		t.Errorf("second reconcile reported %q", ev)
	}
}

func TestMissingTemplateWarnsAndMakesNothing(t *testing.T) {
	e := newEnv(t, pod("p", "nope"))
	e.reconcile(t, "p")
	if _, ok := e.claim(t, "p-nope"); ok {
		t.Fatal("a claim was made without a template")
	}
	ev := e.event(t)
	if !strings.Contains(ev, "Warning "+ReasonTemplateNotFound) || !strings.Contains(ev, "GpuClaimTemplate ns/nope") {
		t.Fatalf("event %q, want a warning naming the template", ev)
	}
	// The template appears: the pod (brought back by the template watch) gets its claim.
	if err := e.c.Create(context.Background(), template("nope")); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t, "p")
	if _, ok := e.claim(t, "p-nope"); !ok {
		t.Fatal("no claim once the template exists")
	}
}

func TestClaimOwnedBySomeoneElseIsNotTakenOver(t *testing.T) {
	foreign := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-x8"}, Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}}
	e := newEnv(t, pod("p", "x8"), template("x8"), foreign)
	e.reconcile(t, "p")
	c, _ := e.claim(t, "p-x8")
	if len(c.OwnerReferences) != 0 || c.Spec.Devices.Count != 1 {
		t.Fatalf("foreign claim changed: %+v", c)
	}
	if ev := e.event(t); !strings.Contains(ev, "Warning "+ReasonClaimNameTaken) || !strings.Contains(ev, "GpuClaim ns/p-x8") {
		t.Fatalf("event %q, want a warning naming the claim", ev)
	}
}

func TestPodsThatNeedNoClaim(t *testing.T) {
	named := pod("named", "x8")
	named.Annotations[apiv1.AnnotationClaim] = "mine"
	done := pod("done", "x8")
	done.Status.Phase = corev1.PodSucceeded
	e := newEnv(t, named, done, template("x8"))
	e.reconcile(t, "named")
	e.reconcile(t, "done")
	e.reconcile(t, "gone") // deleted before its claim was made: nothing to do
	list := &apiv1.GpuClaimList{}
	if err := e.c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("claims made: %v", list.Items)
	}
}

// A StatefulSet pod deleted and made again has the same name: the claim of the earlier pod is
// left to the garbage collector, without a warning, and the new pod gets its own once it is gone.
func TestClaimOfAnEarlierPodOfTheSameName(t *testing.T) {
	old := pod("shard-0", "x8")
	old.UID = "uid-old"
	stale := mustClaim(t, old, template("x8"))
	e := newEnv(t, pod("shard-0", "x8"), template("x8"), stale)
	e.reconcile(t, "shard-0")
	if ev := e.event(t); ev != "" {
		t.Fatalf("event %q for the claim of the earlier pod", ev)
	}
	if err := e.c.Delete(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t, "shard-0")
	c, ok := e.claim(t, "shard-0-x8")
	if !ok || metav1.GetControllerOf(c).UID != "uid-shard-0" {
		t.Fatalf("claim %+v, want one owned by the new pod", c)
	}
}

// A pod deleted before its claim was made gets none, and nobody is warned: gone from the cache
// (the reconcile finds nothing) or still there with a deletion timestamp (a finalizer keeps it).
// A claim made in the instant between reading the pod and its deletion is owned by the pod's
// UID, so the garbage collector deletes it like any claim of a deleted pod.
func TestPodDeletedBeforeItsClaimWasMade(t *testing.T) {
	leaving := pod("leaving", "x8")
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	leaving.Finalizers = []string{"example.com/hold"}
	e := newEnv(t, leaving, template("x8"))
	if res := e.reconcile(t, "leaving"); res.RequeueAfter != 0 {
		t.Fatalf("pod being deleted: result %+v, want nothing to come back for", res)
	}
	e.reconcile(t, "gone")
	list := &apiv1.GpuClaimList{}
	if err := e.c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("claims made for pods on their way out: %v", list.Items)
	}
	if ev := e.event(t); ev != "" {
		t.Fatalf("event %q for a deleted pod", ev)
	}
	// The claim that would have been made is owned by the pod's UID, blocking its deletion
	// until the claim is collected: nothing outlives the pod.
	c := mustClaim(t, leaving, template("x8"))
	if ref := metav1.GetControllerOf(c); ref == nil || ref.UID != leaving.UID || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Fatalf("claim owner %+v, want the pod's UID as a blocking controller", c.OwnerReferences)
	}
}

// Two releases side by side: each controller makes the claims of the pods asking for its own
// scheduler only (a pod naming none, or default-scheduler, belongs to the default release).
func TestEachReleaseMakesItsOwnPodsClaims(t *testing.T) {
	canary := pod("canary-0", "x8")
	canary.Spec.SchedulerName = "gpu-canary"
	plain := pod("plain-0", "x8")
	plain.Spec.SchedulerName = corev1.DefaultSchedulerName
	e := newEnv(t, canary, plain, template("x8"))
	e.reconcile(t, "canary-0")
	e.reconcile(t, "plain-0")
	if _, ok := e.claim(t, "canary-0-x8"); ok {
		t.Error("the gpu-scheduler release made the claim of a gpu-canary pod")
	}
	if _, ok := e.claim(t, "plain-0-x8"); !ok {
		t.Error("the gpu-scheduler release made no claim for a default-scheduler pod")
	}
	e.r.schedulerName = "gpu-canary"
	e.reconcile(t, "canary-0")
	if _, ok := e.claim(t, "canary-0-x8"); !ok {
		t.Error("the gpu-canary release made no claim for its own pod")
	}
}

// gpu-scheduler makes the claims of its own unbound pods when it binds them; the controller
// makes none for them (it would only race the scheduler's create), but still reports a missing
// template. It does make the claims of a gang template, which must all exist before the gang is
// placed, and remakes the claim of a bound pod.
func TestLeavesItsSchedulersPodsToTheScheduler(t *testing.T) {
	solo := template("x1")
	solo.Spec.Spec.GangRef, solo.Spec.Spec.GangSize = "", nil
	ours := func(name, tmpl string) *corev1.Pod {
		p := pod(name, tmpl)
		p.Spec.SchedulerName = apiv1.SchedulerName
		return p
	}
	bound := ours("bound", "x1")
	bound.Spec.NodeName = "node-a"
	e := newEnv(t, ours("solo", "x1"), ours("member", "x8"), ours("orphan", "nope"), bound, solo, template("x8"))
	e.reconcile(t, "solo")
	if _, ok := e.claim(t, "solo-x1"); ok {
		t.Error("the controller made the claim of an unbound gpu-scheduler pod; the scheduler makes it")
	}
	if ev := e.event(t); ev != "" {
		t.Errorf("event %q for a pod the scheduler makes the claim of", ev)
	}
	e.reconcile(t, "member")
	if _, ok := e.claim(t, "member-x8"); !ok {
		t.Error("no claim made for a gang template's pod")
	}
	e.reconcile(t, "orphan")
	if ev := e.event(t); !strings.Contains(ev, "Warning "+ReasonTemplateNotFound) {
		t.Errorf("event %q, want the missing template reported", ev)
	}
	e.reconcile(t, "bound")
	if _, ok := e.claim(t, "bound-x1"); !ok {
		t.Error("no claim made again for a bound pod")
	}
}

// TestPodEventsDropUpdatesThatChangeNothing: only a pod's appearance and changes of its claim
// annotations reach Reconcile. Its binding, above all, must not: the controller then raced the
// scheduler's own create of the claim.
func TestPodEventsDropUpdatesThatChangeNothing(t *testing.T) {
	r := newReconciler(nil, nil, nil)
	ours := pod("p", "x1")
	ours.Spec.SchedulerName = apiv1.SchedulerName
	bound := ours.DeepCopy()
	bound.Spec.NodeName = "node-a"
	bound.Status.Phase = corev1.PodRunning
	renamed := ours.DeepCopy()
	renamed.Annotations[apiv1.AnnotationClaimTemplate] = "x8"
	named := ours.DeepCopy()
	named.Annotations[apiv1.AnnotationClaim] = "mine"
	plain := ours.DeepCopy()
	plain.Annotations = nil
	others := pod("q", "x1")
	others.Spec.SchedulerName = "another-scheduler"
	f := r.podEvents()
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"a templated pod of ours appears", f.Create(event.CreateEvent{Object: ours}), true},
		{"a templated pod of another release appears", f.Create(event.CreateEvent{Object: others}), false},
		{"a pod without a template appears", f.Create(event.CreateEvent{Object: plain}), false},
		{"the pod is bound and runs", f.Update(event.UpdateEvent{ObjectOld: ours, ObjectNew: bound}), false},
		{"the pod names another template", f.Update(event.UpdateEvent{ObjectOld: ours, ObjectNew: renamed}), true},
		{"the pod names a claim of its own", f.Update(event.UpdateEvent{ObjectOld: ours, ObjectNew: named}), true},
		{"a template annotation is added", f.Update(event.UpdateEvent{ObjectOld: plain, ObjectNew: ours}), true},
		{"the pod is deleted", f.Delete(event.DeleteEvent{Object: bound}), false},
		{"the pod is listed again", f.Generic(event.GenericEvent{Object: ours}), true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: let through = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestClaimEventsOnlyDeletions: of the events of the claims the controller owns through their
// pods, only a deletion can give Reconcile something to do.
func TestClaimEventsOnlyDeletions(t *testing.T) {
	c := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-x1"}}
	bound := c.DeepCopy()
	bound.Status.Phase = apiv1.ClaimBound
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"made", claimGone.Create(event.CreateEvent{Object: c}), false},
		{"its status written", claimGone.Update(event.UpdateEvent{ObjectOld: c, ObjectNew: bound}), false},
		{"deleted", claimGone.Delete(event.DeleteEvent{Object: bound}), true},
		{"listed again", claimGone.Generic(event.GenericEvent{Object: c}), true},
	} {
		if tc.got != tc.want {
			t.Errorf("a claim %s: let through = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}
