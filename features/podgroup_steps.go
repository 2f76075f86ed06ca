package features

import (
	"context"
	"fmt"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// WorkloadAPIArgs make the suite's kube-apiserver serve Kubernetes' own gang API.
var WorkloadAPIArgs = cluster.WorkloadAPIArgs

var (
	coschedulingGroups = schema.GroupVersionResource{Group: claims.GroupCoscheduling, Version: "v1alpha1", Resource: "podgroups"}
	workloadGroups     = schema.GroupVersionResource{Group: claims.GroupWorkload, Version: "v1alpha2", Resource: "podgroups"}
)

// Steps about gangs that come from PodGroups: the coscheduling plugin's (a pod label) and
// Kubernetes' own (the pod's spec.schedulingGroup).
func registerPodGroupSteps(sc *godog.ScenarioContext) {
	sc.Step(`^PodGroup "([^"]*)" of at least (\d+) pods$`, createCoschedulingGroup)
	sc.Step(`^Kubernetes PodGroup "([^"]*)" with a gang of at least (\d+) pods$`, createWorkloadGroup)
	sc.Step(`^GpuClaimTemplate "([^"]*)" for (\d+) GPUs inside one NVLink island$`, createIslandTemplate)
	sc.Step(`^GpuClaimTemplate "([^"]*)" for (\d+) GPUs whose gang lies inside one "([^"]*)" domain$`, createDomainTemplate)
	sc.Step(`^plain Job "([^"]*)" runs (\d+) pods at once for (\d+) seconds each from claim template "([^"]*)" in PodGroup "([^"]*)"$`, createGroupJob)
	sc.Step(`^pod "([^"]*)" uses claim template "([^"]*)" in (PodGroup|Kubernetes PodGroup) "([^"]*)"$`, podInGroup)
	sc.Step(`^the claims of the pods of Job "([^"]*)" are in gang "([^"]*)" of (\d+)$`, jobClaimsInGang)
	sc.Step(`^the claim of pod "([^"]*)" from template "([^"]*)" is in gang "([^"]*)" of (\d+)$`, podClaimInGang)
	sc.Step(`^each pod of Job "([^"]*)" has its GPUs in one island$`, jobPodsInOneIsland)
}

func (st *scenario) dynamic() (dynamic.Interface, error) {
	d, err := dynamic.NewForConfig(st.suite.restCfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return d, nil
}

func (st *scenario) createGroup(ctx context.Context, gvr schema.GroupVersionResource, name string, spec map[string]any) error {
	d, err := st.dynamic()
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": st.ns},
		"spec":     spec,
	}}
	if _, err := d.Resource(gvr).Namespace(st.ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating %s PodGroup %s/%s: %w", gvr.Group, st.ns, name, err)
	}
	return nil
}

func createCoschedulingGroup(ctx context.Context, name string, minMember int) error {
	return state(ctx).createGroup(ctx, coschedulingGroups, name, map[string]any{"minMember": int64(minMember), "scheduleTimeoutSeconds": int64(60)})
}

func createWorkloadGroup(ctx context.Context, name string, minCount int) error {
	return state(ctx).createGroup(ctx, workloadGroups, name, map[string]any{
		"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(minCount)}},
	})
}

// createIslandTemplate makes a template whose claims need their GPUs inside one NVLink island.
func createIslandTemplate(ctx context.Context, name string, n int) error {
	st := state(ctx)
	t := &apiv1.GpuClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns},
		Spec: apiv1.GpuClaimTemplateSpec{
			Metadata: apiv1.ClaimTemplateMetadata{Labels: map[string]string{"made-from": name}},
			Spec: apiv1.GpuClaimSpec{
				Devices:  apiv1.DeviceRequest{Count: int32(n)},
				Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{LabelScenario: st.id}},
				Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired},
			},
		},
	}
	if _, err := st.suite.gpu.GpuV1().GpuClaimTemplates(st.ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating GpuClaimTemplate %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// createDomainTemplate makes a template whose claims' gang must lie inside one domain of a
// topology level: gangTopology without gangRef, for the pods of a PodGroup.
func createDomainTemplate(ctx context.Context, name string, n int, level string) error {
	st := state(ctx)
	t := &apiv1.GpuClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns},
		Spec: apiv1.GpuClaimTemplateSpec{
			Metadata: apiv1.ClaimTemplateMetadata{Labels: map[string]string{"made-from": name}},
			Spec: apiv1.GpuClaimSpec{
				Devices:      apiv1.DeviceRequest{Count: int32(n)},
				Selector:     &apiv1.NodeSelector{MatchLabels: map[string]string{LabelScenario: st.id}},
				GangTopology: &apiv1.GangTopology{Level: level, Mode: apiv1.TopologyRequired},
			},
		},
	}
	if _, err := st.suite.gpu.GpuV1().GpuClaimTemplates(st.ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating GpuClaimTemplate %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// createGroupJob makes a Job whose pods are in a coscheduling PodGroup by its label only, as
// JobSet, Kubeflow and LeaderWorkerSet label theirs: no gang annotation, no gangRef.
func createGroupJob(ctx context.Context, name string, n, seconds int, template, group string) error {
	st := state(ctx)
	job := st.newJob("plain", name, n, seconds, template)
	job.Spec.Template.Labels = map[string]string{claims.LabelPodGroup: group}
	return st.submitJob(ctx, job)
}

func podInGroup(ctx context.Context, name, template, kind, group string) error {
	st := state(ctx)
	pod := st.newPod(name, "", podOptions{})
	delete(pod.Annotations, apiv1.AnnotationClaim)
	pod.Annotations[apiv1.AnnotationClaimTemplate] = template
	if kind == "PodGroup" {
		pod.Labels = map[string]string{claims.LabelPodGroup: group}
	} else {
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	}
	return st.createPod(ctx, pod)
}

// claimInGang checks the claim made for pod from its template: in gang (of the scenario's
// namespace) with gangSize size.
func (st *scenario) claimInGang(ctx context.Context, pod *corev1.Pod, gang string, size int) (bool, string, error) {
	if ok, why, err := st.checkOwnedClaim(ctx, pod, pod.Annotations[apiv1.AnnotationClaimTemplate]); !ok {
		return false, why, err
	}
	name, err := apiv1.ClaimNameForPod(pod.Name, pod.Annotations[apiv1.AnnotationClaimTemplate])
	if err != nil {
		return false, "", err
	}
	c, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error(), nil
	}
	if c.Spec.GangRef != gang || c.Spec.GangSize == nil || int(*c.Spec.GangSize) != size {
		return false, "", fmt.Errorf("GpuClaim %s has gangRef %q gangSize %v, want %q of %d", name, c.Spec.GangRef, c.Spec.GangSize, gang, size)
	}
	return true, "", nil
}

func jobClaimsInGang(ctx context.Context, job, gang string, size int) error {
	st := state(ctx)
	return eventually(ctx, waitBound, fmt.Sprintf("the claims of Job %s's pods are in gang %s of %d", job, gang, size), func(ctx context.Context) (bool, string, error) {
		pods, err := st.controllerPods(ctx, "Job", job)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods) != size {
			return false, fmt.Sprintf("%d live pods", len(pods)), nil
		}
		for i := range pods {
			if ok, why, err := st.claimInGang(ctx, &pods[i], gang, size); !ok {
				return false, why, err
			}
		}
		return true, "", nil
	})
}

func podClaimInGang(ctx context.Context, podName, template, gang string, size int) error {
	st := state(ctx)
	return eventually(ctx, waitBound, fmt.Sprintf("the claim of pod %s is in gang %s of %d", podName, gang, size), func(ctx context.Context) (bool, string, error) {
		pod, err := st.getPod(ctx, podName)
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Annotations[apiv1.AnnotationClaimTemplate] != template {
			return false, "", fmt.Errorf("pod %s names template %q, not %q", podName, pod.Annotations[apiv1.AnnotationClaimTemplate], template)
		}
		return st.claimInGang(ctx, pod, gang, size)
	})
}

func jobPodsInOneIsland(ctx context.Context, job string) error {
	st := state(ctx)
	pods, err := st.controllerPods(ctx, "Job", job)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if err := spanIslands(ctx, p.Name, 1); err != nil {
			return err
		}
	}
	return nil
}
