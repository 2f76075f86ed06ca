package features

import (
	"context"
	"fmt"

	"github.com/cucumber/godog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps about GPU health as the node agent reports it.
func registerHealthSteps(sc *godog.ScenarioContext) {
	sc.Step(`^GPU (\d+) of node (\d+) fails with "([^"]*)"$`, gpuFails)
	sc.Step(`^GPU (\d+) of node (\d+) recovers$`, gpuRecovers)
	sc.Step(`^the NVML driver of node (\d+) fails$`, nvmlFails)
	sc.Step(`^GPU (\d+) of node (\d+) is reported (Healthy|Unhealthy|Unknown)$`, gpuReported)
	sc.Step(`^every GPU of node (\d+) is reported (Healthy|Unhealthy|Unknown)$`, allReported)
	sc.Step(`^GPU (\d+) of node (\d+) has recovered (\d+) times?, since a time after every other GPU's$`, gpuRecovered)
	sc.Step(`^no pod is bound to GPU (\d+) of node (\d+)$`, noPodOnGPU)
	sc.Step(`^no pod is bound to node (\d+)$`, noPodOnNode)
}

func gpuFails(ctx context.Context, id, node int, fault string) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	return st.suite.agents.inject(name, id, fault)
}

func gpuRecovers(ctx context.Context, id, node int) error {
	return gpuFails(ctx, id, node, "recover")
}

func nvmlFails(ctx context.Context, node int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	return st.suite.agents.failInit(ctx, name)
}

// gpuReported waits until the node's GpuNodeStatus reports the GPU in the given health. A
// GPU that recovers is trusted again only after it stayed quiet a while, hence the longer bound.
func gpuReported(ctx context.Context, id, node int, health string) error {
	return state(ctx).waitHealth(ctx, node, func(d apiv1.Device) bool { return int(d.ID) != id || string(d.Health) == health },
		fmt.Sprintf("GPU %d of node %d %s", id, node, health))
}

func allReported(ctx context.Context, node int, health string) error {
	return state(ctx).waitHealth(ctx, node, func(d apiv1.Device) bool { return string(d.Health) == health },
		fmt.Sprintf("every GPU of node %d %s", node, health))
}

// gpuRecovered checks what `kubectl gpu health` shows as SINCE and RECOVERIES: the GPU's
// recovery count, and a transition time later than that of the GPUs that never changed (those
// keep the time the agent first saw them).
func gpuRecovered(ctx context.Context, id, node, times int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	return eventually(ctx, waitSlow, fmt.Sprintf("GPU %d of node %d recovered %d times", id, node, times), func(ctx context.Context) (bool, string, error) {
		g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var mine *apiv1.Device
		for i := range g.Status.Devices {
			if int(g.Status.Devices[i].ID) == id {
				mine = &g.Status.Devices[i]
			}
		}
		if mine == nil || mine.Health != apiv1.Healthy || int(mine.RecoveryCount) != times || mine.LastTransitionTime == nil {
			return false, describeNodeStatus(g), nil
		}
		for _, d := range g.Status.Devices {
			if d.ID == mine.ID {
				continue
			}
			if d.RecoveryCount != 0 || d.LastTransitionTime == nil || !d.LastTransitionTime.Before(mine.LastTransitionTime) {
				return false, fmt.Sprintf("GPU %d: %s since %v, %d recoveries; GPU %d since %v", d.ID, d.Health, d.LastTransitionTime,
					d.RecoveryCount, id, mine.LastTransitionTime), nil
			}
		}
		return true, "", nil
	})
}

func (st *scenario) waitHealth(ctx context.Context, node int, ok func(apiv1.Device) bool, what string) error {
	name, err := st.node(node)
	if err != nil {
		return err
	}
	return eventually(ctx, waitSlow, what, func(ctx context.Context) (bool, string, error) {
		g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(g.Status.Devices) == 0 {
			return false, describeNodeStatus(g), nil
		}
		for _, d := range g.Status.Devices {
			if !ok(d) {
				return false, describeNodeStatus(g), nil
			}
		}
		return true, "", nil
	})
}

// noPodOnGPU checks the live pods of the scenario: none holds the GPU.
func noPodOnGPU(ctx context.Context, id, node int) error {
	return state(ctx).noPodOn(ctx, node, &id)
}

func noPodOnNode(ctx context.Context, node int) error {
	return state(ctx).noPodOn(ctx, node, nil)
}

func (st *scenario) noPodOn(ctx context.Context, node int, id *int) error {
	name, err := st.node(node)
	if err != nil {
		return err
	}
	pods, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != name || !live(p) {
			continue
		}
		if id == nil {
			return fmt.Errorf("pod %s is bound to node %d (%s): %s", p.Name, node, name, describePod(p))
		}
		a, err := allocationOf(p)
		if err != nil {
			return err
		}
		for _, got := range a.IDs {
			if got == *id {
				return fmt.Errorf("pod %s holds GPU %d of node %d: %s", p.Name, *id, node, describePod(p))
			}
		}
	}
	return nil
}
