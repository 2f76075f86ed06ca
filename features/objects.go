package features

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// parseClaimSpec reads a GpuClaim spec written as YAML in a feature file. Unknown fields are
// an error, so a typo in a scenario is not silently a different claim.
func parseClaimSpec(doc string) (apiv1.GpuClaimSpec, error) {
	var spec apiv1.GpuClaimSpec
	if err := yaml.UnmarshalStrict([]byte(doc), &spec); err != nil {
		return spec, fmt.Errorf("GpuClaim spec %q: %w", doc, err)
	}
	return spec, nil
}

// createClaim creates a GpuClaim in the scenario's namespace. The scenario label is added to
// its node selector, so that it only sees the scenario's nodes.
func (st *scenario) createClaim(ctx context.Context, name string, spec apiv1.GpuClaimSpec) error {
	if spec.Selector == nil {
		spec.Selector = &apiv1.NodeSelector{}
	}
	sel := maps.Clone(spec.Selector.MatchLabels)
	if sel == nil {
		sel = map[string]string{}
	}
	sel[LabelScenario] = st.id
	spec.Selector.MatchLabels = sel
	claim := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns}, Spec: spec}
	if _, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating GpuClaim %s/%s: %w", st.ns, name, err)
	}
	return nil
}

// podOptions vary the pods a step creates.
type podOptions struct {
	// containers are the container names; one "main" container when empty.
	containers []string
	// initContainers are the init container names.
	initContainers []string
	// runFor makes the pod complete (Succeeded) that long after it starts ("5s").
	runFor string
	// annotations are added to the pod.
	annotations map[string]string
	// priorityClass is the pod's priorityClassName.
	priorityClass string
}

// newPod builds a pod for gpu-scheduler that names claim.
func (st *scenario) newPod(name, claim string, o podOptions) *corev1.Pod {
	ann := map[string]string{apiv1.AnnotationClaim: claim}
	maps.Copy(ann, o.annotations)
	if o.runFor != "" {
		ann[cluster.AnnotationDuration] = o.runFor
	}
	names := o.containers
	if len(names) == 0 {
		names = []string{"main"}
	}
	var containers, inits []corev1.Container
	for _, n := range names {
		containers = append(containers, corev1.Container{Name: n, Image: "registry.example/cuda:fake"})
	}
	for _, n := range o.initContainers {
		inits = append(inits, corev1.Container{Name: n, Image: "registry.example/cuda:fake"})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns, Annotations: ann},
		Spec: corev1.PodSpec{
			SchedulerName:                 apiv1.SchedulerName,
			PriorityClassName:             o.priorityClass,
			InitContainers:                inits,
			Containers:                    containers,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			// kwok nodes are tainted the way kwokctl taints them.
			Tolerations: []corev1.Toleration{{Key: "type", Operator: corev1.TolerationOpExists}},
		},
	}
}

// createPod creates a pod and remembers its UID.
func (st *scenario) createPod(ctx context.Context, pod *corev1.Pod) error {
	out, err := st.suite.kube.CoreV1().Pods(st.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", st.ns, pod.Name, err)
	}
	st.uids[pod.Name] = out.UID
	return nil
}

// claimAndPod creates a claim named after the pod and the pod that names it.
func (st *scenario) claimAndPod(ctx context.Context, name string, spec apiv1.GpuClaimSpec, o podOptions) error {
	if err := st.createClaim(ctx, name, spec); err != nil {
		return err
	}
	return st.createPod(ctx, st.newPod(name, name, o))
}

// countSpec is the claim of "claims N GPUs": N exclusive GPUs, default policy and topology.
func countSpec(n int) apiv1.GpuClaimSpec {
	return apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: int32(n)}}
}

// allocationOf reads a bound pod's allocation and checks that its two annotations agree with
// each other and with the node the pod is bound to.
func allocationOf(pod *corev1.Pod) (apiv1.Allocation, error) {
	raw := pod.Annotations[apiv1.AnnotationAllocated]
	a, err := apiv1.ParseAllocation(raw)
	if err != nil {
		return a, fmt.Errorf("pod %s: annotation %s: %w", pod.Name, apiv1.AnnotationAllocated, err)
	}
	if a.Node != pod.Spec.NodeName {
		return a, fmt.Errorf("pod %s is bound to node %s but %s=%q", pod.Name, pod.Spec.NodeName, apiv1.AnnotationAllocated, raw)
	}
	if got := pod.Annotations[apiv1.AnnotationGPUIDs]; got != apiv1.FormatIDs(a.IDs) {
		return a, fmt.Errorf("pod %s: %s=%q does not match %s=%q", pod.Name, apiv1.AnnotationGPUIDs, got, apiv1.AnnotationAllocated, raw)
	}
	return a, nil
}

// live reports whether a pod still holds what it was given: not being deleted, not finished.
func live(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// nodeLeases lists the GPU leases of the scenario's nodes.
func (st *scenario) nodeLeases(ctx context.Context) ([]coordinationv1.Lease, error) {
	if len(st.nodes) == 0 {
		return nil, nil
	}
	req, err := labels.NewRequirement(apiv1.LabelLeaseNode, selection.In, st.nodes)
	if err != nil {
		return nil, err
	}
	list, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*req).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the GPU leases of nodes %v: %w", st.nodes, err)
	}
	return list.Items, nil
}

// holders splits a lease's holderIdentity: one pod UID, or several for a Shared GPU.
func holders(l *coordinationv1.Lease) []string {
	h := ptr.Deref(l.Spec.HolderIdentity, "")
	if h == "" {
		return nil
	}
	return strings.Split(h, ",")
}

func leaseNames(ls []coordinationv1.Lease) []string {
	names := make([]string, 0, len(ls))
	for _, l := range ls {
		names = append(names, l.Name)
	}
	sort.Strings(names)
	return names
}

// describe prints what a failed scenario leaves behind: its pods, claims, GPU leases and
// GpuNodeStatuses, and the end of the schedulers' logs.
func (st *scenario) describe(ctx context.Context) string {
	var b strings.Builder
	s := st.suite
	fmt.Fprintf(&b, "nodes: %v\n", st.nodes)
	if pods, err := s.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	} else {
		fmt.Fprintf(&b, "pods (%d):\n", len(pods.Items))
		for i := range pods.Items {
			fmt.Fprintf(&b, "  %s\n", describePod(&pods.Items[i]))
		}
	}
	if claims, err := s.gpu.GpuV1().GpuClaims(st.ns).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "claims: %v\n", err)
	} else {
		fmt.Fprintf(&b, "GpuClaims (%d):\n", len(claims.Items))
		for i := range claims.Items {
			fmt.Fprintf(&b, "  %s\n", describeClaim(&claims.Items[i]))
		}
	}
	if leases, err := st.nodeLeases(ctx); err != nil {
		fmt.Fprintf(&b, "leases: %v\n", err)
	} else {
		fmt.Fprintf(&b, "GPU leases (%d):\n%s", len(leases), describeLeases(leases))
	}
	for _, n := range st.nodes {
		if gns, err := s.gpu.GpuV1().GpuNodeStatuses().Get(ctx, n, metav1.GetOptions{}); err != nil {
			fmt.Fprintf(&b, "GpuNodeStatus %s: %v\n", n, err)
		} else {
			fmt.Fprintf(&b, "%s\n", describeNodeStatus(gns))
		}
	}
	if sched := s.Scheduler(); sched != nil {
		fmt.Fprintf(&b, "last lines of %s:\n%s\n", sched.LogPath(), logTail(sched.LogTail(200), 25))
	}
	for _, sched := range st.schedulers {
		fmt.Fprintf(&b, "last lines of %s:\n%s\n", sched.LogPath(), logTail(sched.LogTail(200), 15))
	}
	return b.String()
}

func describePod(p *corev1.Pod) string {
	var cond string
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			cond = fmt.Sprintf(" PodScheduled=%s %s %q", c.Status, c.Reason, c.Message)
		}
	}
	deleting := ""
	if p.DeletionTimestamp != nil {
		deleting = " (being deleted)"
	}
	return fmt.Sprintf("pod %s uid=%s node=%q phase=%s%s %s=%q %s=%q claim=%q%s", p.Name, p.UID, p.Spec.NodeName, p.Status.Phase, deleting,
		apiv1.AnnotationAllocated, p.Annotations[apiv1.AnnotationAllocated], apiv1.AnnotationGPUIDs, p.Annotations[apiv1.AnnotationGPUIDs],
		podClaimName(p), cond)
}

func describeClaim(c *apiv1.GpuClaim) string {
	st := c.Status
	return fmt.Sprintf("GpuClaim %s phase=%q node=%q gpuIds=%v allocated=%q pod=%q podUID=%q message=%q",
		c.Name, st.Phase, st.NodeName, st.GpuIDs, st.Allocated, st.PodName, st.PodUID, st.Message)
}

func describeLeases(ls []coordinationv1.Lease) string {
	sorted := slices.Clone(ls)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var b strings.Builder
	for _, l := range sorted {
		fmt.Fprintf(&b, "  lease %s holder=%q pod=%s/%s\n", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""),
			l.Labels[apiv1.LabelPodNamespace], l.Labels[apiv1.LabelPodName])
	}
	return b.String()
}

func describeNodeStatus(g *apiv1.GpuNodeStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "GpuNodeStatus %s total=%d healthy=%d free=%d heartbeat=%s message=%q\n", g.Name, g.Status.Total, g.Status.Healthy, g.Status.Free,
		g.Status.LastHeartbeatTime.UTC().Format("15:04:05"), g.Status.Message)
	for _, d := range g.Status.Devices {
		util := "-"
		if d.UtilizationPercent != nil {
			util = fmt.Sprintf("%d%%", *d.UtilizationPercent)
		}
		fmt.Fprintf(&b, "  GPU %d %s island=%s %dGB/s inUseBy=%v util=%s reason=%q\n", d.ID, d.Health, d.Island, d.BandwidthGBps, d.InUseBy, util, d.Reason)
	}
	return strings.TrimRight(b.String(), "\n")
}

// logNoise marks log lines that say nothing about scheduling (the serving side's client CA
// reloads, every few seconds at -v=2).
var logNoise = []string{"configmap_cafile_content.go", "tlsconfig.go", "reflector.go"}

// logTail keeps the last n lines of log that are not noise.
func logTail(log string, n int) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		noise := false
		for _, m := range logNoise {
			noise = noise || strings.Contains(l, m)
		}
		if !noise {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}
