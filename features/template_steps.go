package features

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cucumber/godog"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// Steps about GpuClaimTemplates: pods, Jobs and Deployments that name one, and the claims the
// gpu-controller makes for their pods.
func registerTemplateSteps(sc *godog.ScenarioContext) {
	sc.Step(`^GpuClaimTemplate "([^"]*)" for (\d+) GPUs?(?: is created)?$`, createTemplate)
	sc.Step(`^GpuClaimTemplate "([^"]*)" for (\d+) GPUs? in a gang of (\d+)$`, createGangTemplate)
	sc.Step(`^GpuClaimTemplate "([^"]*)" for a Shared GPU with (\d+) % of its memory$`, createSharedTemplate)
	sc.Step(`^no pod of Job "([^"]*)" is bound$`, noJobPodBound)
	sc.Step(`^pod "([^"]*)" uses claim template "([^"]*)"$`, podUsesTemplate)
	sc.Step(`^pod "([^"]*)" has a GpuClaim made from template "([^"]*)" that it owns$`, podOwnsTemplateClaim)
	sc.Step(`^the GpuClaim of pod "([^"]*)" from template "([^"]*)" is gone$`, templateClaimGone)
	sc.Step(`^pod "([^"]*)" has a Warning event "([^"]*)" saying "(.*)"$`, podWarning)
	sc.Step(`^(indexed|plain) Job "([^"]*)" runs (\d+) pods? at once for (\d+) seconds? each from claim template "([^"]*)"$`, createJob)
	sc.Step(`^Job "([^"]*)" succeeds$`, jobSucceeds)
	sc.Step(`^Deployment "([^"]*)" runs (\d+) pods? from claim template "([^"]*)"$`, createDeployment)
	sc.Step(`^Deployment "([^"]*)" is rolled out again$`, rolloutDeployment)
	sc.Step(`^StatefulSet "([^"]*)" runs (\d+) pods? from claim template "([^"]*)"$`, createStatefulSet)
	sc.Step(`^StatefulSet "([^"]*)" is scaled to (\d+)$`, scaleStatefulSet)
	sc.Step(`^pod "([^"]*)" is deleted by hand and made again with a GpuClaim of its own from template "([^"]*)"$`, podRemade)
	sc.Step(`^the (\d+) live pods of (Job|Deployment|StatefulSet) "([^"]*)" hold (\d+) GPUs? each from claims they own$`, controllerPodsHoldGPUs)
	sc.Step(`^the (\d+) live pods of (Job|Deployment|StatefulSet) "([^"]*)" share (\d+) GPUs? each from claims they own$`, controllerPodsShareGPUs)
	sc.Step(`^every GpuClaim left belongs to a live pod$`, claimsBelongToLivePods)
	sc.Step(`^GpuClaimTemplate "([^"]*)" is deleted$`, deleteTemplate)
	sc.Step(`^every pod bound before GpuClaimTemplate "([^"]*)" was deleted still runs on the same GPUs with the same claim$`, podsKeptAfterTemplateDelete)
}

func createTemplate(ctx context.Context, name string, n int) error {
	return createTemplateGang(ctx, name, n, 0)
}

// createGangTemplate makes a template whose claims form the gang named after the template.
func createGangTemplate(ctx context.Context, name string, n, size int) error {
	return createTemplateGang(ctx, name, n, size)
}

func createTemplateGang(ctx context.Context, name string, n, gangSize int) error {
	t := scenarioTemplate(ctx, name, apiv1.DeviceRequest{Count: int32(n)})
	if gangSize > 0 {
		t.Spec.Spec.GangRef = name
		t.Spec.Spec.GangSize = ptr.To(int32(gangSize))
	}
	return createTemplateObject(ctx, t)
}

// createSharedTemplate makes a template of a Shared claim of one GPU with percent of its memory.
func createSharedTemplate(ctx context.Context, name string, percent int) error {
	return createTemplateObject(ctx, scenarioTemplate(ctx, name, apiv1.DeviceRequest{
		Count: 1, Exclusivity: apiv1.Shared, Share: &apiv1.GPUShare{MemoryPercent: int32(percent)}}))
}

// scenarioTemplate is a template of devices on the scenario's nodes, its claims labelled made-from.
func scenarioTemplate(ctx context.Context, name string, devices apiv1.DeviceRequest) *apiv1.GpuClaimTemplate {
	st := state(ctx)
	return &apiv1.GpuClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns},
		Spec: apiv1.GpuClaimTemplateSpec{
			Metadata: apiv1.ClaimTemplateMetadata{Labels: map[string]string{"made-from": name}},
			Spec: apiv1.GpuClaimSpec{
				Devices:  devices,
				Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{LabelScenario: st.id}},
			},
		},
	}
}

func createTemplateObject(ctx context.Context, t *apiv1.GpuClaimTemplate) error {
	st := state(ctx)
	name := t.Name
	if _, err := st.suite.gpu.GpuV1().GpuClaimTemplates(st.ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating GpuClaimTemplate %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// templatePodSpec is the pod template a controller stamps out: our scheduler, kwok's taint
// tolerated, a short grace period.
func templatePodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		SchedulerName:                 apiv1.SchedulerName,
		Containers:                    []corev1.Container{{Name: "main", Image: "registry.example/cuda:fake"}},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Tolerations:                   []corev1.Toleration{{Key: "type", Operator: corev1.TolerationOpExists}},
	}
}

func podUsesTemplate(ctx context.Context, name, template string) error {
	st := state(ctx)
	pod := st.newPod(name, "", podOptions{})
	delete(pod.Annotations, apiv1.AnnotationClaim)
	pod.Annotations[apiv1.AnnotationClaimTemplate] = template
	return st.createPod(ctx, pod)
}

// checkOwnedClaim checks that pod has the claim made from template, owned by it.
func (st *scenario) checkOwnedClaim(ctx context.Context, pod *corev1.Pod, template string) (bool, string, error) {
	name, err := apiv1.ClaimNameForPod(pod.Name, template)
	if err != nil {
		return false, "", err
	}
	c, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Sprintf("GpuClaim %s: %v", name, err), nil
	}
	ref := metav1.GetControllerOf(c)
	if ref == nil || ref.Kind != "Pod" || ref.UID != pod.UID || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		return false, "", fmt.Errorf("GpuClaim %s is not controlled by pod %s (UID %s): owners %+v", name, pod.Name, pod.UID, c.OwnerReferences)
	}
	if c.Labels["made-from"] != template {
		return false, "", fmt.Errorf("GpuClaim %s has labels %v, want the template's made-from=%s", name, c.Labels, template)
	}
	return true, "", nil
}

func podOwnsTemplateClaim(ctx context.Context, podName, template string) error {
	st := state(ctx)
	return eventually(ctx, waitBound, fmt.Sprintf("pod %s owns the GpuClaim made from template %s", podName, template), func(ctx context.Context) (bool, string, error) {
		pod, err := st.getPod(ctx, podName)
		if err != nil {
			return false, err.Error(), nil
		}
		return st.checkOwnedClaim(ctx, pod, template)
	})
}

func templateClaimGone(ctx context.Context, podName, template string) error {
	st := state(ctx)
	name, err := apiv1.ClaimNameForPod(podName, template)
	if err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("GpuClaim %s is deleted by the garbage collector", name), func(ctx context.Context) (bool, string, error) {
		_, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, fmt.Sprintf("GpuClaim %s: err %v", name, err), nil
	})
}

func podWarning(ctx context.Context, podName, reason, msg string) error {
	st := state(ctx)
	msg = st.expand(msg)
	return eventually(ctx, waitBound, fmt.Sprintf("pod %s has a Warning event %s saying %q", podName, reason, msg), func(ctx context.Context) (bool, string, error) {
		list, err := st.suite.kube.EventsV1().Events(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind != "Pod" || e.Regarding.Name != podName {
				continue
			}
			if e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Note, msg) {
				return true, "", nil
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
		}
		return false, "events: " + strings.Join(seen, "\n"), nil
	})
}

func createJob(ctx context.Context, indexed, name string, n, seconds int, template string) error {
	return state(ctx).createJob(ctx, indexed, name, n, seconds, template, nil)
}

// createJob makes a Job of n pods at once from a claim template; extra annotations go on its
// pod template.
func (st *scenario) createJob(ctx context.Context, indexed, name string, n, seconds int, template string, extra map[string]string) error {
	job := st.newJob(indexed, name, n, seconds, template)
	maps.Copy(job.Spec.Template.Annotations, extra)
	return st.submitJob(ctx, job)
}

// newJob is a Job of n pods at once from a claim template, each running for seconds.
func (st *scenario) newJob(indexed, name string, n, seconds int, template string) *batchv1.Job {
	mode := batchv1.NonIndexedCompletion
	if indexed == "indexed" {
		mode = batchv1.IndexedCompletion
	}
	spec := templatePodSpec()
	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns},
		Spec: batchv1.JobSpec{
			Completions:    ptr.To(int32(n)),
			Parallelism:    ptr.To(int32(n)),
			CompletionMode: &mode,
			BackoffLimit:   ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
					apiv1.AnnotationClaimTemplate: template,
					cluster.AnnotationDuration:    fmt.Sprintf("%ds", seconds),
				}},
				Spec: spec,
			},
		},
	}
	return job
}

func (st *scenario) submitJob(ctx context.Context, job *batchv1.Job) error {
	if _, err := st.suite.kube.BatchV1().Jobs(st.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Job %s/%s: %w", st.ns, job.Name, err)
	}
	return nil
}

func jobSucceeds(ctx context.Context, name string) error {
	st := state(ctx)
	return eventually(ctx, waitSlow, fmt.Sprintf("Job %s succeeds", name), func(ctx context.Context) (bool, string, error) {
		j, err := st.suite.kube.BatchV1().Jobs(st.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if j.Status.Failed > 0 {
			return false, "", fmt.Errorf("the Job %s has %d failed pods", name, j.Status.Failed)
		}
		return j.Spec.Completions != nil && j.Status.Succeeded == *j.Spec.Completions,
			fmt.Sprintf("succeeded %d active %d\n%s", j.Status.Succeeded, j.Status.Active, st.describe(ctx)), nil
	})
}

func createDeployment(ctx context.Context, name string, n int, template string) error {
	st := state(ctx)
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// One pod at a time goes away before its successor comes: the GPUs are few.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: map[string]string{apiv1.AnnotationClaimTemplate: template}},
				Spec:       templatePodSpec(),
			},
		},
	}
	if _, err := st.suite.kube.AppsV1().Deployments(st.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Deployment %s/%s: %w", st.ns, name, err)
	}
	return nil
}

func rolloutDeployment(ctx context.Context, name string) error {
	st := state(ctx)
	// The Deployment controller writes the object too (its status): retry on a conflict, as
	// kubectl does.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := st.suite.kube.AppsV1().Deployments(st.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations["rollout"] = "2"
		_, err = st.suite.kube.AppsV1().Deployments(st.ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
}

// controllerPods lists the live pods of a Job or a Deployment.
func (st *scenario) controllerPods(ctx context.Context, kind, name string) ([]corev1.Pod, error) {
	sel := "app=" + name // Deployments and StatefulSets
	if kind == "Job" {
		sel = batchv1.JobNameLabel + "=" + name
	}
	list, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || !live(&p) }), nil
}

// controllerPodsHoldGPUs waits until the controller has n live pods, each bound with n GPUs from
// the claim made for it from its template, and no two holding the same GPU. For a rollout the
// pods must also all come from the newest pod template.
func controllerPodsHoldGPUs(ctx context.Context, n int, kind, name string, gpus int) error {
	return controllerPodsHold(ctx, n, kind, name, gpus, false)
}

// controllerPodsShareGPUs is controllerPodsHoldGPUs for pods of a Shared template: several may
// hold one GPU, and each carries the share its own claim states.
func controllerPodsShareGPUs(ctx context.Context, n int, kind, name string, gpus int) error {
	return controllerPodsHold(ctx, n, kind, name, gpus, true)
}

func controllerPodsHold(ctx context.Context, n int, kind, name string, gpus int, shared bool) error {
	st := state(ctx)
	return eventually(ctx, waitSlow, fmt.Sprintf("%d pods of %s %s hold %d GPUs each", n, kind, name, gpus), func(ctx context.Context) (bool, string, error) {
		pods, err := st.controllerPods(ctx, kind, name)
		if err != nil {
			return false, err.Error(), nil
		}
		var want map[string]string // the annotations of the newest pod template
		switch kind {
		case "Deployment":
			d, err := st.suite.kube.AppsV1().Deployments(st.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			if d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != int32(n) || d.Status.Replicas != int32(n) {
				return false, fmt.Sprintf("Deployment: generation %d observed %d, %d replicas, %d updated", d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas), nil
			}
			want = d.Spec.Template.Annotations
		case "StatefulSet":
			s, err := st.suite.kube.AppsV1().StatefulSets(st.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			if s.Status.ObservedGeneration != s.Generation || s.Status.Replicas != int32(n) {
				return false, fmt.Sprintf("StatefulSet: generation %d observed %d, %d replicas", s.Generation, s.Status.ObservedGeneration, s.Status.Replicas), nil
			}
		}
		if len(pods) != n {
			return false, fmt.Sprintf("%d live pods\n%s", len(pods), st.describe(ctx)), nil
		}
		seen := map[string]string{}
		for i := range pods {
			p := &pods[i]
			for k, v := range want {
				if p.Annotations[k] != v {
					return false, fmt.Sprintf("pod %s is from an older pod template (%s=%q)", p.Name, k, p.Annotations[k]), nil
				}
			}
			if p.Spec.NodeName == "" {
				return false, "pod " + p.Name + " not bound\n" + st.describe(ctx), nil
			}
			if ok, why, err := st.checkOwnedClaim(ctx, p, p.Annotations[apiv1.AnnotationClaimTemplate]); !ok {
				return false, why, err
			}
			a, err := allocationOf(p)
			if err != nil {
				return false, err.Error(), nil
			}
			if len(a.IDs) != gpus {
				return false, "", fmt.Errorf("pod %s holds %s, want %d GPUs", p.Name, a, gpus)
			}
			if shared {
				if _, ok := p.Annotations[apiv1.AnnotationShare]; !ok {
					return false, "", fmt.Errorf("pod %s of a Shared template has no %s annotation", p.Name, apiv1.AnnotationShare)
				}
				continue
			}
			for _, id := range a.IDs {
				k := fmt.Sprintf("%s/%d", a.Node, id)
				if other, dup := seen[k]; dup {
					return false, "", fmt.Errorf("GPU %s is held by both %s and %s", k, other, p.Name)
				}
				seen[k] = p.Name
			}
		}
		return true, "", nil
	})
}

// claimsBelongToLivePods waits until every GpuClaim of the namespace is owned by a pod that
// exists: the garbage collector removed the claims of the pods that went away.
func claimsBelongToLivePods(ctx context.Context) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "every GpuClaim belongs to a live pod", func(ctx context.Context) (bool, string, error) {
		claims, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pods, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		uids := map[string]bool{}
		for _, p := range pods.Items {
			uids[string(p.UID)] = true
		}
		for _, c := range claims.Items {
			ref := metav1.GetControllerOf(&c)
			if ref == nil || !uids[string(ref.UID)] {
				return false, "GpuClaim " + c.Name + " has no live owner", nil
			}
		}
		return true, "", nil
	})
}

// deletePodControllers deletes the Jobs, Deployments and StatefulSets of the scenario, so that
// they make no more pods while the cleanup deletes them.
func (st *scenario) deletePodControllers(ctx context.Context) error {
	bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	var errs []error
	for what, del := range map[string]func() error{
		"Jobs": func() error {
			return st.suite.kube.BatchV1().Jobs(st.ns).DeleteCollection(ctx, bg, metav1.ListOptions{})
		},
		"Deployments": func() error {
			return st.suite.kube.AppsV1().Deployments(st.ns).DeleteCollection(ctx, bg, metav1.ListOptions{})
		},
		"StatefulSets": func() error {
			return st.suite.kube.AppsV1().StatefulSets(st.ns).DeleteCollection(ctx, bg, metav1.ListOptions{})
		},
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting the %s of namespace %s: %w", what, st.ns, err))
		}
	}
	return errors.Join(errs...)
}

// podClaimName is the claim a pod uses: the one it names, or the one made for it from the
// template it names.
func podClaimName(pod *corev1.Pod) string {
	if name, ok := pod.Annotations[apiv1.AnnotationClaim]; ok {
		return name
	}
	if t, ok := pod.Annotations[apiv1.AnnotationClaimTemplate]; ok {
		name, _ := apiv1.ClaimNameForPod(pod.Name, t)
		return name
	}
	return ""
}

func createStatefulSet(ctx context.Context, name string, n int, template string) error {
	return state(ctx).createStatefulSet(ctx, name, n, template, nil)
}

// createStatefulSet makes a StatefulSet of n pods (started in parallel) from a claim template;
// extra annotations go on its pod template.
func (st *scenario) createStatefulSet(ctx context.Context, name string, n int, template string, extra map[string]string) error {
	labels := map[string]string{"app": name}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(n)),
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: map[string]string{apiv1.AnnotationClaimTemplate: template}},
				Spec:       templatePodSpec(),
			},
		},
	}
	maps.Copy(s.Spec.Template.Annotations, extra)
	if _, err := st.suite.kube.AppsV1().StatefulSets(st.ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating StatefulSet %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// scaleStatefulSet sets the replicas, read afresh on a conflict: the StatefulSet controller
// writes the object's status at the same time, as any user's kubectl scale races it.
func scaleStatefulSet(ctx context.Context, name string, n int) error {
	st := state(ctx)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := st.suite.kube.AppsV1().StatefulSets(st.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = ptr.To(int32(n))
		_, err = st.suite.kube.AppsV1().StatefulSets(st.ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
}

// podRemade deletes a controller's pod and waits for its successor of the same name to be
// bound with a claim of its own (the claim of the deleted pod has the same name: it must be
// deleted by the garbage collector and made again, never shared).
func podRemade(ctx context.Context, name, template string) error {
	st := state(ctx)
	old, err := st.getPod(ctx, name)
	if err != nil {
		return err
	}
	if err := st.suite.kube.CoreV1().Pods(st.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	return eventually(ctx, waitSlow, "pod "+name+" made again with a claim of its own", func(ctx context.Context) (bool, string, error) {
		p, err := st.getPod(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		if p.UID == old.UID || p.Spec.NodeName == "" {
			return false, "pod " + name + " not yet made again and bound\n" + st.describe(ctx), nil
		}
		if _, err := allocationOf(p); err != nil {
			return false, err.Error(), nil
		}
		return st.checkOwnedClaim(ctx, p, template)
	})
}

// noJobPodBound waits until the Job has its pods, each with its claim, and checks none is bound
// (a gang that cannot be placed whole places nobody).
func noJobPodBound(ctx context.Context, name string) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "the pods of Job "+name+" exist with their claims, none bound", func(ctx context.Context) (bool, string, error) {
		j, err := st.suite.kube.BatchV1().Jobs(st.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pods, err := st.controllerPods(ctx, "Job", name)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods) != int(*j.Spec.Parallelism) {
			return false, fmt.Sprintf("%d pods", len(pods)), nil
		}
		for i := range pods {
			if pods[i].Spec.NodeName != "" {
				return false, "", fmt.Errorf("pod %s of the gang was bound alone to %s", pods[i].Name, pods[i].Spec.NodeName)
			}
			if ok, why, err := st.checkOwnedClaim(ctx, &pods[i], pods[i].Annotations[apiv1.AnnotationClaimTemplate]); !ok {
				return false, why, err
			}
			// The scheduler has tried and held it back as part of the gang.
			held := false
			for _, c := range pods[i].Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "gang") {
					held = true
				}
			}
			if !held {
				return false, "pod " + pods[i].Name + " not yet held back as a gang member\n" + st.describe(ctx), nil
			}
		}
		return true, "", nil
	})
}

// boundPods describes the bound, live pods of the namespace: UID -> "name allocation claim-UID".
func (st *scenario) boundPods(ctx context.Context) (map[types.UID]string, error) {
	pods, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[types.UID]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || !live(p) {
			continue
		}
		claim := podClaimName(p)
		c, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("GpuClaim %s of pod %s: %w", claim, p.Name, err)
		}
		out[p.UID] = fmt.Sprintf("%s %s %s", p.Name, p.Annotations[apiv1.AnnotationAllocated], c.UID)
	}
	return out, nil
}

// deleteTemplate remembers the bound pods, then deletes the template.
func deleteTemplate(ctx context.Context, name string) error {
	st := state(ctx)
	before, err := st.boundPods(ctx)
	if err != nil {
		return err
	}
	if len(before) == 0 {
		return fmt.Errorf("no pod is bound before GpuClaimTemplate %s is deleted; the step has nothing to protect", name)
	}
	if st.beforeTemplateDelete == nil {
		st.beforeTemplateDelete = map[string]map[types.UID]string{}
	}
	st.beforeTemplateDelete[name] = before
	if err := st.suite.gpu.GpuV1().GpuClaimTemplates(st.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting GpuClaimTemplate %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// podsKeptAfterTemplateDelete checks that every pod bound when the template was deleted is the
// same pod, on the same GPUs, with the same claim object: a template going away changes nothing
// for the pods already made from it. It is meant to run once the controller has shown that it
// saw the template go (a later pod's ClaimTemplateNotFound event).
func podsKeptAfterTemplateDelete(ctx context.Context, name string) error {
	st := state(ctx)
	before, ok := st.beforeTemplateDelete[name]
	if !ok {
		return fmt.Errorf("GpuClaimTemplate %s was not deleted by a step of this scenario", name)
	}
	now, err := st.boundPods(ctx)
	if err != nil {
		return err
	}
	for uid, was := range before {
		if is, ok := now[uid]; !ok || is != was {
			return fmt.Errorf("pod %s (UID %s) changed after GpuClaimTemplate %s was deleted: was %q, now %q\n%s", strings.Fields(was)[0], uid, name, was, is, st.describe(ctx))
		}
	}
	return nil
}
