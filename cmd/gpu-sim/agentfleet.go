package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/httpserve"
	"github.com/gpu-scheduler/gpu-scheduler/metricsauth"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
)

func init() { register(newAgentFleetCommand) }

// agentFleetOptions are the flags of gpu-sim agent-fleet. The agent's intervals default to
// zero, which leaves each to the agent's own default (package agent), the same as gpu-agent's.
type agentFleetOptions struct {
	kubeconfig, leaseNamespace, listen, metricsAddr string
	schedulerName, nodeSelector                     string
	qps                                             float64
	burst                                           int
	writeQPS                                        float64
	writeBurst                                      int
	probe, quiet, heartbeat, refresh                time.Duration
	minWrite, usageWrite                            time.Duration
}

func newAgentFleetCommand() *cobra.Command {
	var o agentFleetOptions
	cmd := &cobra.Command{
		Use:   "agent-fleet",
		Short: "Run the node agent for every simulated node (label gpu.scheduling/topology), over mock NVML, in one process",
		Long: `agent-fleet runs the production agent loop (package agent) once per kwok node carrying the
label gpu.scheduling/topology, each over a mock NVML server of that topology (package agent/mock),
in one process (package sim/fleet): the agents of a simulated cluster. It is part of the
simulation harness, not of a release; a real node runs gpu-agent.

Its plain-HTTP --listen-address serves /healthz, /readyz, GET /nodes and
POST /fault?node=NODE&gpu=ID&fault=KIND (what "gpu-sim cluster fault" sends).`,
		Example: `  gpu-sim agent-fleet --kubeconfig=_output/sim/dev/kubeconfig --lease-namespace=gpu-scheduler --node-selector=pool=canary`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name, err := gpuv1.ResolveSchedulerName(o.schedulerName, cmd.Flags().Changed("scheduler-name"), os.Getenv)
			if err != nil {
				return err
			}
			if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
				// It becomes the value of each status's gpu.scheduling/scheduler-name label.
				return fmt.Errorf("scheduler name %q is not a valid label value: %v", name, errs)
			}
			o.schedulerName = name
			return runAgentFleet(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig file of the simulated cluster (required).")
	fs.StringVar(&o.leaseNamespace, "lease-namespace", "gpu-scheduler", "Namespace of the scheduler's GPU leases and the agents' liveness Leases.")
	fs.StringVar(&o.listen, "listen-address", ":8080", "Address of the plain-HTTP /healthz, /readyz, /nodes and /fault.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the HTTPS /metrics endpoint (callers' bearer tokens checked with the apiserver), with a self-signed certificate. 0 turns it off.")
	fs.StringVar(&o.schedulerName, "scheduler-name", gpuv1.SchedulerName, "The release's scheduler (default $"+gpuv1.SchedulerNameEnv+", then gpu-scheduler): every simulated node's GpuNodeStatus is labelled with it.")
	fs.StringVar(&o.nodeSelector, "node-selector", "", "Simulate only the labelled nodes that also match this label selector (one release's pool); empty: all of them.")
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "Client QPS to the API server, shared by every simulated node.")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "Client burst to the API server.")
	fs.Float64Var(&o.writeQPS, "write-qps", 100, "GpuNodeStatus writes per second for the whole fleet.")
	fs.IntVar(&o.writeBurst, "write-burst", 200, "GpuNodeStatus write burst for the whole fleet.")
	fs.DurationVar(&o.probe, "probe-interval", 0, "How often every GPU is probed; 0: gpu-agent's default.")
	fs.DurationVar(&o.quiet, "recovery-quiet-period", 0, "How long an answering GPU must stay free of critical events before it is Healthy again; 0: gpu-agent's default.")
	fs.DurationVar(&o.heartbeat, "heartbeat-interval", 0, "Longest time between two renewals of a node's liveness Lease; 0: gpu-agent's default.")
	fs.DurationVar(&o.refresh, "status-refresh-interval", 0, "Longest time between two writes of a node's GpuNodeStatus; 0: gpu-agent's default.")
	fs.DurationVar(&o.minWrite, "min-write-interval", 0, "Shortest time between two status writes of one node; 0: gpu-agent's default.")
	fs.DurationVar(&o.usageWrite, "usage-write-interval", 0, "Shortest time between two status writes of one node when only inUseBy changed; 0: gpu-agent's default, negative: at once.")
	return cmd
}

// runAgentFleet serves the fleet's probes, fault injection and metrics and runs it until ctx ends.
func runAgentFleet(ctx context.Context, o agentFleetOptions) error {
	logger := klog.FromContext(ctx)
	if o.kubeconfig == "" {
		return errors.New("--kubeconfig is required: the fleet simulates the nodes of one cluster")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	gpus, err := versioned.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("gpu.scheduling client: %w", err)
	}
	metrics.Register()
	// No per-GPU telemetry series: thousands of simulated nodes would make every scrape
	// hundreds of thousands of series.
	f, err := fleet.New(fleet.Config{
		KubeClient: kube, GPUClient: gpus, LeaseNamespace: o.leaseNamespace,
		Agent: agent.Config{
			ProbeInterval: o.probe, RecoveryQuietPeriod: o.quiet, HeartbeatInterval: o.heartbeat, StatusRefreshInterval: o.refresh,
			MinWriteInterval: o.minWrite, UsageWriteInterval: o.usageWrite, SchedulerName: o.schedulerName, LeaseNamespace: o.leaseNamespace,
		},
		WriteQPS: float32(o.writeQPS), WriteBurst: o.writeBurst, NodeSelector: o.nodeSelector,
	})
	if err != nil {
		return err
	}
	var ready atomic.Bool
	mux := http.NewServeMux()
	addFleetProbes(mux, &ready)
	fh := f.Handler()
	mux.Handle("POST /fault", fh)
	mux.Handle("GET /nodes", fh)
	httpserve.Run(ctx, &http.Server{Addr: o.listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second})
	if o.metricsAddr != "0" {
		guard, err := metricsauth.NewGuard(cfg, "gpu-sim agent-fleet")
		if err != nil {
			return err
		}
		tlsCfg, err := metricsauth.ServingTLS("", "", "")
		if err != nil {
			return err
		}
		secure := http.NewServeMux()
		addFleetProbes(secure, &ready)
		secure.Handle("GET /metrics", guard(legacyregistry.Handler()))
		httpserve.Run(ctx, &http.Server{Addr: o.metricsAddr, Handler: secure, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second})
	}
	logger.Info("Agent fleet starting", "listen", o.listen, "metrics", o.metricsAddr, "schedulerName", o.schedulerName, "nodeSelector", o.nodeSelector)
	ready.Store(true)
	return f.Run(ctx)
}

// addFleetProbes serves /healthz (the process serves) and /readyz (the fleet has started).
func addFleetProbes(mux *http.ServeMux, ready *atomic.Bool) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
