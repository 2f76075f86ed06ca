package features

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps that create claims and pods and wait for the scheduler's verdict; every area uses them.
func registerWorkloadSteps(sc *godog.ScenarioContext) {
	sc.Step(`^(?:a )?GpuClaim "([^"]*)" for (\d+) GPUs?(?: is created)?$`, aClaimFor)
	sc.Step(`^a GpuClaim "([^"]*)":$`, aClaimWithSpec)
	sc.Step(`^pod "([^"]*)" claims (\d+) GPUs?$`, podClaims)
	sc.Step(`^pod "([^"]*)" claims:$`, podClaimsSpec)
	sc.Step(`^pod "([^"]*)" is created with claim "([^"]*)"$`, podWithClaim)
	sc.Step(`^(\d+) pods are created with claim "([^"]*)"$`, podsWithClaim)
	sc.Step(`^(\d+) (?:more )?pods each claim (\d+) GPUs?$`, batchClaims)
	sc.Step(`^(\d+) (?:more )?pods each claim (\d+) GPUs? with a Required island$`, batchClaimsIsland)
	sc.Step(`^pods? ((?:"[^"]*"(?:, | and )?)+) (?:is|are) bound$`, podsBound)
	sc.Step(`^pod "([^"]*)" is bound to GPUs? "([^"]*)"$`, podBoundToGPUs)
	sc.Step(`^pod "([^"]*)" is bound to node (\d+)$`, podBoundToNode)
	sc.Step(`^pod "([^"]*)" is bound to GPUs? other than "([^"]*)"$`, podBoundAvoiding)
	sc.Step(`^pod "([^"]*)" is pending: "(.*)"$`, podPending)
	sc.Step(`^GpuClaim "([^"]*)" is (Pending|Reserved|Bound|Failed)$`, claimPhase)
	sc.Step(`^GpuClaim "([^"]*)" is (Pending|Reserved|Bound|Failed) with message "(.*)"$`, claimPhaseMessage)
	sc.Step(`^(\d+) of (?:them|those pods) are bound and (\d+) (?:are|stay) pending$`, batchOutcome)
}

func aClaimFor(ctx context.Context, name string, n int) error {
	return state(ctx).createClaim(ctx, name, countSpec(n))
}

func aClaimWithSpec(ctx context.Context, name string, doc *godog.DocString) error {
	spec, err := parseClaimSpec(doc.Content)
	if err != nil {
		return err
	}
	return state(ctx).createClaim(ctx, name, spec)
}

func podClaims(ctx context.Context, name string, n int) error {
	return state(ctx).claimAndPod(ctx, name, countSpec(n), podOptions{})
}

func podClaimsSpec(ctx context.Context, name string, doc *godog.DocString) error {
	spec, err := parseClaimSpec(doc.Content)
	if err != nil {
		return err
	}
	return state(ctx).claimAndPod(ctx, name, spec, podOptions{})
}

func podWithClaim(ctx context.Context, name, claim string) error {
	st := state(ctx)
	return st.createPod(ctx, st.newPod(name, claim, podOptions{}))
}

// podsWithClaim creates n pods that all name one claim, named <claim>-<i>; "them" in later
// steps means them (with every other batch of the scenario).
func podsWithClaim(ctx context.Context, n int, claim string) error {
	st := state(ctx)
	for i := range n {
		name := fmt.Sprintf("%s-%d", claim, i)
		if err := st.createPod(ctx, st.newPod(name, claim, podOptions{})); err != nil {
			return err
		}
		st.batch = append(st.batch, name)
	}
	return nil
}

// batchClaims creates n pods, each with its own claim for gpus GPUs, named job-<batch>-<i>.
// "them" in later steps means every pod of every batch of the scenario.
func batchClaims(ctx context.Context, n, gpus int) error {
	return state(ctx).batchOf(ctx, n, countSpec(gpus))
}

func batchClaimsIsland(ctx context.Context, n, gpus int) error {
	spec := countSpec(gpus)
	spec.Topology = &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired}
	return state(ctx).batchOf(ctx, n, spec)
}

func (st *scenario) batchOf(ctx context.Context, n int, spec apiv1.GpuClaimSpec) error {
	st.batches++
	for i := range n {
		name := fmt.Sprintf("job-%d-%d", st.batches, i)
		if err := st.claimAndPod(ctx, name, *spec.DeepCopy(), podOptions{}); err != nil {
			return err
		}
		st.batch = append(st.batch, name)
	}
	return nil
}

// quoted splits `"a", "b" and "c"` into its names.
func quoted(list string) []string {
	var names []string
	for _, part := range strings.Split(list, `"`) {
		if p := strings.TrimSpace(part); p != "" && p != "," && p != "and" {
			names = append(names, p)
		}
	}
	return names
}

func podsBound(ctx context.Context, list string) error {
	for _, name := range quoted(list) {
		if _, err := state(ctx).waitBound(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func podBoundToGPUs(ctx context.Context, name, ids string) error {
	a, err := state(ctx).waitBound(ctx, name)
	if err != nil {
		return err
	}
	if got := apiv1.FormatIDs(a.IDs); got != ids {
		return fmt.Errorf("pod %s got GPUs %s on node %s, want GPUs %s", name, got, a.Node, ids)
	}
	return nil
}

func podBoundAvoiding(ctx context.Context, name, ids string) error {
	a, err := state(ctx).waitBound(ctx, name)
	if err != nil {
		return err
	}
	avoid, err := apiv1.ParseIDs(ids)
	if err != nil {
		return err
	}
	for _, id := range a.IDs {
		for _, bad := range avoid {
			if id == bad {
				return fmt.Errorf("pod %s got GPUs %s on node %s, which include GPU %d", name, apiv1.FormatIDs(a.IDs), a.Node, id)
			}
		}
	}
	return nil
}

func podBoundToNode(ctx context.Context, name string, i int) error {
	st := state(ctx)
	want, err := st.node(i)
	if err != nil {
		return err
	}
	a, err := st.waitBound(ctx, name)
	if err != nil {
		return err
	}
	if a.Node != want {
		return fmt.Errorf("pod %s is bound to node %d (%s) with GPUs %s, want node %d (%s)", name, st.nodeIndex(a.Node), a.Node, apiv1.FormatIDs(a.IDs), i, want)
	}
	return nil
}

// waitBound waits until a pod is bound and everything that records its allocation agrees: the
// two annotations, the node, a lease per GPU held by the pod's UID, and the claim's status.
// The first time it sees the pod bound it remembers the pod's leases ("are unchanged").
func (st *scenario) waitBound(ctx context.Context, name string) (apiv1.Allocation, error) {
	var alloc apiv1.Allocation
	err := eventually(ctx, waitBound, "pod "+name+" bound with its GPUs locked and recorded", func(ctx context.Context) (bool, string, error) {
		pod, err := st.getPod(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Spec.NodeName == "" {
			return false, describePod(pod), nil
		}
		a, err := allocationOf(pod)
		if err != nil {
			return false, "", fmt.Errorf("%w\n%s", err, describePod(pod))
		}
		alloc = a
		problems, err := st.allocationRecorded(ctx, pod, a)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(problems) > 0 {
			return false, describePod(pod) + "\n" + strings.Join(problems, "\n"), nil
		}
		return true, "", nil
	})
	if err != nil {
		return alloc, err
	}
	if _, seen := st.leases[name]; !seen {
		if err := st.rememberLeases(ctx, name); err != nil {
			return alloc, err
		}
	}
	return alloc, nil
}

// allocationRecorded lists what does not (yet) agree with a bound pod's allocation: a lease
// per GPU held by the pod, and the claim's status.
func (st *scenario) allocationRecorded(ctx context.Context, pod *corev1.Pod, a apiv1.Allocation) ([]string, error) {
	var problems []string
	lnames, err := leaseNamesOf(pod, a)
	if err != nil {
		return nil, err
	}
	for _, lname := range lnames {
		l, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, lname, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			problems = append(problems, fmt.Sprintf("lease %s does not exist", lname))
			continue
		}
		if err != nil {
			return nil, err
		}
		if !contains(holders(l), string(pod.UID)) {
			problems = append(problems, fmt.Sprintf("lease %s is held by %v, not by the pod's UID %s", lname, holders(l), pod.UID))
		}
	}
	claimName := podClaimName(pod)
	claim, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cs := claim.Status
	if cs.Phase != apiv1.ClaimBound || cs.Allocated != a.String() || cs.PodUID != string(pod.UID) || cs.PodName != pod.Name || cs.NodeName != a.Node ||
		strings.Join(cs.MigDevices, ",") != pod.Annotations[apiv1.AnnotationMIGDevices] {
		problems = append(problems, fmt.Sprintf("claim status does not record the allocation %s of pod %s: %s", a, pod.Name, describeClaim(claim)))
	}
	return problems, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// podPending waits until the scheduler has tried the pod and said why it cannot place it,
// and checks that it is not bound.
func podPending(ctx context.Context, name, msg string) error {
	st := state(ctx)
	want := st.expand(msg)
	return eventually(ctx, waitBound, fmt.Sprintf("pod %s unschedulable because %q", name, want), func(ctx context.Context) (bool, string, error) {
		pod, err := st.getPod(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		if pod.Spec.NodeName != "" {
			return false, "", fmt.Errorf("pod %s was bound, but it must stay pending because %q:\n%s", name, want, describePod(pod))
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, want) {
				return true, "", nil
			}
		}
		return false, describePod(pod), nil
	})
}

func claimPhase(ctx context.Context, name, phase string) error {
	return state(ctx).waitClaim(ctx, name, apiv1.ClaimPhase(phase), nil)
}

func claimPhaseMessage(ctx context.Context, name, phase, msg string) error {
	st := state(ctx)
	want := st.expand(msg)
	return st.waitClaim(ctx, name, apiv1.ClaimPhase(phase), &want)
}

// waitClaim waits until a claim has the phase, and the exact message when msg is set.
func (st *scenario) waitClaim(ctx context.Context, name string, phase apiv1.ClaimPhase, msg *string) error {
	what := fmt.Sprintf("GpuClaim %s %s", name, phase)
	if msg != nil {
		what += fmt.Sprintf(" with message %q", *msg)
	}
	return eventually(ctx, waitBound, what, func(ctx context.Context) (bool, string, error) {
		c, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ok := c.Status.Phase == phase && (msg == nil || c.Status.Message == *msg)
		return ok, describeClaim(c), nil
	})
}

// batchOutcome waits until bound pods of the scenario's batches are bound and the other
// pending ones were found unschedulable, then checks that no GPU is held twice.
func batchOutcome(ctx context.Context, bound, pending int) error {
	st := state(ctx)
	if bound+pending != len(st.batch) {
		return fmt.Errorf("the scenario created %d pods in batches, not %d", len(st.batch), bound+pending)
	}
	err := eventually(ctx, waitBound, fmt.Sprintf("%d pods bound and %d unschedulable", bound, pending), func(ctx context.Context) (bool, string, error) {
		list, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		inBatch := map[string]bool{}
		for _, n := range st.batch {
			inBatch[n] = true
		}
		var nb, np int
		var lines []string
		for i := range list.Items {
			p := &list.Items[i]
			if !inBatch[p.Name] {
				continue
			}
			lines = append(lines, describePod(p))
			if p.Spec.NodeName != "" {
				nb++
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					np++
				}
			}
		}
		sort.Strings(lines)
		if nb > bound {
			return false, "", fmt.Errorf("%d pods are bound, more than the %d GPUs allow:\n%s", nb, bound, strings.Join(lines, "\n"))
		}
		done := nb == bound && np == pending
		observed := fmt.Sprintf("%d bound, %d unschedulable:\n%s", nb, np, strings.Join(lines, "\n"))
		if !done {
			if leases, err := st.nodeLeases(ctx); err == nil {
				observed += "\nGPU leases:\n" + describeLeases(leases)
			}
		}
		return done, observed, nil
	})
	if err != nil {
		return err
	}
	for _, name := range st.batch {
		pod, err := st.getPod(ctx, name)
		if err != nil {
			return err
		}
		if pod.Spec.NodeName != "" {
			if _, err := st.waitBound(ctx, name); err != nil {
				return err
			}
		}
	}
	return st.noGPUHeldTwice(ctx)
}

// leaseNamesOf names the leases a bound pod with allocation a holds: one per GPU, or for a MIG
// pod one per MIG device (on the GPUs its allocation names).
func leaseNamesOf(pod *corev1.Pod, a apiv1.Allocation) ([]string, error) {
	migs, err := podMIGDevices(pod)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range migs {
		lname, err := apiv1.MIGLeaseName(a.Node, m.GPU, m.Slot)
		if err != nil {
			return nil, err
		}
		out = append(out, lname)
	}
	if len(migs) > 0 {
		return out, nil
	}
	for _, id := range a.IDs {
		lname, err := apiv1.LeaseName(a.Node, id)
		if err != nil {
			return nil, err
		}
		out = append(out, lname)
	}
	return out, nil
}

// podMIGDevices is the MIG devices a bound pod carries (apiv1.AnnotationMIGDevices); none for
// a pod without the annotation.
func podMIGDevices(pod *corev1.Pod) ([]apiv1.MIGDeviceRef, error) {
	v, ok := pod.Annotations[apiv1.AnnotationMIGDevices]
	if !ok {
		return nil, nil
	}
	refs, err := apiv1.ParseMIGDevices(v)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	return refs, nil
}
