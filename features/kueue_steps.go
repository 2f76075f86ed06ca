package features

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cucumber/godog"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
)

// The Kueue objects the steps make, in the version Kueue stores.
var (
	kueueFlavors   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	kueueCQs       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	kueueLQs       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	kueueWorkloads = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
)

// labelKueueNamespace marks the namespaces of the Kueue scenarios. There the suite's own
// webhook (which injects variables and adds no resource) is replaced by one in device-plugin
// mode, as gpu-webhook runs by default, which writes the GPU request into pods and into Jobs'
// pod templates; and Kueue's pod integration manages pods there only. The other scenarios'
// pods and Jobs stay as they are.
const labelKueueNamespace = "acceptance.gpu.scheduling/kueue"

// KueueAPIServerArgs let kube-apiserver call Kueue's webhooks through their Service: it
// resolves a webhook Service by its endpoints (the EndpointSlice launch.StartKueue writes)
// instead of dialling its ClusterIP, which nothing routes here (no kube-proxy). Our own webhooks
// are called by URL, and the suite serves no aggregated API, so nothing else changes.
var KueueAPIServerArgs = []string{"--enable-aggregator-routing=true"}

// kueueResource is the GPU resource Kueue counts, the one the device plugin serves.
const kueueResource = corev1.ResourceName("nvidia.com/gpu")

// kueueHarness is what the Kueue scenarios share: Kueue's manager and the gpu-webhook that
// writes the GPU request into Jobs' pod templates. Started by the first scenario that needs
// them, kept for the rest of the run.
type kueueHarness struct {
	kueue   *launch.Kueue
	webhook *launch.Webhook
	dyn     dynamic.Interface
}

func registerKueueSteps(sc *godog.ScenarioContext) {
	sc.Step(`^Kueue runs with its pod integration, and gpu-webhook in device-plugin mode writes the GPU requests$`, kueueRuns)
	sc.Step(`^GpuClaimTemplate "([^"]*)" for (\d+) GPUs in one island$`, createIslandTemplate) // podgroup_steps.go
	sc.Step(`^ClusterQueues "([^"]*)" and "([^"]*)" of (\d+) GPUs each in one cohort, each with a LocalQueue of its name$`, createTeamQueues)
	sc.Step(`^Job "([^"]*)" of queue "([^"]*)" runs (\d+) pods? from claim template "([^"]*)"$`, createQueuedJob)
	sc.Step(`^the pod template of Job "([^"]*)" requests (\d+) nvidia\.com/gpu$`, jobTemplateRequests)
	sc.Step(`^Kueue admits Job "([^"]*)" in ClusterQueue "([^"]*)", which borrows (\d+) GPUs$`, kueueAdmits)
	sc.Step(`^the (\d+) pods? of Job "([^"]*)" hold (\d+) GPUs each, each pod inside one island$`, jobPodsHoldIslands)
	sc.Step(`^Job "([^"]*)" waits suspended in queue "([^"]*)", without pods, Kueue saying "(.*)"$`, jobWaits)
	sc.Step(`^Kueue preempts Job "([^"]*)" to reclaim the cohort's quota$`, kueuePreempts)
	sc.Step(`^the pods of Job "([^"]*)" are gone and their GPU leases released$`, jobLeasesReleased)
	sc.Step(`^the Jobs are deleted$`, deleteJobs)
	sc.Step(`^GpuWorkload "([^"]*)" of queue "([^"]*)" is applied:$`, applyQueuedWorkload)
	sc.Step(`^Kueue admits GpuWorkload "([^"]*)" as one group of (\d+) pods in ClusterQueue "([^"]*)", counting (\d+) GPUs, which the ClusterQueue uses$`, kueueAdmitsWorkload)
	sc.Step(`^each pod of GpuWorkload "([^"]*)" requests (\d+) nvidia\.com/gpu and holds its GPUs inside one island$`, workloadPodsInIslands)
	sc.Step(`^GpuWorkload "([^"]*)" is gone, and its pods with their GPU leases$`, queuedWorkloadGone)
	sc.Step(`^GpuWorkload "([^"]*)" waits in queue "([^"]*)", its (\d+) pods gated and without GPUs, Kueue saying "(.*)"$`, workloadWaitsGated)
	sc.After(kueueCleanup)
}

// kueueRuns starts Kueue and the Job webhook once for the run, and labels the scenario's
// namespace for the webhook.
func kueueRuns(ctx context.Context) error {
	st := state(ctx)
	s := st.suite
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kueue == nil {
		k, err := launch.StartKueue(ctx, s.cluster, launch.KueueOptions{PodNamespaces: kueueNamespaces()})
		if err != nil {
			return err
		}
		w, err := launch.StartWebhook(ctx, s.cluster, launch.WebhookOptions{Name: "gpu-webhook-jobs", Namespace: LeaseNamespace,
			ResourceName: string(kueueResource), NoRegister: true})
		if err != nil {
			return err
		}
		// All of this release's webhooks, pods' and Jobs', for the Kueue scenarios' namespaces,
		// with the scheduler identity launch.StartWebhook gives the process by default.
		mwc, vwc, err := manifests.Render(manifests.Options{Name: "acceptance-kueue", Namespace: LeaseNamespace, CABundle: w.CABundle,
			URL: w.URL, JobResource: true, Scheduler: webhook.SchedulerIdentity{Users: webhook.DefaultConfig().Scheduler.Users, Groups: []string{"system:masters"}}})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(mwc.Webhooks, func(wh admissionregistrationv1.MutatingWebhook) bool { return wh.Name == manifests.JobWebhookName }) {
			return fmt.Errorf("the rendered configuration has no webhook %s", manifests.JobWebhookName)
		}
		for i := range mwc.Webhooks {
			mwc.Webhooks[i].NamespaceSelector = onlyKueueNamespaces(mwc.Webhooks[i].NamespaceSelector)
		}
		for i := range vwc.Webhooks {
			vwc.Webhooks[i].NamespaceSelector = onlyKueueNamespaces(vwc.Webhooks[i].NamespaceSelector)
		}
		if _, err := s.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("registering %s: %w", mwc.Name, err)
		}
		if _, err := s.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("registering %s: %w", vwc.Name, err)
		}
		dyn, err := dynamic.NewForConfig(s.restCfg)
		if err != nil {
			return err
		}
		s.kueue = &kueueHarness{kueue: k, webhook: w, dyn: dyn}
		go terminateDeletedKueuePods(s.kube, k.Exited())
	}
	// Every time: a scenario that re-registers the suite's webhook may have dropped it.
	if err := excludeKueueNamespaces(ctx, s.kube); err != nil {
		return err
	}
	ns, err := s.kube.CoreV1().Namespaces().Get(ctx, st.ns, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[labelKueueNamespace] = "true"
	if _, err := s.kube.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("labelling namespace %s: %w", st.ns, err)
	}
	return nil
}

// terminateDeletedKueuePods does for the pods Kueue manages what a kubelet does for a pod being
// deleted and kwok's pod-delete stage does not: it stops the containers and puts the pod in a
// terminal phase (Failed) before the pod object goes, until done closes. Kueue holds the pods
// it manages with a finalizer, which it takes off a bound pod of a group only once the pod is
// terminal; without this a deleted GpuWorkload's running pods would stay forever.
func terminateDeletedKueuePods(kube kubernetes.Interface, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-done
		cancel()
	}()
	_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "kueue.x-k8s.io/managed=true"})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.DeletionTimestamp == nil || p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason = "Terminated"
			p.Status.Message = "the pod was deleted and its containers stopped"
			// A conflict or a pod already gone is retried, or moot, at the next poll.
			_, _ = kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		}
		return false, nil
	})
}

// kueueNamespaces selects the Kueue scenarios' namespaces.
func kueueNamespaces() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{labelKueueNamespace: "true"}}
}

// onlyKueueNamespaces narrows a webhook's namespace selector to the Kueue scenarios'
// namespaces.
func onlyKueueNamespaces(sel *metav1.LabelSelector) *metav1.LabelSelector {
	if sel == nil {
		return kueueNamespaces()
	}
	sel = sel.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[labelKueueNamespace] = "true"
	return sel
}

// excludeKueueNamespaces keeps the suite's own webhooks (manifests.DefaultName) out of the Kueue
// scenarios' namespaces, where the device-plugin-mode webhook serves instead: both would
// mutate a pod, and the device-plugin one refuses the variables the suite's injects.
func excludeKueueNamespaces(ctx context.Context, kube kubernetes.Interface) error {
	excluded := func(sel *metav1.LabelSelector) (*metav1.LabelSelector, bool) {
		if sel == nil {
			sel = &metav1.LabelSelector{}
		}
		for _, r := range sel.MatchExpressions {
			if r.Key == labelKueueNamespace && r.Operator == metav1.LabelSelectorOpDoesNotExist {
				return sel, true
			}
		}
		sel = sel.DeepCopy()
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: labelKueueNamespace, Operator: metav1.LabelSelectorOpDoesNotExist})
		return sel, false
	}
	ar := kube.AdmissionregistrationV1()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := ar.MutatingWebhookConfigurations().Get(ctx, manifests.DefaultName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the suite's MutatingWebhookConfiguration: %w", err)
		}
		changed := false
		for i := range m.Webhooks {
			var done bool
			if m.Webhooks[i].NamespaceSelector, done = excluded(m.Webhooks[i].NamespaceSelector); !done {
				changed = true
			}
		}
		if changed {
			if _, err := ar.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("keeping the suite's webhook out of the Kueue namespaces: %w", err)
			}
		}
		v, err := ar.ValidatingWebhookConfigurations().Get(ctx, manifests.DefaultName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the suite's ValidatingWebhookConfiguration: %w", err)
		}
		changed = false
		for i := range v.Webhooks {
			var done bool
			if v.Webhooks[i].NamespaceSelector, done = excluded(v.Webhooks[i].NamespaceSelector); !done {
				changed = true
			}
		}
		if changed {
			if _, err := ar.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("keeping the suite's webhook out of the Kueue namespaces: %w", err)
			}
		}
		return nil
	})
}

func (st *scenario) kueueClient() (dynamic.Interface, error) {
	st.suite.mu.Lock()
	defer st.suite.mu.Unlock()
	if st.suite.kueue == nil {
		return nil, errors.New(`kueue is not running: start the scenario with "Kueue runs with its pod integration, and gpu-webhook in device-plugin mode writes the GPU requests"`)
	}
	return st.suite.kueue.dyn, nil
}

// Cluster-scoped names of the scenario's Kueue objects.
func (st *scenario) cqName(team string) string { return st.id + "-" + team }
func (st *scenario) flavorName() string        { return st.id + "-gpu" }
func (st *scenario) cohortName() string        { return st.id + "-gpus" }

// createTeamQueues makes one ResourceFlavor, two ClusterQueues in one cohort with a nominal
// quota of n GPUs each (borrowing without limit from the cohort; taking lent GPUs back by
// preempting the borrower), and a LocalQueue named after each team in the scenario's namespace.
func createTeamQueues(ctx context.Context, a, b string, n int) error {
	st := state(ctx)
	dyn, err := st.kueueClient()
	if err != nil {
		return err
	}
	create := func(gvr schema.GroupVersionResource, ns string, obj map[string]any) error {
		u := &unstructured.Unstructured{Object: obj}
		u.SetAPIVersion(gvr.GroupVersion().String())
		var err error
		if ns == "" {
			_, err = dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
		} else {
			_, err = dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return nil
	}
	if err := create(kueueFlavors, "", map[string]any{"kind": "ResourceFlavor", "metadata": map[string]any{"name": st.flavorName(), "labels": map[string]any{LabelScenario: st.id}}}); err != nil {
		return err
	}
	for _, team := range []string{a, b} {
		cq := map[string]any{
			"kind":     "ClusterQueue",
			"metadata": map[string]any{"name": st.cqName(team), "labels": map[string]any{LabelScenario: st.id}},
			"spec": map[string]any{
				"cohortName":        st.cohortName(),
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{corev1.LabelMetadataName: st.ns}},
				"preemption":        map[string]any{"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},
				"resourceGroups": []any{map[string]any{
					"coveredResources": []any{string(kueueResource)},
					"flavors": []any{map[string]any{
						"name":      st.flavorName(),
						"resources": []any{map[string]any{"name": string(kueueResource), "nominalQuota": int64(n)}},
					}},
				}},
			},
		}
		if err := create(kueueCQs, "", cq); err != nil {
			return err
		}
		lq := map[string]any{"kind": "LocalQueue", "metadata": map[string]any{"name": team, "namespace": st.ns},
			"spec": map[string]any{"clusterQueue": st.cqName(team)}}
		if err := create(kueueLQs, st.ns, lq); err != nil {
			return err
		}
	}
	// A queue takes Workloads once Kueue has it in its cache: wait for both to be active.
	return eventually(ctx, waitBound, "the ClusterQueues and LocalQueues are active", func(ctx context.Context) (bool, string, error) {
		for _, team := range []string{a, b} {
			for _, q := range []struct {
				gvr       schema.GroupVersionResource
				ns, name  string
				namespace bool
			}{{kueueCQs, "", st.cqName(team), false}, {kueueLQs, st.ns, team, true}} {
				var (
					u   *unstructured.Unstructured
					err error
				)
				if q.namespace {
					u, err = dyn.Resource(q.gvr).Namespace(q.ns).Get(ctx, q.name, metav1.GetOptions{})
				} else {
					u, err = dyn.Resource(q.gvr).Get(ctx, q.name, metav1.GetOptions{})
				}
				if err != nil {
					return false, err.Error(), nil
				}
				if c := kueueCondition(u, "Active"); c["status"] != "True" {
					return false, fmt.Sprintf("%s %s: Active %v", u.GetKind(), q.name, c), nil
				}
			}
		}
		return true, "", nil
	})
}

// kueueCondition returns the status condition of type t of a Kueue object, or nil.
func kueueCondition(u *unstructured.Unstructured, t string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == t {
			return m
		}
	}
	return nil
}

// createQueuedJob submits a Job of n pods at once from a claim template to a LocalQueue. Its
// pods run until they are deleted (Kueue's preemption, or the end of the scenario). The pod
// template asks for no GPU: the webhook writes the request from the claim template.
func createQueuedJob(ctx context.Context, name, queue string, n int, template string) error {
	st := state(ctx)
	job := st.newJob("plain", name, n, 3600, template)
	job.Labels = map[string]string{launch.KueueQueueLabel: queue}
	return st.submitJob(ctx, job)
}

func jobTemplateRequests(ctx context.Context, name string, n int) error {
	st := state(ctx)
	j, err := st.suite.kube.BatchV1().Jobs(st.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c := j.Spec.Template.Spec.Containers[0].Resources
	for kind, list := range map[string]corev1.ResourceList{"requests": c.Requests, "limits": c.Limits} {
		if q, ok := list[kueueResource]; !ok || q.Cmp(*resource.NewQuantity(int64(n), resource.DecimalSI)) != 0 {
			return fmt.Errorf("job %s: spec.template.spec.containers[0].resources.%s = %v, want %s: %d", name, kind, list, kueueResource, n)
		}
	}
	return nil
}

// workloadOf returns the Kueue Workload of a Job (owned by it).
func (st *scenario) workloadOf(ctx context.Context, job string) (*unstructured.Unstructured, error) {
	dyn, err := st.kueueClient()
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(kueueWorkloads).Namespace(st.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		for _, o := range list.Items[i].GetOwnerReferences() {
			if o.Kind == "Job" && o.Name == job {
				return &list.Items[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no Kueue Workload owned by Job %s yet", job)
}

// kueueAdmits waits until Kueue admitted the Job's Workload into the ClusterQueue (quota
// reserved and admitted), unsuspended the Job, and the ClusterQueue's status shows it borrowing
// that many GPUs from the cohort.
func kueueAdmits(ctx context.Context, job, team string, borrowed int) error {
	st := state(ctx)
	dyn, err := st.kueueClient()
	if err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("Kueue admits Job %s", job), func(ctx context.Context) (bool, string, error) {
		wl, err := st.workloadOf(ctx, job)
		if err != nil {
			return false, err.Error(), nil
		}
		if c := kueueCondition(wl, "Admitted"); c["status"] != "True" {
			return false, fmt.Sprintf("Workload %s: Admitted %v, QuotaReserved %v", wl.GetName(), c, kueueCondition(wl, "QuotaReserved")), nil
		}
		if cq, _, _ := unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue"); cq != st.cqName(team) {
			return false, fmt.Sprintf("Workload %s admitted into ClusterQueue %q, want %q", wl.GetName(), cq, st.cqName(team)), nil
		}
		j, err := st.suite.kube.BatchV1().Jobs(st.ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if ptr.Deref(j.Spec.Suspend, false) {
			return false, "Job " + job + " still suspended", nil
		}
		cq, err := dyn.Resource(kueueCQs).Get(ctx, st.cqName(team), metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		got := borrowedGPUs(cq)
		return got == int64(borrowed), fmt.Sprintf("ClusterQueue %s borrows %d GPUs, want %d", cq.GetName(), got, borrowed), nil
	})
}

// borrowedGPUs reads status.flavorsUsage[].resources[nvidia.com/gpu].borrowed of a ClusterQueue.
func borrowedGPUs(cq *unstructured.Unstructured) int64 { return flavorsUsageGPUs(cq, "borrowed") }

// usedGPUs reads status.flavorsUsage[].resources[nvidia.com/gpu].total of a ClusterQueue.
func usedGPUs(cq *unstructured.Unstructured) int64 { return flavorsUsageGPUs(cq, "total") }

// flavorsUsageGPUs sums field (total, borrowed) of the GPU resource over a ClusterQueue's
// status.flavorsUsage.
func flavorsUsageGPUs(cq *unstructured.Unstructured, field string) int64 {
	usage, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsUsage")
	var total int64
	for _, f := range usage {
		fm, _ := f.(map[string]any)
		res, _ := fm["resources"].([]any)
		for _, r := range res {
			rm, _ := r.(map[string]any)
			if rm["name"] != string(kueueResource) {
				continue
			}
			if s, ok := rm[field].(string); ok {
				if q, err := resource.ParseQuantity(s); err == nil {
					total += q.Value()
				}
			}
		}
	}
	return total
}

// jobPodsHoldIslands waits until the Job has n live pods bound with gpus GPUs each from their
// own claims (no GPU twice), then checks each pod's GPUs lie in one island and remembers the
// pods' UIDs for the later lease checks.
func jobPodsHoldIslands(ctx context.Context, n int, job string, gpus int) error {
	if err := controllerPodsHoldGPUs(ctx, n, "Job", job, gpus); err != nil {
		return err
	}
	st := state(ctx)
	pods, err := st.controllerPods(ctx, "Job", job)
	if err != nil {
		return err
	}
	for _, p := range pods {
		st.uids[p.Name] = p.UID
		if err := spanIslands(ctx, p.Name, 1); err != nil {
			return err
		}
	}
	return nil
}

// jobWaits checks that the Job stays suspended with no pods while its Workload has no quota,
// Kueue's QuotaReserved condition giving msg ({flavor} is the scenario's ResourceFlavor), and the
// LocalQueue counts it pending.
func jobWaits(ctx context.Context, job, queue, msg string) error {
	st := state(ctx)
	dyn, err := st.kueueClient()
	if err != nil {
		return err
	}
	want := strings.ReplaceAll(st.expand(msg), "{flavor}", st.flavorName())
	return eventually(ctx, waitBound, fmt.Sprintf("Job %s waits in queue %s", job, queue), func(ctx context.Context) (bool, string, error) {
		wl, err := st.workloadOf(ctx, job)
		if err != nil {
			return false, err.Error(), nil
		}
		c := kueueCondition(wl, "QuotaReserved")
		if c["status"] != "False" || c["message"] != want {
			return false, fmt.Sprintf("Workload %s: QuotaReserved %v", wl.GetName(), c), nil
		}
		j, err := st.suite.kube.BatchV1().Jobs(st.ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if !ptr.Deref(j.Spec.Suspend, false) {
			return false, "", fmt.Errorf("job %s runs although Kueue has not admitted it", job)
		}
		pods, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods.Items) > 0 {
			return false, "", fmt.Errorf("job %s has %d pods although Kueue has not admitted it", job, len(pods.Items))
		}
		lq, err := dyn.Resource(kueueLQs).Namespace(st.ns).Get(ctx, queue, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pending, _, _ := unstructured.NestedInt64(lq.Object, "status", "pendingWorkloads")
		return pending == 1, fmt.Sprintf("LocalQueue %s: %d pending workloads, want 1", queue, pending), nil
	})
}

// kueuePreempts waits until Kueue evicted the Job's Workload to reclaim quota lent within the
// cohort and suspended the Job.
func kueuePreempts(ctx context.Context, job string) error {
	st := state(ctx)
	return eventually(ctx, waitBound, fmt.Sprintf("Kueue preempts Job %s", job), func(ctx context.Context) (bool, string, error) {
		wl, err := st.workloadOf(ctx, job)
		if err != nil {
			return false, err.Error(), nil
		}
		p, e := kueueCondition(wl, "Preempted"), kueueCondition(wl, "Evicted")
		if p["status"] != "True" || p["reason"] != "InCohortReclamation" || e["reason"] != "Preempted" {
			return false, fmt.Sprintf("Workload %s: Preempted %v, Evicted %v", wl.GetName(), p, e), nil
		}
		j, err := st.suite.kube.BatchV1().Jobs(st.ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return ptr.Deref(j.Spec.Suspend, false), "Job " + job + " not suspended", nil
	})
}

// jobLeasesReleased waits until the pods of the Job (or GpuWorkload: pods named after it too)
// that were seen holding GPUs are gone and no GPU lease names one of them as its holder.
func jobLeasesReleased(ctx context.Context, job string) error {
	st := state(ctx)
	uids := map[string]string{}
	for name, uid := range st.uids {
		if strings.HasPrefix(name, job+"-") {
			uids[string(uid)] = name
		}
	}
	if len(uids) == 0 {
		return fmt.Errorf("no pod of %s was seen holding GPUs", job)
	}
	return eventually(ctx, waitBound, fmt.Sprintf("the pods of %s are gone and their leases released", job), func(ctx context.Context) (bool, string, error) {
		for uid, name := range uids {
			p, err := st.suite.kube.CoreV1().Pods(st.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.UID == types.UID(uid) {
				return false, "pod " + name + " still exists", nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error(), nil
			}
		}
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range leases {
			for _, h := range holders(&leases[i]) {
				if name, ok := uids[h]; ok {
					return false, fmt.Sprintf("lease %s still held by %s (%s)", leases[i].Name, name, h), nil
				}
			}
		}
		return true, "", nil
	})
}

func deleteJobs(ctx context.Context) error {
	st := state(ctx)
	err := st.suite.kube.BatchV1().Jobs(st.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("deleting the Jobs of %s: %w", st.ns, err)
	}
	return nil
}

// kueueCleanup deletes the scenario's cluster-scoped Kueue objects (the namespace takes the
// LocalQueues and Workloads with it). Kueue's finalizers hold them until no Workload uses them;
// nothing later waits for that.
func kueueCleanup(ctx context.Context, _ *godog.Scenario, _ error) (context.Context, error) {
	st, ok := ctx.Value(scenarioKey{}).(*scenario)
	if !ok {
		return ctx, nil
	}
	st.suite.mu.Lock()
	h := st.suite.kueue
	st.suite.mu.Unlock()
	if h == nil {
		return ctx, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var errs []error
	sel := metav1.ListOptions{LabelSelector: LabelScenario + "=" + st.id}
	for _, gvr := range []schema.GroupVersionResource{kueueCQs, kueueFlavors} {
		if err := h.dyn.Resource(gvr).DeleteCollection(cctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting the scenario's %s: %w", gvr.Resource, err))
		}
	}
	return ctx, errors.Join(errs...)
}

// applyQueuedWorkload creates a GpuWorkload (its spec as applyWorkload reads it) labelled with
// Kueue's queue label: the label goes on the GpuWorkload, and gpu-controller puts its pods in
// that queue as one pod group.
func applyQueuedWorkload(ctx context.Context, name, queue string, doc *godog.DocString) error {
	st := state(ctx)
	gw, err := st.workloadObject(name, doc.Content)
	if err != nil {
		return err
	}
	gw.Labels = map[string]string{launch.KueueQueueLabel: queue}
	if _, err := st.suite.gpu.GpuV1().GpuWorkloads(st.ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating GpuWorkload %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// kueueWorkloadOfGpuWorkload returns the Kueue Workload of a GpuWorkload's pod group (Kueue
// names it after the group its pods carry) and the GpuWorkload's live pods.
func (st *scenario) kueueWorkloadOfGpuWorkload(ctx context.Context, name string) (*unstructured.Unstructured, []corev1.Pod, error) {
	dyn, err := st.kueueClient()
	if err != nil {
		return nil, nil, err
	}
	pods, err := st.workloadPods(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || !live(&p) })
	if len(pods) == 0 {
		return nil, nil, fmt.Errorf("GpuWorkload %s has no live pods yet", name)
	}
	group := pods[0].Labels[kueuePodGroupLabel]
	if group == "" {
		return nil, nil, fmt.Errorf("pod %s of GpuWorkload %s has no %s label", pods[0].Name, name, kueuePodGroupLabel)
	}
	for _, p := range pods {
		if p.Labels[kueuePodGroupLabel] != group {
			return nil, nil, fmt.Errorf("pods %s and %s of GpuWorkload %s are in different pod groups %q and %q", pods[0].Name, p.Name, name, group, p.Labels[kueuePodGroupLabel])
		}
	}
	wl, err := dyn.Resource(kueueWorkloads).Namespace(st.ns).Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		return nil, pods, fmt.Errorf("kueue Workload %s of GpuWorkload %s: %w", group, name, err)
	}
	return wl, pods, nil
}

// kueuePodGroupLabel is the label of Kueue's pod groups, which gpu-controller sets.
const kueuePodGroupLabel = "kueue.x-k8s.io/pod-group-name"

// kueueAdmissionGate is the scheduling gate Kueue's pod webhook puts on the pods it queues.
const kueueAdmissionGate = "kueue.x-k8s.io/admission"

// kueueAdmitsWorkload waits until Kueue admitted the GpuWorkload's pod group as one Workload of
// n pods into the ClusterQueue, with gpus GPUs of usage in its admission, and the ClusterQueue's
// status counting that many GPUs in use.
func kueueAdmitsWorkload(ctx context.Context, name string, n int, team string, gpus int) error {
	st := state(ctx)
	dyn, err := st.kueueClient()
	if err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("Kueue admits GpuWorkload %s", name), func(ctx context.Context) (bool, string, error) {
		wl, _, err := st.kueueWorkloadOfGpuWorkload(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		if c := kueueCondition(wl, "Admitted"); c["status"] != "True" {
			return false, fmt.Sprintf("Workload %s: Admitted %v, QuotaReserved %v", wl.GetName(), c, kueueCondition(wl, "QuotaReserved")), nil
		}
		if cq, _, _ := unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue"); cq != st.cqName(team) {
			return false, fmt.Sprintf("Workload %s admitted into ClusterQueue %q, want %q", wl.GetName(), cq, st.cqName(team)), nil
		}
		count, usage := admittedUsage(wl)
		if count != int64(n) || usage != int64(gpus) {
			return false, "", fmt.Errorf("workload %s admitted %d pods using %d %s, want %d pods using %d", wl.GetName(), count, usage, kueueResource, n, gpus)
		}
		cq, err := dyn.Resource(kueueCQs).Get(ctx, st.cqName(team), metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		got := usedGPUs(cq)
		return got == int64(gpus), fmt.Sprintf("ClusterQueue %s uses %d GPUs, want %d", cq.GetName(), got, gpus), nil
	})
}

// admittedUsage sums the pod counts and the GPU usage of a Workload's admission
// (status.admission.podSetAssignments[]).
func admittedUsage(wl *unstructured.Unstructured) (count, gpus int64) {
	as, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	for _, a := range as {
		am, _ := a.(map[string]any)
		if c, ok := am["count"].(int64); ok {
			count += c
		}
		usage, _ := am["resourceUsage"].(map[string]any)
		if s, ok := usage[string(kueueResource)].(string); ok {
			if q, err := resource.ParseQuantity(s); err == nil {
				gpus += q.Value()
			}
		}
	}
	return count, gpus
}

// workloadPodsInIslands checks that every pod of the GpuWorkload asks for gpus of the device
// plugin's resource (what Kueue counted) and that its GPUs lie in one island.
func workloadPodsInIslands(ctx context.Context, name string, gpus int) error {
	st := state(ctx)
	pods, err := st.workloadPods(ctx, name)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("GpuWorkload %s has no pods", name)
	}
	for _, p := range pods {
		q := p.Spec.Containers[0].Resources.Requests[kueueResource]
		if q.Value() != int64(gpus) {
			return fmt.Errorf("pod %s requests %s %s, want %d", p.Name, q.String(), kueueResource, gpus)
		}
		st.uids[p.Name] = p.UID
		if err := spanIslands(ctx, p.Name, 1); err != nil {
			return err
		}
	}
	return nil
}

// workloadWaitsGated checks that the GpuWorkload's n pods exist, held by Kueue's scheduling gate,
// unbound and holding no lease, while their Workload has no quota, Kueue's QuotaReserved
// condition giving msg ({flavor} is the scenario's ResourceFlavor, {podset} the Workload's pod
// set, which Kueue names after a hash of the pods' spec), and the LocalQueue counts it pending.
func workloadWaitsGated(ctx context.Context, name, queue string, n int, msg string) error {
	st := state(ctx)
	dyn, err := st.kueueClient()
	if err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("GpuWorkload %s waits in queue %s", name, queue), func(ctx context.Context) (bool, string, error) {
		wl, pods, err := st.kueueWorkloadOfGpuWorkload(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		podSets, _, _ := unstructured.NestedSlice(wl.Object, "spec", "podSets")
		if len(podSets) != 1 {
			return false, fmt.Sprintf("Workload %s has %d pod sets, want 1", wl.GetName(), len(podSets)), nil
		}
		ps, _ := podSets[0].(map[string]any)
		podSet, _ := ps["name"].(string)
		want := strings.NewReplacer("{flavor}", st.flavorName(), "{podset}", podSet).Replace(st.expand(msg))
		c := kueueCondition(wl, "QuotaReserved")
		if c["status"] != "False" || c["message"] != want {
			return false, fmt.Sprintf("Workload %s: QuotaReserved %v, want the message %q", wl.GetName(), c, want), nil
		}
		if len(pods) != n {
			return false, fmt.Sprintf("GpuWorkload %s has %d live pods, want %d", name, len(pods), n), nil
		}
		uids := map[string]string{}
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				return false, "", fmt.Errorf("pod %s is bound to %s although Kueue has not admitted it", p.Name, p.Spec.NodeName)
			}
			if !slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == kueueAdmissionGate }) {
				return false, fmt.Sprintf("pod %s has no %s scheduling gate: %v", p.Name, kueueAdmissionGate, p.Spec.SchedulingGates), nil
			}
			uids[string(p.UID)] = p.Name
		}
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range leases {
			for _, h := range holders(&leases[i]) {
				if pod, ok := uids[h]; ok {
					return false, "", fmt.Errorf("lease %s is held by pod %s, which Kueue has not admitted", leases[i].Name, pod)
				}
			}
		}
		lq, err := dyn.Resource(kueueLQs).Namespace(st.ns).Get(ctx, queue, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pending, _, _ := unstructured.NestedInt64(lq.Object, "status", "pendingWorkloads")
		return pending == 1, fmt.Sprintf("LocalQueue %s: %d pending workloads, want 1", queue, pending), nil
	})
}

// queuedWorkloadGone waits until the GpuWorkload is gone (Kueue let its pods go) and the pods
// seen holding GPUs are gone with their leases; other workloads' pods and leases may stay.
func queuedWorkloadGone(ctx context.Context, name string) error {
	st := state(ctx)
	err := eventually(ctx, waitBound, fmt.Sprintf("GpuWorkload %s gone", name), func(ctx context.Context) (bool, string, error) {
		gw, err := st.getWorkload(ctx, name)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return false, "still there\n" + st.describeWorkload(ctx, gw), nil
	})
	if err != nil {
		return err
	}
	return jobLeasesReleased(ctx, name)
}
