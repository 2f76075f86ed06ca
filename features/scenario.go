package features

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// LabelScenario marks the nodes of one scenario; the scenario's claims select on it.
const LabelScenario = "acceptance.gpu.scheduling/scenario"

// scenario is the state of one running scenario. It lives in the context godog passes from
// step to step (never in a package variable), so steps read it with state(ctx).
type scenario struct {
	suite *Suite
	// id is short and unique in the run ("s007"): node pools and the node label use it.
	id string
	// name is the scenario's name, for messages.
	name string
	// ns is the scenario's own namespace.
	ns string

	// nodes are the scenario's nodes in the order the steps created them ("node 0" is the first).
	nodes []string
	// pools counts the node pools created, for their names.
	pools int

	// uids remembers the UID of every pod the scenario created, by name, so that steps can
	// still talk about a pod after it is gone.
	uids map[string]types.UID
	// batch is the last group of pods created together ("8 pods each claim 1 GPU").
	batch []string
	// batches counts the groups, for the names of their pods.
	batches int
	// leases remembers, per pod, the GPU leases it held when it was first seen bound:
	// lease name -> lease UID and resourceVersion.
	leases map[string]map[string]string
	// beforeTemplateDelete remembers, per deleted GpuClaimTemplate, the bound pods of the
	// namespace at that moment: pod UID -> "name allocation claim-UID".
	beforeTemplateDelete map[string]map[types.UID]string

	// schedulers are extra gpu-scheduler processes the scenario started.
	schedulers []*launch.Scheduler
	// releases are the releases with their own scheduler names the scenario started, by name.
	releases map[string]*release
	// stepStart is when the running step began, to report slow steps.
	stepStart time.Time
}

// slowStep is how long a step may take before the suite says so: every step waits for
// something the components do within a second or two unless the scenario says otherwise.
const slowStep = 10 * time.Second

// afterStep reports slow steps, so that a suite that gets slower shows where.
func (s *Suite) afterStep(ctx context.Context, step *godog.Step, _ godog.StepResultStatus, _ error) (context.Context, error) {
	if st, ok := ctx.Value(scenarioKey{}).(*scenario); ok && !st.stepStart.IsZero() {
		if d := time.Since(st.stepStart); d > slowStep {
			fmt.Fprintf(s.opts.Out, "\nslow step (%s) in %q: %s\n", d.Round(100*time.Millisecond), st.name, step.Text)
		}
	}
	return ctx, nil
}

type scenarioKey struct{}

// state returns the scenario state the Before hook put in ctx.
func state(ctx context.Context) *scenario {
	sc, ok := ctx.Value(scenarioKey{}).(*scenario)
	if !ok {
		panic("features: no scenario state in the context; was the Before hook registered?")
	}
	return sc
}

var nonDNS = regexp.MustCompile(`[^a-z0-9]+`)

// namespaceFor builds a namespace name from the scenario's number and name.
func namespaceFor(id, name string) string {
	slug := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(name), "-"), "-")
	ns := "acc-" + id + "-" + slug
	if len(ns) > 63 {
		ns = strings.TrimRight(ns[:63], "-")
	}
	return ns
}

// InitializeScenario registers the hooks and every step with godog.
func (s *Suite) InitializeScenario(sc *godog.ScenarioContext) {
	sc.Before(s.beforeScenario)
	sc.After(s.afterScenario)
	sc.StepContext().Before(func(ctx context.Context, _ *godog.Step) (context.Context, error) {
		if st, ok := ctx.Value(scenarioKey{}).(*scenario); ok {
			st.stepStart = time.Now()
		}
		return ctx, nil
	})
	sc.StepContext().After(s.afterStep)
	registerTopologySteps(sc)
	registerDomainSteps(sc)
	registerWorkloadSteps(sc)
	registerLeaseSteps(sc)
	registerHealthSteps(sc)
	registerSharingSteps(sc)
	registerMIGSteps(sc)
	registerLivenessSteps(sc)
	registerLifecycleSteps(sc)
	registerWebhookSteps(sc)
	registerValidationSteps(sc)
	registerGpuWorkloadSteps(sc)
	registerTemplateSteps(sc)
	registerPodGroupSteps(sc)
	registerPlacementSteps(sc)
	registerTelemetrySteps(sc)
	registerReleaseSteps(sc)
	registerKueueSteps(sc)
}

func (s *Suite) beforeScenario(ctx context.Context, p *godog.Scenario) (context.Context, error) {
	id := fmt.Sprintf("s%03d", s.scenarios.Add(1))
	st := &scenario{
		suite:    s,
		id:       id,
		name:     p.Name,
		ns:       namespaceFor(id, p.Name),
		uids:     map[string]types.UID{},
		leases:   map[string]map[string]string{},
		releases: map[string]*release{},
	}
	if err := s.ensureSchedulerRunning(ctx); err != nil {
		return ctx, err
	}
	if err := s.ensureNamespace(ctx, st.ns); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, scenarioKey{}, st), nil
}

// afterScenario describes what the cluster looked like when a scenario failed, then cleans up
// whether it failed or not: extra schedulers, pods (and so their leases), nodes and the namespace.
func (s *Suite) afterScenario(ctx context.Context, p *godog.Scenario, failure error) (context.Context, error) {
	st, ok := ctx.Value(scenarioKey{}).(*scenario)
	if !ok {
		return ctx, nil // Before failed before it made the state
	}
	// The scenario's context may be done; cleanup gets its own time.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if failure != nil {
		fmt.Fprintf(s.opts.Out, "\n--- scenario %q (%s, namespace %s) failed: %v\n%s\n", p.Name, st.id, st.ns, failure, st.describe(cctx))
	}
	return ctx, st.cleanup(cctx)
}

// cleanup removes everything the scenario made. It keeps going after an error and reports all.
func (st *scenario) cleanup(ctx context.Context) error {
	s := st.suite
	var errs []error
	for _, sched := range st.schedulers {
		if err := sched.Stop(5 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", filepath.Base(sched.LogPath()), err))
		}
	}
	errs = append(errs, st.stopReleases(ctx)...)
	if err := s.ensureSchedulerRunning(ctx); err != nil {
		errs = append(errs, err)
	}
	// GpuWorkloads go before their pods, or their controller would make the pods again.
	if err := s.gpu.GpuV1().GpuWorkloads(st.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting the GpuWorkloads of namespace %s: %w", st.ns, err))
	}
	// So do the Jobs, Deployments and StatefulSets of the template scenarios.
	if err := st.deletePodControllers(ctx); err != nil {
		errs = append(errs, err)
	}
	// Pods go first and at once, so the scheduler releases their leases while the nodes exist.
	pods := s.kube.CoreV1().Pods(st.ns)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting the pods of namespace %s: %w", st.ns, err))
	}
	if err := eventually(ctx, time.Minute, "the scenario's pods are gone and their GPU leases released", func(ctx context.Context) (bool, string, error) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, "", err
		}
		return len(list.Items) == 0 && len(leases) == 0, fmt.Sprintf("%d pods left, leases %v", len(list.Items), leaseNames(leases)), nil
	}); err != nil {
		errs = append(errs, err)
	}
	if len(st.nodes) > 0 {
		for _, n := range st.nodes {
			if err := s.kube.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting node %s: %w", n, err))
			}
		}
		// Once their agents stopped nothing writes the nodes' GpuNodeStatuses any more.
		if err := s.agents.remove(ctx, st.nodes); err != nil {
			errs = append(errs, err)
		}
		for _, n := range st.nodes {
			if err := s.gpu.GpuV1().GpuNodeStatuses().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting GpuNodeStatus %s: %w", n, err))
			}
		}
	}
	// The namespace controller finishes the rest; nothing later depends on it being gone.
	if err := s.kube.CoreV1().Namespaces().Delete(ctx, st.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting namespace %s: %w", st.ns, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleaning up scenario %s: %w", st.id, err)
	}
	return nil
}

// node returns the name of the scenario's node i.
func (st *scenario) node(i int) (string, error) {
	if i < 0 || i >= len(st.nodes) {
		return "", fmt.Errorf("the scenario has nodes 0-%d, not node %d", len(st.nodes)-1, i)
	}
	return st.nodes[i], nil
}

// nodeIndex is the inverse of node, for messages ("node 1 (s004-0-00001)").
func (st *scenario) nodeIndex(name string) int {
	for i, n := range st.nodes {
		if n == name {
			return i
		}
	}
	return -1
}

// expand replaces {namespace} in an expected message with the scenario's namespace.
func (st *scenario) expand(msg string) string {
	return strings.ReplaceAll(msg, "{namespace}", st.ns)
}

// podUID returns the UID of a pod the scenario created.
func (st *scenario) podUID(name string) (types.UID, error) {
	uid, ok := st.uids[name]
	if !ok {
		return "", fmt.Errorf("the scenario created no pod %q", name)
	}
	return uid, nil
}

// isScenarioNode reports whether a node belongs to this scenario.
func (st *scenario) isScenarioNode(name string) bool { return st.nodeIndex(name) >= 0 }

// getPod reads one pod of the scenario's namespace.
func (st *scenario) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	return st.suite.kube.CoreV1().Pods(st.ns).Get(ctx, name, metav1.GetOptions{})
}
