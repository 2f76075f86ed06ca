package runner

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/liveness"
	agentmetrics "github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/dra"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
)

// inProcessFleet runs the production agent fleet (package sim/fleet: one agent loop per kwok
// node over the mock NVML of the node's topology) inside this process until ctx ends.
type inProcessFleet struct {
	f   *fleet.Fleet
	pub *dra.Publisher
}

func (p inProcessFleet) SlicesPublished() int {
	if p.pub == nil {
		return 0
	}
	return p.pub.Published()
}

func (p inProcessFleet) LivenessWrites() metrics.LivenessWrites {
	creates, renewals := liveness.Writes()
	return metrics.LivenessWrites{Creates: float64(creates), Renewals: float64(renewals)}
}

func (p inProcessFleet) Inject(_ context.Context, node string, gpu int, fault string) error {
	ft, err := mock.ParseFault(fault)
	if err != nil {
		return err
	}
	return p.f.InjectFault(node, gpu, ft)
}

// StartInProcessFleet starts the agent fleet for c's nodes. With GPU faults, probes run every
// 2s and a GPU recovers after 10s without faults, so a scenario's faults and recoveries show
// within seconds; without, the agents run with the production defaults.
func StartInProcessFleet(ctx context.Context, c *cluster.Cluster, o FleetOptions) (Fleet, error) {
	agentmetrics.Register() // the agent's metrics are live only once registered, as in gpu-agent
	cfg := c.RESTConfig()
	// The client and the fleet's write budget are sized for the start, when every agent
	// creates and writes its GpuNodeStatus at once (5,000 nodes: 10,000 writes, 33 s at 300 a
	// second); in a workload the fleet writes far below them, so they do not change what a run
	// measures.
	cfg.QPS, cfg.Burst = 1500, 3000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for the agent fleet: %w", err)
	}
	gcs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("GPU client for the agent fleet: %w", err)
	}
	fc := fleet.Config{
		KubeClient: cs, GPUClient: gcs, LeaseNamespace: LeaseNamespace,
		Agent:    agentConfig(o),
		WriteQPS: 1000, WriteBurst: 2000,
	}
	var pub *dra.Publisher
	if o.DRA {
		if err := dra.EnsureDeviceClass(ctx, cs); err != nil {
			return nil, err
		}
		// The slices share the fleet's write budget in spirit: one create per node at start,
		// then a write per health change.
		if pub, err = dra.NewPublisher(dra.PublisherConfig{Client: cs, WriteQPS: 300, WriteBurst: 600}); err != nil {
			return nil, err
		}
		fc.DeviceHook = pub.Hook
		go pub.Run(ctx)
	}
	f, err := fleet.New(fc)
	if err != nil {
		return nil, err
	}
	go func() {
		if err := f.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Agent fleet stopped")
		}
	}()
	return inProcessFleet{f: f, pub: pub}, nil
}

func agentConfig(o FleetOptions) agent.Config {
	if o.GPUFaults {
		return agent.Config{ProbeInterval: 2 * time.Second, RecoveryQuietPeriod: 10 * time.Second}
	}
	return agent.Config{}
}
