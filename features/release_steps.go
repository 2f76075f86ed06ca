package features

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// LabelRelease puts a scenario's node into the pool of one release (@two-schedulers): only
// that release's agent fleet serves it, as a DaemonSet's node selector would. The suite's own
// fleet leaves such nodes alone.
const LabelRelease = "acceptance.gpu.scheduling/release"

// release is a second installation of the chart that a scenario runs beside the suite's own:
// its own scheduler name, lease namespace, node pool, gpu-scheduler process and node agents.
type release struct {
	// name is the release's scheduler name (--scheduler-name).
	name string
	// ns is its namespace: it holds the release's GPU leases.
	ns string
	// pool is the value of LabelRelease on its nodes (its agents' node selector).
	pool  string
	nodes []string
	fleet *agentFleet
}

// Steps about releases with their own scheduler names side by side.
func registerReleaseSteps(sc *godog.ScenarioContext) {
	sc.Step(`^release "([^"]*)" with (\d+) "([^"]*)" nodes?$`, startRelease)
	sc.Step(`^pod "([^"]*)" of scheduler "([^"]*)" claims (\d+) GPUs?$`, podOfScheduler)
	sc.Step(`^(\d+) pods of scheduler "([^"]*)" each claim (\d+) GPUs?$`, podsOfScheduler)
	sc.Step(`^every pod is bound by its own scheduler onto a node of its release$`, everyPodBoundByItsScheduler)
	sc.Step(`^pod "([^"]*)" is bound by scheduler "([^"]*)" onto a node of release "([^"]*)"$`, podBoundByScheduler)
	sc.Step(`^scheduler "([^"]*)" reports pod "([^"]*)" unschedulable$`, schedulerReportsUnschedulable)
	sc.Step(`^release "([^"]*)" holds no GPU lease$`, releaseHoldsNoLease)
	sc.Step(`^the GPU leases of each release lie in its own namespace and are held by its own pods$`, leasesPerRelease)
	sc.Step(`^the status of every claim was written by its own scheduler alone$`, claimsWrittenByOwnScheduler)
	sc.Step(`^the agents of each release publish its nodes for its scheduler and report its pods' GPUs in use$`, agentsPerRelease)
}

// startRelease starts a release: its namespace, an agent fleet for the nodes labelled with its
// pool, a gpu-scheduler process with its scheduler name and lease namespace, and its nodes.
func startRelease(ctx context.Context, name string, n int, topology string) error {
	st := state(ctx)
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("release %q: not a DNS label: %v", name, errs)
	}
	if name == apiv1.SchedulerName {
		return fmt.Errorf("release %q: the suite's own release already has that scheduler name", name)
	}
	if _, ok := st.releases[name]; ok {
		return fmt.Errorf("release %q is already running", name)
	}
	s := st.suite
	rel := &release{name: name, ns: st.id + "-" + name, pool: st.id + "-" + name}
	if err := s.ensureNamespace(ctx, rel.ns); err != nil {
		return err
	}
	st.releases[name] = rel // cleanup stops what is started from here on, and deletes rel.ns
	timings := agentTimings
	timings.SchedulerName = name
	var err error
	rel.fleet, err = startFleet(ctx, fleet.Config{
		KubeClient: s.kube, GPUClient: s.gpu, LeaseNamespace: rel.ns, Agent: timings,
		EventWaitTimeout: 200 * time.Millisecond, NodeSelector: LabelRelease + "=" + rel.pool,
	}, "fleet-"+name)
	if err != nil {
		return fmt.Errorf("release %s: starting its agents: %w", name, err)
	}
	sched, err := launch.StartScheduler(ctx, s.cluster, launch.SchedulerOptions{
		Name: rel.pool + "-gpu-scheduler", LeaseNamespace: rel.ns, SchedulerName: name,
	})
	if err != nil {
		return fmt.Errorf("release %s: starting its gpu-scheduler: %w", name, err)
	}
	st.schedulers = append(st.schedulers, sched)
	before := len(st.nodes)
	if err := st.addNodesServedBy(ctx, n, topology, map[string]string{LabelRelease: rel.pool}, rel.fleet); err != nil {
		return err
	}
	rel.nodes = slices.Clone(st.nodes[before:])
	for _, node := range rel.nodes {
		if err := st.waitLabelled(ctx, node, name); err != nil {
			return err
		}
	}
	return nil
}

// waitLabelled waits until a node's GpuNodeStatus names the scheduler of its pool.
func (st *scenario) waitLabelled(ctx context.Context, node, scheduler string) error {
	return eventually(ctx, waitBound, fmt.Sprintf("GpuNodeStatus %s labelled %s=%s", node, apiv1.LabelSchedulerName, scheduler), func(ctx context.Context) (bool, string, error) {
		g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return g.Labels[apiv1.LabelSchedulerName] == scheduler, fmt.Sprintf("labels %v", g.Labels), nil
	})
}

// releaseOf returns the release a scheduler name belongs to.
func (st *scenario) releaseOf(scheduler string) (*release, error) {
	rel, ok := st.releases[scheduler]
	if !ok {
		return nil, fmt.Errorf("the scenario started no release %q (releases: %v)", scheduler, st.releaseNames())
	}
	return rel, nil
}

func (st *scenario) releaseNames() []string {
	names := make([]string, 0, len(st.releases))
	for n := range st.releases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// podOfScheduler creates a claim for n GPUs and a pod of that name for scheduler.
func podOfScheduler(ctx context.Context, name, scheduler string, n int) error {
	st := state(ctx)
	if err := st.createClaim(ctx, name, countSpec(n)); err != nil {
		return err
	}
	pod := st.newPod(name, name, podOptions{})
	pod.Spec.SchedulerName = scheduler
	return st.createPod(ctx, pod)
}

func podsOfScheduler(ctx context.Context, count int, scheduler string, n int) error {
	for i := range count {
		if err := podOfScheduler(ctx, fmt.Sprintf("%s-%d", scheduler, i), scheduler, n); err != nil {
			return err
		}
	}
	return nil
}

// schedulingEvents lists, per pod name, the scheduler events (reason Scheduled or
// FailedScheduling) of the scenario's pods with the scheduler that reported each: the
// kube-scheduler reports as its profile's scheduler name.
func (st *scenario) schedulingEvents(ctx context.Context, reason string) (map[string][]string, error) {
	list, err := st.suite.kube.EventsV1().Events(st.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the events of namespace %s: %w", st.ns, err)
	}
	out := map[string][]string{}
	for i := range list.Items {
		e := &list.Items[i]
		if e.Regarding.Kind != "Pod" || e.Reason != reason {
			continue
		}
		out[e.Regarding.Name] = append(out[e.Regarding.Name], reporter(e))
	}
	return out, nil
}

// reporter is the component that reported an event.
func reporter(e *eventsv1.Event) string {
	if e.ReportingController != "" {
		return e.ReportingController
	}
	return e.DeprecatedSource.Component
}

// boundBy checks that a pod is bound onto a node of its scheduler's release and that only
// that scheduler reported binding it; it says what it saw when not (yet).
func (st *scenario) boundBy(pod *corev1.Pod, scheduled map[string][]string) (bool, string) {
	rel, ok := st.releases[pod.Spec.SchedulerName]
	if !ok {
		return false, fmt.Sprintf("pod %s names scheduler %q, which no release of the scenario runs", pod.Name, pod.Spec.SchedulerName)
	}
	if pod.Spec.NodeName == "" {
		return false, fmt.Sprintf("pod %s (scheduler %s) is not bound yet", pod.Name, rel.name)
	}
	if !slices.Contains(rel.nodes, pod.Spec.NodeName) {
		return false, fmt.Sprintf("pod %s (scheduler %s) is bound to node %s, not one of release %s's nodes %v", pod.Name, rel.name, pod.Spec.NodeName, rel.name, rel.nodes)
	}
	if _, err := allocationOf(pod); err != nil {
		return false, err.Error()
	}
	by := scheduled[pod.Name]
	if len(by) == 0 || slices.ContainsFunc(by, func(r string) bool { return r != rel.name }) {
		return false, fmt.Sprintf("pod %s (scheduler %s): Scheduled events reported by %v, want by %s alone", pod.Name, rel.name, by, rel.name)
	}
	return true, ""
}

// everyPodBoundByItsScheduler waits until every pod of the scenario is bound onto a node of
// the release whose scheduler it names, by that scheduler alone.
func everyPodBoundByItsScheduler(ctx context.Context) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "every pod bound by its own scheduler onto its release's nodes", func(ctx context.Context) (bool, string, error) {
		pods, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		scheduled, err := st.schedulingEvents(ctx, "Scheduled")
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods.Items) == 0 {
			return false, "the scenario has no pods", nil
		}
		var problems []string
		for i := range pods.Items {
			if ok, why := st.boundBy(&pods.Items[i], scheduled); !ok {
				problems = append(problems, why)
			}
		}
		return len(problems) == 0, strings.Join(problems, "\n"), nil
	})
}

func podBoundByScheduler(ctx context.Context, name, scheduler, releaseName string) error {
	st := state(ctx)
	if scheduler != releaseName {
		return fmt.Errorf("a release's scheduler has the release's name: scheduler %q of release %q", scheduler, releaseName)
	}
	if _, err := st.releaseOf(releaseName); err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("pod %s bound by scheduler %s onto a node of its release", name, scheduler), func(ctx context.Context) (bool, string, error) {
		pod, err := st.getPod(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Spec.SchedulerName != scheduler {
			return false, "", fmt.Errorf("pod %s names scheduler %q, not %q", name, pod.Spec.SchedulerName, scheduler)
		}
		scheduled, err := st.schedulingEvents(ctx, "Scheduled")
		if err != nil {
			return false, err.Error(), nil
		}
		ok, why := st.boundBy(pod, scheduled)
		return ok, why, nil
	})
}

// schedulerReportsUnschedulable waits until scheduler has tried the pod and found no node for
// it (its PodScheduled condition and a FailedScheduling event it reported), and checks that no
// scheduler bound it meanwhile.
func schedulerReportsUnschedulable(ctx context.Context, scheduler, name string) error {
	st := state(ctx)
	return eventually(ctx, waitBound, fmt.Sprintf("scheduler %s reports pod %s unschedulable", scheduler, name), func(ctx context.Context) (bool, string, error) {
		pod, err := st.getPod(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Spec.NodeName != "" {
			return false, "", fmt.Errorf("pod %s (scheduler %s) was bound to node %s", name, pod.Spec.SchedulerName, pod.Spec.NodeName)
		}
		failed, err := st.schedulingEvents(ctx, "FailedScheduling")
		if err != nil {
			return false, err.Error(), nil
		}
		unschedulable := false
		for _, c := range pod.Status.Conditions {
			unschedulable = unschedulable || c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
		return unschedulable && slices.Contains(failed[name], scheduler),
			fmt.Sprintf("%s; FailedScheduling events reported by %v", describePod(pod), failed[name]), nil
	})
}

// releaseHoldsNoLease checks that no GPU lease exists in the release's namespace or on its nodes.
func releaseHoldsNoLease(ctx context.Context, name string) error {
	st := state(ctx)
	rel, err := st.releaseOf(name)
	if err != nil {
		return err
	}
	inNS, err := st.suite.kube.CoordinationV1().Leases(rel.ns).List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if err != nil {
		return fmt.Errorf("listing the GPU leases of namespace %s: %w", rel.ns, err)
	}
	onNodes, err := st.leasesOnNodes(ctx, rel.nodes)
	if err != nil {
		return err
	}
	if len(inNS.Items) > 0 || len(onNodes) > 0 {
		return fmt.Errorf("release %s holds GPU leases: in its namespace %v, on its nodes %v", name, leaseNames(inNS.Items), onNodes)
	}
	return nil
}

// leasesOnNodes lists "namespace/name" of every GPU lease, in any namespace, on the nodes.
func (st *scenario) leasesOnNodes(ctx context.Context, nodes []string) ([]string, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	req, err := labels.NewRequirement(apiv1.LabelLeaseNode, selection.In, nodes)
	if err != nil {
		return nil, err
	}
	list, err := st.suite.kube.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*req).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the GPU leases of nodes %v: %w", nodes, err)
	}
	var out []string
	for _, l := range list.Items {
		out = append(out, l.Namespace+"/"+l.Name)
	}
	sort.Strings(out)
	return out, nil
}

// leasesPerRelease checks every release's locks: the GPU leases on its nodes, in whatever
// namespace, are exactly those its bound pods' allocations call for, all in the release's own
// namespace, held by those pods and created by its scheduler (the lease's field manager).
func leasesPerRelease(ctx context.Context) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "each release's GPU leases in its namespace, held by its pods", func(ctx context.Context) (bool, string, error) {
		pods, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var problems []string
		for _, name := range st.releaseNames() {
			rel := st.releases[name]
			want := map[string]string{} // "namespace/gpu-node-id" -> pod UID
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Spec.SchedulerName != rel.name || p.Spec.NodeName == "" {
					continue
				}
				alloc, err := allocationOf(p)
				if err != nil {
					return false, err.Error(), nil
				}
				for _, id := range alloc.IDs {
					ln, err := apiv1.LeaseName(alloc.Node, id)
					if err != nil {
						return false, "", err
					}
					want[rel.ns+"/"+ln] = string(p.UID)
				}
			}
			req, err := labels.NewRequirement(apiv1.LabelLeaseNode, selection.In, rel.nodes)
			if err != nil {
				return false, "", err
			}
			list, err := st.suite.kube.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*req).String()})
			if err != nil {
				return false, err.Error(), nil
			}
			got := map[string]bool{}
			for i := range list.Items {
				l := &list.Items[i]
				key := l.Namespace + "/" + l.Name
				got[key] = true
				switch uid, ok := want[key]; {
				case !ok:
					problems = append(problems, fmt.Sprintf("release %s: lease %s (holders %v) is no lock its pods call for", name, key, holders(l)))
				case !slices.Equal(holders(l), []string{uid}):
					problems = append(problems, fmt.Sprintf("release %s: lease %s held by %v, want its pod %s", name, key, holders(l), uid))
				default:
					if m := managers(l.ManagedFields, ""); !slices.Equal(m, []string{rel.name}) {
						problems = append(problems, fmt.Sprintf("release %s: lease %s written by %v, want by scheduler %s alone", name, key, m, rel.name))
					}
				}
			}
			for key := range want {
				if !got[key] {
					problems = append(problems, fmt.Sprintf("release %s: no lease %s for its bound pod %s", name, key, want[key]))
				}
			}
		}
		sort.Strings(problems)
		return len(problems) == 0, strings.Join(problems, "\n"), nil
	})
}

// managers lists the field managers of the entries for subresource ("" for the object itself).
func managers(fields []metav1.ManagedFieldsEntry, subresource string) []string {
	var out []string
	for _, f := range fields {
		if f.Subresource == subresource && !slices.Contains(out, f.Manager) {
			out = append(out, f.Manager)
		}
	}
	sort.Strings(out)
	return out
}

// claimsWrittenByOwnScheduler waits until every claim is Bound to its pod's node and GPUs, and
// checks that its status was written by its pod's scheduler and no other (the status's field
// managers: each scheduler writes as its profile name).
func claimsWrittenByOwnScheduler(ctx context.Context) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "every claim Bound, its status written by its pod's scheduler alone", func(ctx context.Context) (bool, string, error) {
		claims, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(claims.Items) == 0 {
			return false, "the scenario has no claims", nil
		}
		var problems []string
		for i := range claims.Items {
			c := &claims.Items[i]
			pod, err := st.getPod(ctx, c.Name) // the steps name a pod's claim after it
			if err != nil {
				return false, err.Error(), nil
			}
			alloc, err := allocationOf(pod)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if c.Status.Phase != apiv1.ClaimBound || c.Status.NodeName != alloc.Node || c.Status.PodUID != string(pod.UID) {
				problems = append(problems, fmt.Sprintf("%s; its pod is on %s", describeClaim(c), alloc.String()))
				continue
			}
			if m := managers(c.ManagedFields, "status"); !slices.Equal(m, []string{pod.Spec.SchedulerName}) {
				problems = append(problems, fmt.Sprintf("GpuClaim %s of a pod of scheduler %s: status written by %v", c.Name, pod.Spec.SchedulerName, m))
			}
		}
		return len(problems) == 0, strings.Join(problems, "\n"), nil
	})
}

// agentsPerRelease waits until the GpuNodeStatus of every release node names its release's
// scheduler and reports as in use exactly the GPUs its release's leases lock.
func agentsPerRelease(ctx context.Context) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "each release's agents publish its nodes and its pods' GPUs in use", func(ctx context.Context) (bool, string, error) {
		var problems []string
		for _, name := range st.releaseNames() {
			rel := st.releases[name]
			leases, err := st.suite.kube.CoordinationV1().Leases(rel.ns).List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
			if err != nil {
				return false, err.Error(), nil
			}
			want := map[string][]string{} // node/id -> holders
			for i := range leases.Items {
				l := &leases.Items[i]
				want[l.Labels[apiv1.LabelLeaseNode]+"/"+l.Labels[apiv1.LabelLeaseGPU]] = holders(l)
			}
			for _, node := range rel.nodes {
				g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
				if err != nil {
					if apierrors.IsNotFound(err) {
						problems = append(problems, fmt.Sprintf("node %s of release %s has no GpuNodeStatus", node, name))
						continue
					}
					return false, err.Error(), nil
				}
				if got := g.Labels[apiv1.LabelSchedulerName]; got != name {
					problems = append(problems, fmt.Sprintf("GpuNodeStatus %s of release %s is labelled for scheduler %q", node, name, got))
				}
				for _, d := range g.Status.Devices {
					gpu := fmt.Sprintf("%s/%d", node, d.ID)
					got, w := slices.Sorted(slices.Values(d.InUseBy)), slices.Sorted(slices.Values(want[gpu]))
					if !slices.Equal(got, w) {
						problems = append(problems, fmt.Sprintf("release %s GPU %s: the agent reports inUseBy %v, the release's lease says %v", name, gpu, got, w))
					}
				}
			}
		}
		return len(problems) == 0, strings.Join(problems, "\n"), nil
	})
}

// stopReleases stops the releases' agents and deletes their namespaces (and so their leases).
// Their schedulers are among the scenario's extra schedulers and stop with them.
func (st *scenario) stopReleases(ctx context.Context) []error {
	var errs []error
	for _, name := range st.releaseNames() {
		rel := st.releases[name]
		if rel.fleet != nil {
			if err := rel.fleet.stop(); err != nil {
				errs = append(errs, fmt.Errorf("release %s: %w", name, err))
			}
		}
		if err := st.suite.kube.CoreV1().Namespaces().Delete(ctx, rel.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting namespace %s of release %s: %w", rel.ns, name, err))
		}
	}
	return errs
}
