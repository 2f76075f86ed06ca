package features

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Steps about a pod's life: deletion, force deletion, completion, and what they free.
func registerLifecycleSteps(sc *godog.ScenarioContext) {
	sc.Step(`^pod "([^"]*)" claims (\d+) GPUs? and runs for (\d+) seconds?$`, podRunsFor)
	sc.Step(`^pod "([^"]*)" is (deleted|force-deleted)$`, podDeleted)
	sc.Step(`^pod "([^"]*)" completes$`, podCompletes)
	sc.Step(`^pod "([^"]*)" goes away by being (deleted|force-deleted|completed)$`, podGoesAway)
	sc.Step(`^the GPU leases of pod "([^"]*)" are released$`, leasesReleased)
	sc.Step(`^priority class "([^"]*)" with value (\d+)$`, priorityClass)
	sc.Step(`^pod "([^"]*)" with priority class "([^"]*)" claims (\d+) GPUs?$`, podWithPriority)
	sc.Step(`^pod "([^"]*)" is preempted$`, podPreempted)
}

// priorityClass creates a PriorityClass; they are cluster-wide, so one that exists already
// with the same value is reused by later scenarios.
func priorityClass(ctx context.Context, name string, value int) error {
	st := state(ctx)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: int32(value)}
	_, err := st.suite.kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, err := st.suite.kube.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading priority class %s: %w", name, err)
		}
		if old.Value != int32(value) {
			return fmt.Errorf("priority class %s exists with value %d, not %d; use another name", name, old.Value, value)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating priority class %s: %w", name, err)
	}
	return nil
}

func podWithPriority(ctx context.Context, name, class string, gpus int) error {
	return state(ctx).claimAndPod(ctx, name, countSpec(gpus), podOptions{priorityClass: class})
}

// podPreempted waits until the scheduler has evicted a pod: it is gone, or terminating with
// the DisruptionTarget condition the scheduler sets on its victims.
func podPreempted(ctx context.Context, name string) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "pod "+name+" preempted", func(ctx context.Context) (bool, string, error) {
		p, err := st.getPod(ctx, name)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler {
				return true, "", nil
			}
		}
		return false, describePod(p), nil
	})
}

func podRunsFor(ctx context.Context, name string, gpus, seconds int) error {
	return state(ctx).claimAndPod(ctx, name, countSpec(gpus), podOptions{runFor: strconv.Itoa(seconds) + "s"})
}

// podDeleted deletes a pod, with its grace period or with none, and waits until it is gone.
func podDeleted(ctx context.Context, name, how string) error {
	st := state(ctx)
	opts := metav1.DeleteOptions{}
	if how == "force-deleted" {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	if err := st.suite.kube.CoreV1().Pods(st.ns).Delete(ctx, name, opts); err != nil {
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	return eventually(ctx, waitBound, "pod "+name+" gone", func(ctx context.Context) (bool, string, error) {
		p, err := st.getPod(ctx, name)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return false, describePod(p), nil
	})
}

// podCompletes waits until a pod that runs for a while has Succeeded.
func podCompletes(ctx context.Context, name string) error {
	st := state(ctx)
	return eventually(ctx, waitSlow, "pod "+name+" Succeeded", func(ctx context.Context) (bool, string, error) {
		p, err := st.getPod(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		return p.Status.Phase == corev1.PodSucceeded, describePod(p), nil
	})
}

// podGoesAway is the one step of a Scenario Outline over the three ways a pod ends.
func podGoesAway(ctx context.Context, name, how string) error {
	if how == "completed" {
		return podCompletes(ctx, name)
	}
	return podDeleted(ctx, name, how)
}

// leasesReleased waits until no GPU lease names the pod's UID any more.
func leasesReleased(ctx context.Context, name string) error {
	st := state(ctx)
	uid, err := st.podUID(name)
	if err != nil {
		return err
	}
	return eventually(ctx, waitBound, "the GPU leases of pod "+name+" released", func(ctx context.Context) (bool, string, error) {
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		var held []string
		for i := range leases {
			if contains(holders(&leases[i]), string(uid)) {
				held = append(held, leases[i].Name)
			}
		}
		return len(held) == 0, fmt.Sprintf("pod %s (%s) still holds leases %s", name, uid, strings.Join(held, ", ")), nil
	})
}
