package launch

import (
	"context"
	"strconv"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// ControllerOptions configure one gpu-controller process.
type ControllerOptions struct {
	// Name tells processes apart in logs; default "gpu-controller".
	Name string
	// LeaderElect turns on leader election (off by default: one process per harness).
	LeaderElect bool
	// LeaderElectionNamespace holds the election Lease when LeaderElect is on; default
	// "gpu-scheduler".
	LeaderElectionNamespace string
	// Verbosity is the klog -v level; default 2.
	Verbosity int
}

// Controller is a running gpu-controller.
type Controller struct {
	*cluster.Process
	// ProbePort serves /healthz and /readyz; MetricsPort serves /metrics.
	ProbePort, MetricsPort int
}

// StartController runs bin/gpu-controller against the cluster and waits until it is ready.
func StartController(ctx context.Context, c *cluster.Cluster, opts ControllerOptions) (*Controller, error) {
	if opts.Name == "" {
		opts.Name = "gpu-controller"
	}
	if opts.LeaderElectionNamespace == "" {
		opts.LeaderElectionNamespace = "gpu-scheduler"
	}
	if opts.Verbosity == 0 {
		opts.Verbosity = 2
	}
	bin, err := Binary(ctx, "gpu-controller")
	if err != nil {
		return nil, err
	}
	probe, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	metrics, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	p, err := c.StartProcess(opts.Name, bin, []string{
		"--kubeconfig=" + c.Kubeconfig(),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metrics),
		"--leader-elect=" + strconv.FormatBool(opts.LeaderElect),
		"--leader-election-namespace=" + opts.LeaderElectionNamespace,
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"-v=" + strconv.Itoa(opts.Verbosity),
	}, nil)
	if err != nil {
		return nil, err
	}
	ctl := &Controller{Process: p, ProbePort: probe, MetricsPort: metrics}
	if err := waitHealthy(ctx, p, "http://127.0.0.1:"+strconv.Itoa(probe)+"/readyz", 2*time.Minute); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return ctl, nil
}
