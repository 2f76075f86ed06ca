package features

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
)

// Agent timings for the suite: short, so that health changes show within a second or two.
var agentTimings = agent.Config{
	ProbeInterval:       time.Second,
	RecoveryQuietPeriod: 2 * time.Second,
	InitBackoff:         time.Second,
	MaxInitBackoff:      2 * time.Second,
	MinWriteInterval:    100 * time.Millisecond,
	// Telemetry read five times a second and written within a tenth of a second of moving,
	// so that a load a step sets shows in the status at once.
	TelemetryInterval:        200 * time.Millisecond,
	TelemetryWritesPerMinute: 600,
	UsageWriteInterval:       time.Second,
}

// agentFleet runs the production node agent in fleet mode (package sim/fleet) for the
// scenarios' kwok nodes: every node labelled gpu.scheduling/topology gets an agent over a
// mock NVML server of that topology, the definitions the simulator uses. Faults are injected
// into those servers.
type agentFleet struct {
	fleet  *fleet.Fleet
	cancel context.CancelFunc
	done   chan error
}

func startAgentFleet(ctx context.Context, s *Suite) (*agentFleet, error) {
	return startFleet(ctx, fleet.Config{
		KubeClient:       s.kube,
		GPUClient:        s.gpu,
		LeaseNamespace:   LeaseNamespace,
		Agent:            agentTimings,
		EventWaitTimeout: 200 * time.Millisecond,
		// A release's nodes (@two-schedulers) are served by that release's own fleet.
		NodeSelector: "!" + LabelRelease,
	}, "fleet")
}

// startFleet runs a fleet with cfg until stop; name names its log lines.
func startFleet(ctx context.Context, cfg fleet.Config, name string) (*agentFleet, error) {
	// As the agent command does; the fleet's per-node series need registered metrics.
	metrics.Register()
	f, err := fleet.New(cfg)
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), klog.Background().WithName(name)))
	a := &agentFleet{fleet: f, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- f.Run(fctx) }()
	return a, nil
}

// add waits until the fleet runs an agent for each node that listens to all its GPUs' events
// (a fault injected earlier would only be seen by the next probe).
func (a *agentFleet) add(ctx context.Context, nodes []string) error {
	return eventually(ctx, waitBound, fmt.Sprintf("the agents of nodes %v watch their GPUs", nodes), func(context.Context) (bool, string, error) {
		for _, n := range nodes {
			if !a.fleet.Watched(n) {
				return false, fmt.Sprintf("no agent watches the GPUs of node %s yet; agents run for %v", n, a.fleet.Nodes()), nil
			}
		}
		return true, "", nil
	})
}

// remove waits until the fleet has stopped the agents of nodes that were deleted, so that no
// agent writes their GpuNodeStatus again.
func (a *agentFleet) remove(ctx context.Context, nodes []string) error {
	return eventually(ctx, waitBound, fmt.Sprintf("the agents of nodes %v stopped", nodes), func(context.Context) (bool, string, error) {
		running := a.fleet.Nodes()
		for _, n := range nodes {
			if slices.Contains(running, n) {
				return false, fmt.Sprintf("an agent still runs for node %s", n), nil
			}
		}
		return true, "", nil
	})
}

// inject applies a fault ("xid79", "dbe", "lost", "remap-failure", "recover") to GPU id of node.
func (a *agentFleet) inject(node string, id int, fault string) error {
	f, err := mock.ParseFault(fault)
	if err != nil {
		return err
	}
	return a.fleet.InjectFault(node, id, f)
}

// setLoad pins the utilisation of every GPU of node to percent.
func (a *agentFleet) setLoad(node string, gpus, percent int) error {
	for i := range gpus {
		if err := a.fleet.SetLoad(node, i, percent); err != nil {
			return err
		}
	}
	return nil
}

// failInit makes NVML fail on node as a crashed driver does: the running session breaks and
// every new initialisation fails.
func (a *agentFleet) failInit(_ context.Context, node string) error {
	return a.fleet.FailDriver(node, nvml.ERROR_DRIVER_NOT_LOADED)
}

func (a *agentFleet) stop() error {
	a.cancel()
	select {
	case err := <-a.done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the agent fleet did not stop within 30s")
	}
}
