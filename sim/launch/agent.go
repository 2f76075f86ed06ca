package launch

import (
	"context"
	"strconv"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// AgentFleetOptions configure one gpu-sim agent-fleet process.
type AgentFleetOptions struct {
	// Name tells processes apart in logs; default "agent-fleet".
	Name string
	// LeaseNamespace holds the GPU leases; default "gpu-scheduler".
	LeaseNamespace string
	// NodeSelector narrows the simulated nodes (--node-selector); empty: all of them.
	NodeSelector string
	// Verbosity is the klog -v level; default 2.
	Verbosity int
}

// AgentFleet is a running gpu-sim agent-fleet.
type AgentFleet struct {
	*cluster.Process
	// HTTPPort serves /healthz, /readyz, /fault and /nodes in plain HTTP; MetricsPort serves
	// /metrics (and the probes) over HTTPS to callers the apiserver authorises.
	HTTPPort, MetricsPort int
}

// StartAgentFleet runs bin/gpu-sim agent-fleet against the cluster (mock NVML per labelled
// node) and waits until it is ready. The fleet is the simulator's, so it is built into the
// simulator's binary, not into gpu-agent.
func StartAgentFleet(ctx context.Context, c *cluster.Cluster, opts AgentFleetOptions) (*AgentFleet, error) {
	if opts.Name == "" {
		opts.Name = "agent-fleet"
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = "gpu-scheduler"
	}
	if opts.Verbosity == 0 {
		opts.Verbosity = 2
	}
	bin, err := Binary(ctx, "gpu-sim")
	if err != nil {
		return nil, err
	}
	httpPort, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	metricsPort, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"agent-fleet",
		"--kubeconfig=" + c.Kubeconfig(),
		"--lease-namespace=" + opts.LeaseNamespace,
		"--listen-address=127.0.0.1:" + strconv.Itoa(httpPort),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--probe-interval=2s",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"-v=" + strconv.Itoa(opts.Verbosity),
	}
	if opts.NodeSelector != "" {
		args = append(args, "--node-selector="+opts.NodeSelector)
	}
	p, err := c.StartProcess(opts.Name, bin, args, nil)
	if err != nil {
		return nil, err
	}
	a := &AgentFleet{Process: p, HTTPPort: httpPort, MetricsPort: metricsPort}
	if err := waitHealthy(ctx, p, "http://127.0.0.1:"+strconv.Itoa(httpPort)+"/readyz", time.Minute); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return a, nil
}
