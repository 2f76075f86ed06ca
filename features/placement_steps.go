package features

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cucumber/godog"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps about the explicit placement map (gpu.scheduling/gpu-scheduling-map) of an indexed Job.
func registerPlacementSteps(sc *godog.ScenarioContext) {
	sc.Step(`^indexed Job "([^"]*)" runs (\d+) pods? at once for (\d+) seconds? each from claim template "([^"]*)" with the scheduling map:$`, createMappedJob)
	sc.Step(`^pod (\d+) of Job "([^"]*)" runs on node (\d+) with GPUs "([^"]*)" and holds their leases$`, indexedPodPinned)
	sc.Step(`^pod (\d+) of Job "([^"]*)" stays pending with an event saying "(.*)"$`, indexedPodPending)
	sc.Step(`^StatefulSet "([^"]*)" runs (\d+) pods? from claim template "([^"]*)" with the scheduling map:$`, createMappedStatefulSet)
	sc.Step(`^Job "([^"]*)" is deleted$`, deleteJob)
}

// nodeRef is "{node N}" in a map or message: the scenario's node N (names differ per run).
var nodeRef = regexp.MustCompile(`\{node (\d+)\}`)

// expandNodes replaces {node N} with node N's name and {namespace} with the namespace.
func (st *scenario) expandNodes(s string) (string, error) {
	var err error
	s = nodeRef.ReplaceAllStringFunc(s, func(m string) string {
		i, _ := strconv.Atoi(nodeRef.FindStringSubmatch(m)[1])
		name, e := st.node(i)
		if e != nil {
			err = e
		}
		return name
	})
	return st.expand(s), err
}

func createMappedJob(ctx context.Context, name string, n, seconds int, template string, doc *godog.DocString) error {
	st := state(ctx)
	m, err := st.expandNodes(doc.Content)
	if err != nil {
		return err
	}
	return st.createJob(ctx, "indexed", name, n, seconds, template, map[string]string{apiv1.AnnotationSchedulingMap: m})
}

func createMappedStatefulSet(ctx context.Context, name string, n int, template string, doc *godog.DocString) error {
	st := state(ctx)
	m, err := st.expandNodes(doc.Content)
	if err != nil {
		return err
	}
	return st.createStatefulSet(ctx, name, n, template, map[string]string{apiv1.AnnotationSchedulingMap: m})
}

// indexedPod returns the live pod of an indexed Job with the given completion index, or nil.
func (st *scenario) indexedPod(ctx context.Context, job string, index int) (*corev1.Pod, error) {
	list, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp == nil && live(p) && p.Annotations[apiv1.AnnotationJobCompletionIndex] == strconv.Itoa(index) {
			return p, nil
		}
	}
	return nil, nil
}

// indexedPodPinned waits until the Job's pod of that index is bound to exactly node and ids,
// with one GPU lease per ID held by that pod and by no one else.
func indexedPodPinned(ctx context.Context, index int, job string, node int, ids string) error {
	st := state(ctx)
	nodeName, err := st.node(node)
	if err != nil {
		return err
	}
	want, err := apiv1.ParseAllocation(nodeName + ":" + ids)
	if err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("pod %d of Job %s holds %s", index, job, want), func(ctx context.Context) (bool, string, error) {
		pod, err := st.indexedPod(ctx, job, index)
		if err != nil || pod == nil {
			return false, fmt.Sprintf("no live pod of index %d: %v", index, err), nil
		}
		if pod.Spec.NodeName == "" {
			return false, describePod(pod) + "\n" + st.describe(ctx), nil
		}
		got, err := allocationOf(pod)
		if err != nil {
			return false, err.Error(), nil
		}
		if got.String() != want.String() {
			return false, "", fmt.Errorf("pod %s (index %d) was placed at %s; its map entry says %s", pod.Name, index, got, want)
		}
		for _, id := range want.IDs {
			lease, err := apiv1.LeaseName(want.Node, id)
			if err != nil {
				return false, "", err
			}
			l, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, lease, metav1.GetOptions{})
			if err != nil {
				return false, fmt.Sprintf("lease %s: %v", lease, err), nil
			}
			if h := holders(l); len(h) != 1 || types.UID(h[0]) != pod.UID {
				return false, fmt.Sprintf("lease %s held by %v, want pod %s (%s) alone", lease, h, pod.Name, pod.UID), nil
			}
		}
		return true, "", nil
	})
}

// indexedPodPending waits until the Job's pod of that index is unschedulable with msg in its
// PodScheduled condition and in a FailedScheduling event; {pod} in msg is the pod's name.
func indexedPodPending(ctx context.Context, index int, job, msg string) error {
	st := state(ctx)
	msg, err := st.expandNodes(msg)
	if err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("pod %d of Job %s pending because %q", index, job, msg), func(ctx context.Context) (bool, string, error) {
		pod, err := st.indexedPod(ctx, job, index)
		if err != nil || pod == nil {
			return false, fmt.Sprintf("no live pod of index %d: %v", index, err), nil
		}
		want := strings.ReplaceAll(msg, "{pod}", pod.Name)
		if pod.Spec.NodeName != "" {
			return false, "", fmt.Errorf("pod %s (index %d) was bound, but it must stay pending because %q:\n%s", pod.Name, index, want, describePod(pod))
		}
		inCondition := false
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, want) {
				inCondition = true
			}
		}
		if !inCondition {
			return false, describePod(pod), nil
		}
		events, err := st.suite.kube.EventsV1().Events(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range events.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.UID == pod.UID {
				if e.Type == corev1.EventTypeWarning && e.Reason == "FailedScheduling" && strings.Contains(e.Note, want) {
					return true, "", nil
				}
				seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
			}
		}
		return false, "events of " + pod.Name + ": " + strings.Join(seen, "\n"), nil
	})
}

// deleteJob deletes a Job and its pods (background propagation, as kubectl does).
func deleteJob(ctx context.Context, name string) error {
	st := state(ctx)
	bg := metav1.DeletePropagationBackground
	if err := st.suite.kube.BatchV1().Jobs(st.ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		return fmt.Errorf("deleting Job %s/%s: %w", st.ns, name, err)
	}
	return nil
}
