package runner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// LabelController on a pod template names the scenario's Job or Deployment; the recorder maps
// the pods its controller stamps out (with names of the controller's making) to the plan's
// slots of that controller.
const LabelController = "sim.gpu.scheduling/controller"

// buildClaimTemplate makes the GpuClaimTemplate of one scenario template. The claims made from
// it carry the run's label, so that a run on an existing cluster finds what to remove.
func buildClaimTemplate(t scenario.ClaimTemplate, ns, run string) *gpuv1.GpuClaimTemplate {
	spec := buildClaim(scenario.PodPlan{Claim: t.Claim}, ns, run).Spec
	labels := map[string]string{LabelRun: run}
	return &gpuv1.GpuClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: ns, Labels: labels},
		Spec: gpuv1.GpuClaimTemplateSpec{
			Metadata: gpuv1.ClaimTemplateMetadata{Labels: map[string]string{LabelRun: run}},
			Spec:     spec,
		},
	}
}

// createClaimTemplates creates the workload's templates before the clock starts, as the user
// would have them in place before applying a Job.
func createClaimTemplates(ctx context.Context, gcs versioned.Interface, s *scenario.Scenario, ns, run string) error {
	for _, t := range s.Spec.Workload.ClaimTemplates {
		obj := buildClaimTemplate(t, ns, run)
		err := retryTransient(ctx, func() error {
			_, err := gcs.GpuV1().GpuClaimTemplates(ns).Create(ctx, obj, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating GpuClaimTemplate %s/%s: %w", ns, obj.Name, err)
		}
	}
	return nil
}

// podTemplate is the pod template of a controller, made from its first slot exactly as a bare
// pod of the same plan entry, except that gpu-scheduler pods name the claim template instead of
// a claim. The stock scheduler's pods ask for nvidia.com/gpu as bare pods do.
func podTemplate(p scenario.PodPlan, kind, ns, run, mode string) corev1.PodTemplateSpec {
	pod := buildPod(p, ns, run, mode)
	pod.Labels[LabelController] = p.Controller
	if !IsStock(mode) {
		delete(pod.Annotations, gpuv1.AnnotationClaim)
		pod.Annotations[gpuv1.AnnotationClaimTemplate] = p.Template
	}
	if kind == scenario.ControllerDeployment {
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels, Annotations: pod.Annotations},
		Spec:       pod.Spec,
	}
}

// buildController makes the Job or Deployment of one scenario controller from its first slot.
func buildController(c scenario.Controller, first scenario.PodPlan, ns, run, mode string) (job *batchv1.Job, dep *appsv1.Deployment) {
	meta := metav1.ObjectMeta{Name: c.Name, Namespace: ns, Labels: map[string]string{LabelRun: run, LabelController: c.Name}}
	tmpl := podTemplate(first, c.Kind, ns, run, mode)
	n := int32(c.Replicas)
	if c.Kind == scenario.ControllerDeployment {
		return nil, &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelRun: run, LabelController: c.Name}},
			Template: tmpl,
		}}
	}
	completion := batchv1.NonIndexedCompletion
	if c.Indexed {
		completion = batchv1.IndexedCompletion
	}
	return &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{
		Completions: &n, Parallelism: &n, CompletionMode: &completion,
		// A pod that fails is not the scheduler's doing; the run shows it and does not retry.
		BackoffLimit: ptr.To[int32](0),
		Template:     tmpl,
	}}, nil
}

// createController creates one Job or Deployment; its pods' clocks start now.
func (pl *player) createController(ctx context.Context, c scenario.Controller) {
	var first scenario.PodPlan
	var slots []string
	for _, p := range pl.plan {
		if p.Controller == c.Name {
			if len(slots) == 0 {
				first = p
			}
			slots = append(slots, p.Name)
		}
	}
	job, dep := buildController(c, first, pl.ns, pl.run, pl.mode)
	now := pl.rec.now()
	for _, s := range slots {
		pl.rec.created(s, now)
	}
	err := retryTransient(ctx, func() error {
		var err error
		if job != nil {
			_, err = pl.cs.BatchV1().Jobs(pl.ns).Create(ctx, job, metav1.CreateOptions{})
		} else {
			_, err = pl.cs.AppsV1().Deployments(pl.ns).Create(ctx, dep, metav1.CreateOptions{})
		}
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	if err != nil && ctx.Err() == nil {
		pl.createErrors.Add(int64(len(slots)))
		klog.FromContext(ctx).Error(err, "Creating a workload controller failed", "kind", c.Kind, "controller", klog.KRef(pl.ns, c.Name))
		return
	}
	pl.created.Add(int64(len(slots)))
}

// playControllers creates the Jobs and Deployments at their offsets.
func (pl *player) playControllers(ctx context.Context, ctls []scenario.Controller) error {
	ctls = append([]scenario.Controller(nil), ctls...)
	sort.SliceStable(ctls, func(i, j int) bool { return ctls[i].At.Duration < ctls[j].At.Duration })
	for _, c := range ctls {
		if err := pl.sleepUntil(ctx, c.At.Duration+pl.t0); err != nil {
			return err
		}
		// One at a time is enough: a create is one request, the controller makes the pods.
		pl.createController(ctx, c)
	}
	return nil
}

// deleteControllers deletes the run's Jobs and Deployments with background propagation (a Job's
// default is to orphan its pods) and waits until they and the Deployments' ReplicaSets are gone,
// so that no controller makes a pod again while the workload's pods are deleted.
func deleteControllers(ctx context.Context, cs kubernetes.Interface, ns, run string) error {
	byRun := metav1.ListOptions{LabelSelector: LabelRun + "=" + run}
	bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	if err := cs.BatchV1().Jobs(ns).DeleteCollection(ctx, bg, byRun); err != nil {
		return fmt.Errorf("deleting the Jobs of run %s in %s: %w", run, ns, err)
	}
	if err := cs.AppsV1().Deployments(ns).DeleteCollection(ctx, bg, byRun); err != nil {
		return fmt.Errorf("deleting the Deployments of run %s in %s: %w", run, ns, err)
	}
	var left string
	err := waitFor(ctx, 3*time.Minute, func() bool {
		jobs, err1 := cs.BatchV1().Jobs(ns).List(ctx, byRun)
		deps, err2 := cs.AppsV1().Deployments(ns).List(ctx, byRun)
		rss, err3 := cs.AppsV1().ReplicaSets(ns).List(ctx, byRun)
		if err1 != nil || err2 != nil || err3 != nil {
			return false
		}
		left = fmt.Sprintf("%d Jobs, %d Deployments, %d ReplicaSets", len(jobs.Items), len(deps.Items), len(rss.Items))
		return len(jobs.Items)+len(deps.Items)+len(rss.Items) == 0
	})
	if err != nil {
		return fmt.Errorf("waiting for the controllers of run %s in %s to go (left: %s): %w", run, ns, left, err)
	}
	return nil
}

// leftovers counts what is left in the workload's namespace after the run deleted its workload:
// GpuClaims (a templated claim goes with its pod by the garbage collector) and pods. It waits,
// within limit, for both to reach zero, so that the count says what leaked, not what was on its
// way out.
func leftovers(ctx context.Context, cs kubernetes.Interface, gcs versioned.Interface, ns string, limit time.Duration) (claims, pods int, err error) {
	claims, pods = -1, -1
	werr := waitFor(ctx, limit, func() bool {
		cl, err1 := gcs.GpuV1().GpuClaims(ns).List(ctx, metav1.ListOptions{})
		pl, err2 := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err1 != nil || err2 != nil {
			err = fmt.Errorf("listing GpuClaims and pods in %s: %w", ns, errors.Join(err1, err2))
			return false
		}
		err = nil
		claims, pods = len(cl.Items), len(pl.Items)
		return claims == 0 && pods == 0
	})
	if claims >= 0 {
		return claims, pods, nil // counted; a count above zero is the run's figure, not an error
	}
	if err == nil {
		err = werr
	}
	return claims, pods, err
}

// waitGCKnowsClaims returns once the garbage collector deletes a GpuClaim whose owner is gone.
// kube-controller-manager's garbage collector picks up a new resource at its discovery resync,
// every 30 s; the CRDs are installed just after the control plane starts, so without this a
// short run's templated claims would outlive their pods until that resync and the leak count
// would measure the harness, not the garbage collector. On a real cluster the CRDs are there
// long before the workload. The probe is a ConfigMap and a claim it owns.
func waitGCKnowsClaims(ctx context.Context, cs kubernetes.Interface, gcs versioned.Interface, ns, run string) error {
	const name = "sim-gc-probe"
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelRun: run}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the garbage collector probe ConfigMap %s/%s: %w", ns, name, err)
	}
	claim := buildClaim(scenario.PodPlan{Name: name, Claim: scenario.ClaimSpec{Count: 1}}, ns, run)
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}}
	if _, err := gcs.GpuV1().GpuClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the garbage collector probe GpuClaim %s/%s: %w", ns, name, err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the garbage collector probe ConfigMap %s/%s: %w", ns, name, err)
	}
	err = waitFor(ctx, 2*time.Minute, func() bool {
		_, err := gcs.GpuV1().GpuClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for the garbage collector to delete GpuClaim %s/%s, whose owner is gone: %w", ns, name, err)
	}
	return nil
}
