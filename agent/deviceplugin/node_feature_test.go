package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TestNodeFeature runs features/node.feature: the scenarios that say in words what the tests
// in kubelet_test.go prove, on the same harness (the kubelet's device manager and our plugin in
// this test process, inside TestMain's private mount namespace). The control-plane acceptance
// suite leaves @node to this test.
func TestNodeFeature(t *testing.T) {
	suite := godog.TestSuite{
		Name:                "node",
		ScenarioInitializer: initNodeScenario,
		Options: &godog.Options{
			Format:   "pretty",
			Paths:    []string{"../../features/node.feature"},
			Strict:   true,
			NoColors: true,
			TestingT: t,
		},
	}
	if code := suite.Run(); code != 0 {
		t.Errorf("features/node.feature failed (exit status %d)", code)
	}
}

// stepT lets a godog step's T stand in for a *testing.T in the node harness: Fatal stops the
// step and fails the scenario.
type stepT struct{ godog.TestingT }

func (stepT) Helper() {}

type nodeScenario struct {
	n                 *node
	cleanups          []func()
	swaps, containers int
	pods              []*corev1.Pod
	admitErr          error
}

func initNodeScenario(sc *godog.ScenarioContext) {
	s := &nodeScenario{}
	sc.After(func(ctx context.Context, _ *godog.Scenario, err error) (context.Context, error) {
		for i := len(s.cleanups) - 1; i >= 0; i-- {
			s.cleanups[i]()
		}
		return ctx, err
	})
	sc.Step(`^a node with 8 mock GPUs whose kubelet runs the device manager with our device plugin$`, func(ctx context.Context) {
		s.n = newNodeWith(stepT{godog.T(ctx)}, func(f func()) { s.cleanups = append(s.cleanups, f) })
	})
	sc.Step(`^(\d+) pods bound to (\d+) different GPUs each start at once, (\d+) times over$`, func(pods, count, rounds int) error {
		if pods != 2 {
			return fmt.Errorf("the harness starts pods two at a time, not %d", pods)
		}
		s.swaps, s.containers = s.n.twoPodsAtOnce(rounds, count)
		return nil
	})
	sc.Step(`^every container got exactly the GPUs the scheduler chose for its pod$`, func() error {
		if s.containers == 0 {
			return errors.New("no container was started")
		}
		if s.swaps != 0 {
			return fmt.Errorf("%d of %d containers got GPUs other than the scheduler's", s.swaps, s.containers)
		}
		return nil
	})
	sc.Step(`^the kubelet recorded the same GPUs for every pod$`, func() error {
		// twoPodsAtOnce counts a container as swapped when the kubelet's own record (its
		// pod-resources view) differs from the scheduler's choice, so this follows from the
		// count above; it is stated apart because it is what `kubectl describe node` and
		// monitoring agents read.
		if s.containers == 0 || s.swaps != 0 {
			return fmt.Errorf("%d of %d pods recorded with other GPUs", s.swaps, s.containers)
		}
		return nil
	})
	setHealth := func(id int, healthy bool) error {
		gpus := slices.Clone(s.n.gpus)
		if id < 0 || id >= len(gpus) {
			return fmt.Errorf("the node has no GPU %d", id)
		}
		gpus[id].Healthy = healthy
		return s.n.plugin.SetGPUs(gpus)
	}
	sc.Step(`^GPU (\d+) turns unhealthy$`, func(id int) error { return setHealth(id, false) })
	sc.Step(`^GPU (\d+) recovers$`, func(id int) error { return setHealth(id, true) })
	sc.Step(`^the kubelet counts (\d+) allocatable GPUs, GPU (\d+) not among them$`, func(want, id int) error {
		s.n.waitAllocatable(want)
		if _, ok := s.n.mgr.GetAllocatableDevices()[resName][fmt.Sprint(id)]; ok {
			return fmt.Errorf("the kubelet still lists GPU %d as allocatable", id)
		}
		return nil
	})
	sc.Step(`^the kubelet counts (\d+) allocatable GPUs$`, func(want int) { s.n.waitAllocatable(want) })
	sc.Step(`^a pod asking for (\d+) GPUs? is bound to the node without an allocation from gpu-scheduler$`, func(count int) {
		_, s.admitErr = s.n.admit(s.n.bind(count, nil, time.Now()))
	})
	sc.Step(`^the kubelet refuses to start it with "([^"]*)"$`, func(want string) error {
		if s.admitErr == nil {
			return errors.New("the kubelet started a pod that holds no GPUs of ours")
		}
		if !strings.Contains(s.admitErr.Error(), want) || !strings.Contains(s.admitErr.Error(), apiv1.AnnotationAllocated) {
			return fmt.Errorf("the kubelet's error does not say why: %w", s.admitErr)
		}
		return nil
	})
	sc.Step(`^a pod bound to GPUs ([\d,]+) and a pod bound to GPUs ([\d,]+)$`, func(a, b string) error {
		now := time.Now()
		for i, list := range []string{a, b} {
			ids, err := apiv1.ParseIDs(list)
			if err != nil {
				return err
			}
			s.pods = append(s.pods, s.n.bind(len(ids), ids, now.Add(time.Duration(i)*time.Second)))
		}
		return nil
	})
	podGets := func(i int, list string) error {
		ids, err := apiv1.ParseIDs(list)
		if err != nil {
			return err
		}
		s.n.mustGet(s.pods[i], ids)
		return nil
	}
	sc.Step(`^the first pod has started with GPUs ([\d,]+)$`, func(list string) error { return podGets(0, list) })
	sc.Step(`^the second pod starts with GPUs ([\d,]+)$`, func(list string) error { return podGets(1, list) })
	sc.Step(`^the agent restarts$`, func() {
		s.n.stopPlugin()
		s.n.waitAllocatable(0)
		s.n.startPlugin()
		s.n.waitAllocatable(len(s.n.gpus))
	})
	sc.Step(`^the kubelet restarts$`, func() error {
		if err := s.n.mgr.Stop(klog.Background()); err != nil {
			return err
		}
		s.n.startKubelet()
		s.n.waitAllocatable(len(s.n.gpus))
		return nil
	})
	sc.Step(`^the first pod still holds GPUs ([\d,]+) in the kubelet's checkpoint$`, func(list string) error {
		ids, err := apiv1.ParseIDs(list)
		if err != nil {
			return err
		}
		if got := s.n.kubeletIDs(s.pods[0]); !slices.Equal(got, ids) {
			return fmt.Errorf("after the restarts the first pod holds %v, want %v", got, ids)
		}
		return nil
	})
}
