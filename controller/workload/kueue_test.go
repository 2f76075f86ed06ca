package workload

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// kueuePods reconciles once and returns the workload's pods.
func (e *testEnv) kueuePods(t *testing.T) []corev1.Pod {
	t.Helper()
	e.reconcile(t)
	var list corev1.PodList
	if err := e.c.List(context.Background(), &list, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// A GpuWorkload with Kueue's queue label puts all its pods in that queue as one pod group, so
// that Kueue admits them together: each pod carries the queue, the group (the workload's name
// and UID) and the group's size, the replica count. What the template says about the group is
// overridden.
func TestQueuedWorkloadPodsFormOneKueueGroup(t *testing.T) {
	spec := inlineSpec(3, 0, 1)
	spec.Gang = true
	spec.Template.Labels = map[string]string{KueuePodGroupLabel: "mine", "app": "train"}
	spec.Template.Annotations = map[string]string{KueuePodGroupTotalCountAnnotation: "7"}
	e := newEnv(t, spec)
	gw := e.workload(t)
	gw.Labels = map[string]string{KueueQueueLabel: "team-a"}
	if err := e.c.Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	pods := e.kueuePods(t)
	if len(pods) != 3 {
		t.Fatalf("%d pods, want 3", len(pods))
	}
	for _, p := range pods {
		for k, want := range map[string]string{KueueQueueLabel: "team-a", KueuePodGroupLabel: "train-gw-uid", "app": "train"} {
			if got := p.Labels[k]; got != want {
				t.Errorf("pod %s: label %s = %q, want %q", p.Name, k, got, want)
			}
		}
		if got := p.Annotations[KueuePodGroupTotalCountAnnotation]; got != "3" {
			t.Errorf("pod %s: annotation %s = %q, want \"3\"", p.Name, KueuePodGroupTotalCountAnnotation, got)
		}
	}
}

// A queue named on the template only still groups the pods: without a group Kueue would admit
// each pod as a Workload of its own, one at a time.
func TestTemplateQueueLabelAlsoGroups(t *testing.T) {
	spec := inlineSpec(2, 0, 1)
	spec.Template.Labels = map[string]string{KueueQueueLabel: "team-b"}
	e := newEnv(t, spec)
	for _, p := range e.kueuePods(t) {
		if p.Labels[KueueQueueLabel] != "team-b" || p.Labels[KueuePodGroupLabel] != "train-gw-uid" || p.Annotations[KueuePodGroupTotalCountAnnotation] != "2" {
			t.Errorf("pod %s: labels %v, annotations %v; want queue team-b in group train-gw-uid of 2", p.Name, p.Labels, p.Annotations)
		}
	}
}

// Without a queue, pods get nothing of Kueue's, and what the template sets is left alone.
func TestUnqueuedWorkloadPodsHaveNoKueueGroup(t *testing.T) {
	spec := inlineSpec(2, 0, 1)
	spec.Template.Labels = map[string]string{"app": "train"}
	e := newEnv(t, spec)
	for _, p := range e.kueuePods(t) {
		if _, ok := p.Labels[KueuePodGroupLabel]; ok {
			t.Errorf("pod %s: label %s set without a queue", p.Name, KueuePodGroupLabel)
		}
		if _, ok := p.Annotations[KueuePodGroupTotalCountAnnotation]; ok {
			t.Errorf("pod %s: annotation %s set without a queue", p.Name, KueuePodGroupTotalCountAnnotation)
		}
	}
}

// The group name is a label value and the name of Kueue's Workload: a long workload name is cut
// so that it stays valid, and keeps the UID that tells workloads of the same name apart.
func TestPodGroupNameFitsALabel(t *testing.T) {
	gw := &apiv1.GpuWorkload{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 100) + ".b", UID: "0123456789abcdef"}}
	got := podGroupName(gw)
	if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
		t.Fatalf("podGroupName = %q: not a label value: %v", got, errs)
	}
	if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
		t.Fatalf("podGroupName = %q: not an object name: %v", got, errs)
	}
	if !strings.HasSuffix(got, "-01234567") {
		t.Fatalf("podGroupName = %q, want it to end in the UID's start -01234567", got)
	}
}

// kueueFinalizer is the finalizer Kueue's pod webhook puts on the pods it manages.
const kueueFinalizer = "kueue.x-k8s.io/managed"

// queuedEnv is an environment with a queued workload whose pods carry Kueue's finalizer, as
// Kueue's webhook gives them, so that deleted pods stay to be looked at.
func queuedEnv(t *testing.T, spec apiv1.GpuWorkloadSpec) *testEnv {
	t.Helper()
	e := newEnv(t, spec)
	gw := e.workload(t)
	gw.Labels = map[string]string{KueueQueueLabel: "team-a"}
	if err := e.c.Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	for _, name := range e.podNames(t) {
		e.setPod(t, name, func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, kueueFinalizer) })
	}
	return e
}

// notRetriable checks that every pod of the environment is marked not retriable in its group.
func (e *testEnv) notRetriable(t *testing.T, wantDeleting bool) {
	t.Helper()
	var list corev1.PodList
	if err := e.c.List(context.Background(), &list, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		t.Fatal("no pods")
	}
	for _, p := range list.Items {
		if got := p.Annotations[KueueRetriableInGroupAnnotation]; got != "false" {
			t.Errorf("pod %s: annotation %s = %q, want \"false\"", p.Name, KueueRetriableInGroupAnnotation, got)
		}
		if wantDeleting && p.DeletionTimestamp == nil {
			t.Errorf("pod %s not deleted", p.Name)
		}
	}
}

// Deleting a queued workload first marks its pods not retriable in their group: Kueue then
// finishes the group once they stop, frees its quota and lets the pods go; otherwise it keeps
// them with its finalizer, waiting for replacements, and the workload is never gone.
func TestDeletedQueuedWorkloadEndsItsKueueGroup(t *testing.T) {
	e := queuedEnv(t, inlineSpec(2, 1, 1))
	if err := e.c.Delete(context.Background(), e.workload(t)); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	e.notRetriable(t, true)
}

// A queued workload that fails for good ends its group too, so that its quota goes back to the
// queue although the workload stays.
func TestFailedQueuedWorkloadEndsItsKueueGroup(t *testing.T) {
	e := queuedEnv(t, inlineSpec(1, 0, 1))
	e.setPod(t, "train-0-0", running("node-a", "0,1"))
	e.reconcile(t)
	e.setPod(t, "train-0-0", failed)
	e.reconcile(t)
	if gw := e.workload(t); gw.Status.Phase != apiv1.WorkloadFailed {
		t.Fatalf("phase %q, want Failed", gw.Status.Phase)
	}
	e.notRetriable(t, false)
}

// Pods of no group are never marked.
func TestDeletedUnqueuedWorkloadPodsUnmarked(t *testing.T) {
	e := newEnv(t, inlineSpec(1, 1, 1))
	e.reconcile(t)
	e.setPod(t, "train-0-0", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/hold") })
	if err := e.c.Delete(context.Background(), e.workload(t)); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	pod := &corev1.Pod{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "train-0-0"}, pod); err != nil {
		t.Fatal(err)
	}
	if _, ok := pod.Annotations[KueueRetriableInGroupAnnotation]; ok {
		t.Fatalf("pod of no group marked %s", KueueRetriableInGroupAnnotation)
	}
}
