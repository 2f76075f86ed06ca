//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// TestGangsFromPodGroups runs the production gpu-controller and gpu-scheduler against the real
// kube-apiserver (serving the coscheduling PodGroup CRD and, by its feature gate, Kubernetes'
// own Workload API): pods that name a claim template and a PodGroup, and nothing else, get
// claims in the group's gang, sized by the group, and are placed all or nothing. A coscheduling
// PodGroup of 3 pods of 8 GPUs on the 2 nodes of the dgx pool binds none of them and takes no
// lease; a scheduling.k8s.io PodGroup of 2 binds both.
func TestGangsFromPodGroups(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t, "podgroups")
	ctl, err := launch.StartController(ctx, env.c, launch.ControllerOptions{Name: "gpu-controller-podgroups"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Kill() })
	dyn, err := dynamic.NewForConfig(env.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.gpu.GpuV1().GpuClaimTemplates(ns).Create(ctx, &apiv1.GpuClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "x8"},
		Spec:       apiv1.GpuClaimTemplateSpec{Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 8}, Selector: onPool("dgx")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createGroup := func(group, version, name string, spec map[string]any) {
		t.Helper()
		gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: "podgroups"}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvr.GroupVersion().String(), "kind": "PodGroup",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}
		if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s PodGroup %s: %v", group, name, err)
		}
	}
	groupPod := func(name string, inGroup func(*corev1.Pod)) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{apiv1.AnnotationClaimTemplate: "x8"}},
			Spec: corev1.PodSpec{
				SchedulerName: apiv1.SchedulerName,
				Containers:    []corev1.Container{{Name: "main", Image: "registry.example/cuda:fake"}},
				Tolerations:   []corev1.Toleration{{Key: "type", Operator: corev1.TolerationOpExists}},
			},
		}
		inGroup(p)
		out, err := env.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		return out
	}
	// inGang waits for the claim of pod name, made by gpu-controller, in gang of size.
	inGang := func(name, gang string, size int32) {
		t.Helper()
		eventually(t, time.Minute, "the claim of pod "+name+" in gang "+gang, func() (bool, string) {
			c, err := env.gpu.GpuV1().GpuClaims(ns).Get(ctx, name+"-x8", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if c.Spec.GangRef != gang || c.Spec.GangSize == nil || *c.Spec.GangSize != size {
				return false, fmt.Sprintf("gangRef %q gangSize %v", c.Spec.GangRef, c.Spec.GangSize)
			}
			return true, ""
		})
	}

	// Three members of 8 GPUs, two nodes of 8: none is placed.
	createGroup(claims.GroupCoscheduling, "v1alpha1", "trio", map[string]any{"minMember": int64(3), "scheduleTimeoutSeconds": int64(30)})
	var trio []*corev1.Pod
	for i := range 3 {
		trio = append(trio, groupPod(fmt.Sprintf("t%d", i), func(p *corev1.Pod) { p.Labels = map[string]string{claims.LabelPodGroup: "trio"} }))
	}
	for _, p := range trio {
		inGang(p.Name, "scheduling.x-k8s.io/trio", 3)
		claimStatus(t, ns, p.Name+"-x8", "says the gang does not fit", func(st apiv1.GpuClaimStatus) bool {
			return strings.Contains(st.Message, "gang "+ns+"/scheduling.x-k8s.io/trio: the free GPUs cannot take all 3 pods still to place at once")
		})
	}
	for _, p := range trio {
		got, err := env.kube.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != "" {
			t.Errorf("pod %s of a gang that cannot fit whole was bound to %s", p.Name, got.Spec.NodeName)
		}
		if l := podLeases(t, string(p.UID)); len(l) > 0 {
			t.Errorf("pod %s of a gang that cannot fit whole holds leases %v", p.Name, l)
		}
	}
	for _, p := range trio {
		deletePod(t, ns, p.Name, true)
	}

	// Kubernetes' own PodGroup, gang of 2: both bound, one per dgx node.
	createGroup(claims.GroupWorkload, "v1alpha2", "pair", map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(2)}}})
	for _, name := range []string{"w0", "w1"} {
		p := groupPod(name, func(p *corev1.Pod) { p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("pair")} })
		if p.Spec.SchedulingGroup == nil {
			t.Fatalf("pod %s lost spec.schedulingGroup: kube-apiserver runs without the GenericWorkload feature gate", name)
		}
	}
	nodes := map[string]bool{}
	for _, name := range []string{"w0", "w1"} {
		inGang(name, "scheduling.k8s.io/pair", 2)
		nodes[allocation(t, boundPod(t, ns, name)).Node] = true
	}
	if len(nodes) != 2 {
		t.Errorf("the pair's 8-GPU pods share a node: %v", nodes)
	}
	checkNoDoubleBooking(t, ns)
	for _, name := range []string{"w0", "w1"} {
		deletePod(t, ns, name, true)
	}
	// Cleaned up by the namespace's deletion; wait for the claims to go so that the next test
	// finds the dgx pool free.
	eventually(t, time.Minute, "the pods' claims gone", func() (bool, string) {
		list, err := env.gpu.GpuV1().GpuClaims(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d claims left", len(list.Items))
	})
}
