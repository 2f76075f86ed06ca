package features

import (
	"context"
	"fmt"

	"github.com/cucumber/godog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps about the load the node agent reads from (mock) NVML and publishes.
func registerTelemetrySteps(sc *godog.ScenarioContext) {
	sc.Step(`^the GPUs of node (\d+) run at (\d+)%$`, gpusRunAt)
	sc.Step(`^node (\d+) reports its GPUs (\d+)% utilized$`, nodeReportsUtilization)
	sc.Step(`^every GPU of node (\d+) reports its memory in use, temperature and power$`, nodeReportsTelemetry)
	sc.Step(`^pod "([^"]*)" claims (\d+) GPUs? with node strategy "([^"]*)"$`, podClaimsWithStrategy)
}

// gpusRunAt pins the simulated utilisation of every GPU of the node.
func gpusRunAt(ctx context.Context, node, percent int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the GpuNodeStatus of node %d (%s) for its GPU count: %w", node, name, err)
	}
	return st.suite.agents.setLoad(name, len(g.Status.Devices), percent)
}

// nodeReportsUtilization waits until every GPU of the node reports the utilisation in its
// GpuNodeStatus, the only place the scheduler reads it from.
func nodeReportsUtilization(ctx context.Context, node, percent int) error {
	return state(ctx).waitHealth(ctx, node, func(d apiv1.Device) bool {
		return d.UtilizationPercent != nil && int(*d.UtilizationPercent) == percent
	}, fmt.Sprintf("every GPU of node %d reports %d%% utilization", node, percent))
}

func nodeReportsTelemetry(ctx context.Context, node int) error {
	return state(ctx).waitHealth(ctx, node, func(d apiv1.Device) bool {
		return d.UtilizationPercent != nil && d.MemoryUtilizationPercent != nil && d.MemoryUsedMiB != nil &&
			*d.MemoryUsedMiB < d.MemoryMiB && d.TemperatureCelsius != nil && d.PowerWatts != nil && *d.PowerWatts > 0 &&
			d.ECCUncorrectedErrors != nil
	}, fmt.Sprintf("every GPU of node %d reports utilisation, memory in use, temperature, power and ECC counts", node))
}

func podClaimsWithStrategy(ctx context.Context, name string, n int, strategy string) error {
	return state(ctx).claimAndPod(ctx, name, countSpec(n), podOptions{annotations: map[string]string{apiv1.AnnotationNodeStrategy: strategy}})
}
