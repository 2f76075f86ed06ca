package features

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// Steps about GpuWorkloads and the gpu-controller that runs them.
func registerGpuWorkloadSteps(sc *godog.ScenarioContext) {
	sc.Step(`^GpuWorkload "([^"]*)" is applied:$`, applyWorkload)
	sc.Step(`^GpuWorkload "([^"]*)" is (Pending|Scheduled|Running|Succeeded|Failed)$`, workloadPhase)
	sc.Step(`^GpuWorkload "([^"]*)" is Failed with message "(.*)"$`, workloadFailedWith)
	sc.Step(`^every replica of GpuWorkload "([^"]*)" holds (\d+) GPUs? of its own$`, replicasOwnGPUs)
	sc.Step(`^the (\d+) pods of GpuWorkload "([^"]*)" are pending: "(.*)"$`, workloadPodsPending)
	sc.Step(`^no GPU lease is held$`, noLeases)
	sc.Step(`^replica (\d+) of GpuWorkload "([^"]*)" fails$`, replicaFails)
	sc.Step(`^replica (\d+) of GpuWorkload "([^"]*)" runs as attempt (\d+) after (\d+) retr(?:y|ies)$`, replicaRunsAttempt)
	sc.Step(`^GpuWorkload "([^"]*)" has a (Normal|Warning) event "([^"]*)" saying "(.*)"$`, workloadEvent)
	sc.Step(`^GpuWorkload "([^"]*)" is deleted$`, deleteWorkload)
	sc.Step(`^GpuWorkload "([^"]*)" is gone with its pods, claims and GPU leases$`, workloadGone)
	sc.Step(`^the API server refuses these GpuWorkloads:$`, refusesWorkloads)
	sc.Step(`^the replicas of GpuWorkload "([^"]*)" run on (\d+) different nodes$`, replicasOnNodes)
	sc.Step(`^the replicas of GpuWorkload "([^"]*)" all run on node (\d+)$`, replicasOnNode)
	sc.Step(`^gpu-controller's metrics count (\S+) above 0$`, controllerMetricAboveZero)
}

// workloadObject reads a GpuWorkload spec written as YAML in a feature file and fits it to the
// scenario: its claim selects the scenario's nodes, its pods tolerate kwok's taint and have a
// container when the scenario gives none.
func (st *scenario) workloadObject(name, doc string) (*apiv1.GpuWorkload, error) {
	var spec apiv1.GpuWorkloadSpec
	if err := yaml.UnmarshalStrict([]byte(doc), &spec); err != nil {
		return nil, fmt.Errorf("GpuWorkload spec %q: %w", doc, err)
	}
	if c := spec.Claim.Spec; c != nil {
		if c.Selector == nil {
			c.Selector = &apiv1.NodeSelector{}
		}
		sel := maps.Clone(c.Selector.MatchLabels)
		if sel == nil {
			sel = map[string]string{}
		}
		sel[LabelScenario] = st.id
		c.Selector.MatchLabels = sel
	}
	ps := &spec.Template.Spec
	if len(ps.Containers) == 0 {
		ps.Containers = []corev1.Container{{Name: "main", Image: "registry.example/cuda:fake"}}
	}
	ps.Tolerations = append(ps.Tolerations, corev1.Toleration{Key: "type", Operator: corev1.TolerationOpExists})
	return &apiv1.GpuWorkload{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns}, Spec: spec}, nil
}

func applyWorkload(ctx context.Context, name string, doc *godog.DocString) error {
	st := state(ctx)
	gw, err := st.workloadObject(name, doc.Content)
	if err != nil {
		return err
	}
	if _, err := st.suite.gpu.GpuV1().GpuWorkloads(st.ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating GpuWorkload %s/%s: %w", st.ns, name, err)
	}
	return nil
}

func (st *scenario) getWorkload(ctx context.Context, name string) (*apiv1.GpuWorkload, error) {
	return st.suite.gpu.GpuV1().GpuWorkloads(st.ns).Get(ctx, name, metav1.GetOptions{})
}

// describeWorkload is what a failed wait shows: the status and the pods.
func (st *scenario) describeWorkload(ctx context.Context, gw *apiv1.GpuWorkload) string {
	b, _ := yaml.Marshal(gw.Status)
	var out strings.Builder
	fmt.Fprintf(&out, "status:\n%s", b)
	pods, err := st.workloadPods(ctx, gw.Name)
	if err != nil {
		return out.String() + err.Error()
	}
	for _, p := range pods {
		fmt.Fprintf(&out, "pod %s: phase %s node %q allocated %q deleting %v\n", p.Name, p.Status.Phase, p.Spec.NodeName, p.Annotations[apiv1.AnnotationAllocated], p.DeletionTimestamp != nil)
	}
	return out.String()
}

func (st *scenario) workloadPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	list, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelWorkload + "=" + name})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of GpuWorkload %s: %w", name, err)
	}
	return list.Items, nil
}

// waitWorkload waits until the workload satisfies ok (which says what it saw when not).
func (st *scenario) waitWorkload(ctx context.Context, name, what string, timeout time.Duration, ok func(*apiv1.GpuWorkload) (bool, string)) error {
	return eventually(ctx, timeout, fmt.Sprintf("GpuWorkload %s %s", name, what), func(ctx context.Context) (bool, string, error) {
		gw, err := st.getWorkload(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		good, why := ok(gw)
		if good {
			return true, "", nil
		}
		return false, why + "\n" + st.describeWorkload(ctx, gw), nil
	})
}

func workloadPhase(ctx context.Context, name, phase string) error {
	st := state(ctx)
	timeout := waitBound
	if phase == string(apiv1.WorkloadFailed) {
		timeout = waitSlow // retries wait their backoff first
	}
	return st.waitWorkload(ctx, name, "is "+phase, timeout, func(gw *apiv1.GpuWorkload) (bool, string) {
		return string(gw.Status.Phase) == phase && gw.Status.ObservedGeneration == gw.Generation, fmt.Sprintf("phase %q", gw.Status.Phase)
	})
}

func workloadFailedWith(ctx context.Context, name, msg string) error {
	st := state(ctx)
	msg = st.expand(msg)
	return st.waitWorkload(ctx, name, "is Failed with message "+msg, waitSlow, func(gw *apiv1.GpuWorkload) (bool, string) {
		c := meta.FindStatusCondition(gw.Status.Conditions, apiv1.WorkloadConditionFailed)
		ok := gw.Status.Phase == apiv1.WorkloadFailed && gw.Status.Message == msg && c != nil && c.Status == metav1.ConditionTrue && c.Message == msg
		return ok, fmt.Sprintf("phase %q message %q", gw.Status.Phase, gw.Status.Message)
	})
}

// replicasOwnGPUs checks the status of every replica against its pod: each replica has a
// bound pod whose allocation is the node and GPUs of its status entry, with n GPUs, and no two
// replicas share a GPU.
func replicasOwnGPUs(ctx context.Context, name string, n int) error {
	st := state(ctx)
	return eventually(ctx, waitBound, fmt.Sprintf("every replica of GpuWorkload %s holds %d GPUs of its own", name, n), func(ctx context.Context) (bool, string, error) {
		gw, err := st.getWorkload(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		seen := map[string]string{} // node/id -> pod
		var nodes []string
		for _, rs := range gw.Status.Replicas {
			if rs.Pod == "" || rs.Node == "" || len(rs.GpuIDs) != n {
				return false, st.describeWorkload(ctx, gw), nil
			}
			pod, err := st.getPod(ctx, rs.Pod)
			if err != nil {
				return false, err.Error(), nil
			}
			a, err := allocationOf(pod)
			if err != nil {
				return false, err.Error(), nil
			}
			ids := make([]int, len(rs.GpuIDs))
			for i, id := range rs.GpuIDs {
				ids[i] = int(id)
			}
			if a.Node != rs.Node || !slices.Equal(a.IDs, ids) {
				return false, fmt.Sprintf("replica %d: status says %s:%v, pod %s has %s", rs.Index, rs.Node, ids, pod.Name, a), nil
			}
			if !st.isScenarioNode(a.Node) {
				return false, "", fmt.Errorf("pod %s runs on %s, not a node of this scenario", pod.Name, a.Node)
			}
			for _, id := range a.IDs {
				k := fmt.Sprintf("%s/%d", a.Node, id)
				if other, dup := seen[k]; dup {
					return false, "", fmt.Errorf("GPU %s is held by both %s and %s", k, other, pod.Name)
				}
				seen[k] = pod.Name
			}
			if !slices.Contains(nodes, a.Node) {
				nodes = append(nodes, a.Node)
			}
		}
		slices.Sort(nodes)
		if len(gw.Status.Replicas) != int(gw.Spec.WorkloadReplicas()) || int(gw.Status.GPUs) != n*int(gw.Spec.WorkloadReplicas()) || !slices.Equal(gw.Status.Nodes, nodes) {
			return false, fmt.Sprintf("want %d replicas, %d GPUs on %v\n%s", gw.Spec.WorkloadReplicas(), n*int(gw.Spec.WorkloadReplicas()), nodes, st.describeWorkload(ctx, gw)), nil
		}
		return true, "", nil
	})
}

// workloadPodsPending waits until the workload has n pods, none bound, each with msg as the
// reason in its PodScheduled condition.
func workloadPodsPending(ctx context.Context, n int, name, msg string) error {
	st := state(ctx)
	msg = st.expand(msg)
	return eventually(ctx, waitBound, fmt.Sprintf("the %d pods of GpuWorkload %s pending: %s", n, name, msg), func(ctx context.Context) (bool, string, error) {
		pods, err := st.workloadPods(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		pending := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				return false, "", fmt.Errorf("pod %s of GpuWorkload %s is bound to %s; want all %d pending", p.Name, name, p.Spec.NodeName, n)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					seen = append(seen, fmt.Sprintf("%s: %s", p.Name, c.Message))
					if c.Status == corev1.ConditionFalse && strings.Contains(c.Message, msg) {
						pending++
					}
				}
			}
		}
		return len(pods) == n && pending == n, fmt.Sprintf("%d pods: %s", len(pods), strings.Join(seen, "; ")), nil
	})
}

// noLeases waits until no GPU lease of the scenario's nodes is held (a finished pod's are
// released a moment after it finished).
func noLeases(ctx context.Context) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "no GPU lease held", func(ctx context.Context) (bool, string, error) {
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return len(leases) == 0, fmt.Sprintf("leases %v", leaseNames(leases)), nil
	})
}

// runningReplica returns the live pod of a replica as the workload's status names it, once it runs.
func (st *scenario) runningReplica(ctx context.Context, name string, index int) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := st.waitWorkload(ctx, name, fmt.Sprintf("has replica %d running", index), waitBound, func(gw *apiv1.GpuWorkload) (bool, string) {
		for _, rs := range gw.Status.Replicas {
			if int(rs.Index) == index && rs.Pod != "" && rs.Phase == corev1.PodRunning {
				p, err := st.getPod(context.WithoutCancel(ctx), rs.Pod)
				if err != nil {
					return false, err.Error()
				}
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					pod = p
					return true, ""
				}
			}
		}
		return false, "replica not running"
	})
	return pod, err
}

// replicaFails fails the running pod of a replica the way a kubelet reports a container that
// died on a GPU error: phase Failed with a reason and message.
func replicaFails(ctx context.Context, index int, name string) error {
	st := state(ctx)
	pod, err := st.runningReplica(ctx, name, index)
	if err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "GPUError"
	pod.Status.Message = "Xid 79: GPU has fallen off the bus"
	if _, err := st.suite.kube.CoreV1().Pods(st.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failing pod %s: %w", pod.Name, err)
	}
	return nil
}

func replicaRunsAttempt(ctx context.Context, index int, name string, attempt, retries int) error {
	st := state(ctx)
	return st.waitWorkload(ctx, name, fmt.Sprintf("runs replica %d as attempt %d after %d retries", index, attempt, retries), waitSlow, func(gw *apiv1.GpuWorkload) (bool, string) {
		for _, rs := range gw.Status.Replicas {
			if int(rs.Index) == index {
				want := fmt.Sprintf("%s-%d-%d", name, index, attempt)
				ok := int(rs.Attempt) == attempt && rs.Pod == want && rs.Phase == corev1.PodRunning && int(gw.Status.Retries) == retries
				return ok, fmt.Sprintf("replica %d: attempt %d pod %s phase %s; retries %d", index, rs.Attempt, rs.Pod, rs.Phase, gw.Status.Retries)
			}
		}
		return false, fmt.Sprintf("no replica %d in the status", index)
	})
}

func workloadEvent(ctx context.Context, name, kind, reason, text string) error {
	st := state(ctx)
	text = st.expand(text)
	return eventually(ctx, waitBound, fmt.Sprintf("a %s event %s on GpuWorkload %s saying %q", kind, reason, name, text), func(ctx context.Context) (bool, string, error) {
		list, err := st.suite.kube.EventsV1().Events(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind != "GpuWorkload" || e.Regarding.Name != name {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Note))
			if e.Type == kind && e.Reason == reason && strings.Contains(e.Note, text) {
				return true, "", nil
			}
		}
		return false, strings.Join(seen, "\n"), nil
	})
}

func deleteWorkload(ctx context.Context, name string) error {
	st := state(ctx)
	if err := st.suite.gpu.GpuV1().GpuWorkloads(st.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting GpuWorkload %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// workloadGone waits for the finalizer to have removed everything the workload made.
func workloadGone(ctx context.Context, name string) error {
	st := state(ctx)
	return eventually(ctx, waitBound, fmt.Sprintf("GpuWorkload %s, its pods, claims and GPU leases gone", name), func(ctx context.Context) (bool, string, error) {
		_, err := st.getWorkload(ctx, name)
		gone := apierrors.IsNotFound(err)
		pods, err := st.workloadPods(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		claims, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return gone && len(pods) == 0 && len(claims.Items) == 0 && len(leases) == 0,
			fmt.Sprintf("workload gone %v, %d pods, %d claims, leases %v", gone, len(pods), len(claims.Items), leaseNames(leases)), nil
	})
}

var gpuWorkloadsGVR = apiv1.SchemeGroupVersion.WithResource("gpuworkloads")

// refusesWorkloads applies each spec of the table as kubectl apply would (unstructured, so
// that the API server and not a Go type judges it) and expects the message of the table.
func refusesWorkloads(ctx context.Context, table *godog.Table) error {
	st := state(ctx)
	dyn, err := dynamic.NewForConfig(st.suite.restCfg)
	if err != nil {
		return err
	}
	rs, err := rows(table, "case", "spec", "message")
	if err != nil {
		return err
	}
	var problems []string
	for i, row := range rs {
		var spec map[string]any
		if err := yaml.Unmarshal([]byte(row["spec"]), &spec); err != nil {
			return fmt.Errorf("case %q: spec: %w", row["case"], err)
		}
		name := fmt.Sprintf("bad-%d", i)
		if n, ok := spec["name"].(string); ok { // a case about the name itself
			name = n
			delete(spec, "name")
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiv1.SchemeGroupVersion.String(),
			"kind":       "GpuWorkload",
			"metadata":   map[string]any{"name": name},
			"spec":       spec,
		}}
		_, err := dyn.Resource(gpuWorkloadsGVR).Namespace(st.ns).Create(ctx, obj, metav1.CreateOptions{})
		switch {
		case err == nil:
			problems = append(problems, fmt.Sprintf("case %q: accepted; want %q", row["case"], row["message"]))
		case !strings.Contains(err.Error(), row["message"]):
			problems = append(problems, fmt.Sprintf("case %q: refused with %q; want it to contain %q", row["case"], err, row["message"]))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}

// runningNodes waits until the workload runs and returns the node of each replica.
func (st *scenario) runningNodes(ctx context.Context, name string) ([]string, error) {
	var nodes []string
	err := st.waitWorkload(ctx, name, "is Running", waitBound, func(gw *apiv1.GpuWorkload) (bool, string) {
		nodes = nodes[:0]
		for _, rs := range gw.Status.Replicas {
			nodes = append(nodes, rs.Node)
		}
		return gw.Status.Phase == apiv1.WorkloadRunning, fmt.Sprintf("phase %q", gw.Status.Phase)
	})
	return nodes, err
}

func replicasOnNodes(ctx context.Context, name string, n int) error {
	st := state(ctx)
	nodes, err := st.runningNodes(ctx, name)
	if err != nil {
		return err
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(nodes))); len(distinct) != n {
		return fmt.Errorf("the replicas of GpuWorkload %s run on %v: %d different nodes, want %d", name, nodes, len(distinct), n)
	}
	return nil
}

func replicasOnNode(ctx context.Context, name string, i int) error {
	st := state(ctx)
	want, err := st.node(i)
	if err != nil {
		return err
	}
	nodes, err := st.runningNodes(ctx, name)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n != want {
			return fmt.Errorf("the replicas of GpuWorkload %s run on %v; want all on node %d (%s)", name, nodes, i, want)
		}
	}
	return nil
}

// controllerMetricAboveZero reads the gpu-controller's /metrics and wants a sample of the
// series (a name with its labels, as Prometheus prints it) above 0. The process serves every
// scenario, so only "above 0" is meaningful, not an exact count.
func controllerMetricAboveZero(ctx context.Context, series string) error {
	st := state(ctx)
	// The controller serves /metrics over HTTPS to callers the apiserver authorises, as
	// Prometheus scrapes it: with a ServiceAccount token allowed to GET /metrics.
	token, err := launch.MetricsReaderToken(ctx, st.suite.kube, LeaseNamespace, "metrics-reader")
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", st.suite.controller.MetricsPort)
	return eventually(ctx, waitBound, "gpu-controller metric "+series+" above 0", func(ctx context.Context) (bool, string, error) {
		code, body, err := launch.Scrape(ctx, url, token)
		if err != nil {
			return false, err.Error(), nil
		}
		if code != http.StatusOK {
			return false, fmt.Sprintf("GET %s: HTTP %d: %s", url, code, body), nil
		}
		var seen []string
		for _, line := range strings.Split(string(body), "\n") {
			name, value, ok := strings.Cut(line, " ")
			if !ok || strings.HasPrefix(line, "#") || !strings.HasPrefix(name, strings.SplitN(series, "{", 2)[0]) {
				continue
			}
			seen = append(seen, line)
			if v, err := strconv.ParseFloat(value, 64); err == nil && name == series && v > 0 {
				return true, "", nil
			}
		}
		return false, strings.Join(seen, "\n"), nil
	})
}
