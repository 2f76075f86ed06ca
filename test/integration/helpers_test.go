//go:build integration

package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// namespace creates a namespace for one test and deletes it afterwards.
func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := ensureNamespace(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func createClaim(t *testing.T, ns, name string, spec apiv1.GpuClaimSpec) *apiv1.GpuClaim {
	t.Helper()
	c, err := env.gpu.GpuV1().GpuClaims(ns).Create(t.Context(), &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating GpuClaim %s/%s: %v", ns, name, err)
	}
	return c
}

func createPod(t *testing.T, ns, name, claim string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{apiv1.AnnotationClaim: claim}},
		Spec: corev1.PodSpec{
			SchedulerName: apiv1.SchedulerName,
			Containers:    []corev1.Container{{Name: "main", Image: "registry.example/cuda:fake"}},
			Tolerations:   []corev1.Toleration{{Key: "type", Operator: corev1.TolerationOpExists}},
		},
	}
	out, err := env.kube.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return out
}

// eventually polls cond every 200 ms for up to timeout and fails the test with cond's last
// explanation if it never holds.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not after %s: %s", what, timeout, last)
	}
}

// boundPod waits until a pod is bound and returns it.
func boundPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, time.Minute, "pod "+ns+"/"+name+" bound", func() (bool, string) {
		p, err := env.kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.Spec.NodeName != "", fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	return pod
}

// allocation reads a bound pod's allocation annotations and checks they agree.
func allocation(t *testing.T, pod *corev1.Pod) apiv1.Allocation {
	t.Helper()
	a, err := apiv1.ParseAllocation(pod.Annotations[apiv1.AnnotationAllocated])
	if err != nil {
		t.Fatalf("pod %s: %v (annotations %v)", pod.Name, err, pod.Annotations)
	}
	if a.Node != pod.Spec.NodeName {
		t.Fatalf("pod %s bound to %s but allocated on %s", pod.Name, pod.Spec.NodeName, a.Node)
	}
	if got := pod.Annotations[apiv1.AnnotationGPUIDs]; got != apiv1.FormatIDs(a.IDs) {
		t.Fatalf("pod %s: %s=%q, want %q", pod.Name, apiv1.AnnotationGPUIDs, got, apiv1.FormatIDs(a.IDs))
	}
	return a
}

// claimStatus waits until a claim's status satisfies cond.
func claimStatus(t *testing.T, ns, name string, what string, cond func(apiv1.GpuClaimStatus) bool) apiv1.GpuClaimStatus {
	t.Helper()
	var st apiv1.GpuClaimStatus
	eventually(t, time.Minute, "GpuClaim "+ns+"/"+name+" "+what, func() (bool, string) {
		c, err := env.gpu.GpuV1().GpuClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st = c.Status
		return cond(st), fmt.Sprintf("status %+v", st)
	})
	return st
}

// podLeases lists the GPU leases naming a pod UID.
func podLeases(t *testing.T, uid string) []string {
	t.Helper()
	list, err := env.kube.CoordinationV1().Leases(leaseNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range list.Items {
		if l.Spec.HolderIdentity != nil && strings.Contains(","+*l.Spec.HolderIdentity+",", ","+uid+",") {
			names = append(names, l.Name)
		}
	}
	sort.Strings(names)
	return names
}

// checkNoDoubleBooking fails if any GPU is allocated to two live pods, or if a bound pod's GPU
// is not locked by a lease naming that pod. It returns the number of bound GPU pods.
func checkNoDoubleBooking(t *testing.T, ns string) int {
	t.Helper()
	pods, err := env.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := env.kube.CoordinationV1().Leases(leaseNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	for _, l := range leases.Items {
		holder[l.Name] = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	owner := map[string]string{}
	bound := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		bound++
		a := allocation(t, p)
		for _, id := range a.IDs {
			key := fmt.Sprintf("%s/%d", a.Node, id)
			if other, dup := owner[key]; dup {
				t.Fatalf("GPU %s is allocated to both %s and %s", key, other, p.Name)
			}
			owner[key] = p.Name
			name, _ := apiv1.LeaseName(a.Node, id)
			if holder[name] != string(p.UID) {
				t.Fatalf("GPU %s of pod %s: lease %s is held by %q, want the pod's UID %s", key, p.Name, name, holder[name], p.UID)
			}
		}
	}
	return bound
}

// deletePod deletes a pod, with grace 0 when force is set, and waits until it is gone.
func deletePod(t *testing.T, ns, name string, force bool) {
	t.Helper()
	opts := metav1.DeleteOptions{}
	if force {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	if err := env.kube.CoreV1().Pods(ns).Delete(t.Context(), name, opts); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "pod "+ns+"/"+name+" gone", func() (bool, string) {
		_, err := env.kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
