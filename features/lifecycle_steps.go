package features

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
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
