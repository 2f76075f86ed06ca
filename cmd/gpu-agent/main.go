// Command gpu-agent publishes a node's GPUs (islands, bandwidth, health, holders) as its
// GpuNodeStatus. As a DaemonSet it reads the real GPUs through NVML; in demo mode
// (--mock-topology) it reports a simulated GPU server instead, for trying the release on a node
// without GPUs. The simulator's agent fleet (thousands of kwok nodes in one process) is not part
// of this binary: it runs as gpu-sim agent-fleet (package sim/fleet).
//
// Build with cgo (go-nvml loads libnvidia-ml at run time), and never link anything that
// imports Go's plugin package into this binary: the linker then binds every symbol at start and
// the binary dies on the NVML symbols a node without a driver lacks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/deviceplugin"
	"github.com/gpu-scheduler/gpu-scheduler/agent/leases"
	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mps"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/telemetry"
	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/httpserve"
	"github.com/gpu-scheduler/gpu-scheduler/metricsauth"
)

type options struct {
	nodeName, kubeconfig, leaseNamespace, listen string
	metricsAddr, metricsCert, metricsKey         string
	schedulerName                                string
	heartbeat, refresh, probe, quiet             time.Duration
	minWrite, usageWrite                         time.Duration
	telemetryInterval, takeoverAfter             time.Duration
	telemetryWritesPerMinute                     float64
	qps                                          float64
	burst                                        int
	mockTopology                                 string
	mockFaultAddress                             string
	devicePlugin                                 devicePluginOptions
}

func main() {
	var o options
	fs := flag.CommandLine
	klog.InitFlags(fs)
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "Node whose GPUs this agent reports (default $NODE_NAME).")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig file; empty means in-cluster configuration.")
	fs.StringVar(&o.leaseNamespace, "lease-namespace", "gpu-scheduler", "Namespace of the scheduler's GPU leases; the agent renews its node's liveness Lease (gpu-<node>-agent) there too.")
	fs.StringVar(&o.listen, "listen-address", ":8080", "Address of the plain-HTTP /healthz and /readyz (the kubelet's probes).")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the HTTPS /metrics endpoint (with /healthz and /readyz); callers' bearer tokens are checked with the apiserver (TokenReview, SubjectAccessReview). 0 turns it off.")
	fs.StringVar(&o.metricsCert, "metrics-cert-file", "", "PEM serving certificate of --metrics-bind-address; empty: a self-signed one made at start-up.")
	fs.StringVar(&o.metricsKey, "metrics-key-file", "", "PEM key of --metrics-cert-file.")
	fs.StringVar(&o.schedulerName, "scheduler-name", gpuv1.SchedulerName, "The release's scheduler (default $"+gpuv1.SchedulerNameEnv+", then gpu-scheduler): "+
		"the node's GpuNodeStatus is labelled "+gpuv1.LabelSchedulerName+" with it, so that only that scheduler places pods here, and the device plugin serves only its pods.")
	fs.DurationVar(&o.takeoverAfter, "takeover-after", 10*time.Minute, "How long, beyond --status-refresh-interval, another release's agent must have left the node's GpuNodeStatus unwritten before this one takes it over (the other release's liveness Lease is in a namespace this agent cannot read; a live agent rewrites its status at least once per refresh interval).")
	fs.DurationVar(&o.heartbeat, "heartbeat-interval", 3*time.Minute, "Longest time between two renewals of the node's liveness Lease, the signal the scheduler judges the agent alive by (statusFreshnessSeconds). Spread per node, so a fleet does not renew in step.")
	fs.DurationVar(&o.refresh, "status-refresh-interval", 30*time.Minute, "Longest time between two GpuNodeStatus writes: an unchanged status is rewritten this often. Long, because liveness is the Lease's job and every status write of a DGX costs the apiserver several ms of CPU; it bounds how old the status's telemetry gets.")
	fs.DurationVar(&o.probe, "probe-interval", 30*time.Second, "How often every GPU is probed (lost, persistent faults, recovery).")
	fs.DurationVar(&o.quiet, "recovery-quiet-period", 5*time.Minute, "How long an answering GPU must stay free of critical events before it is Healthy again.")
	fs.DurationVar(&o.minWrite, "min-write-interval", time.Second, "Shortest time between two status writes of one node.")
	fs.DurationVar(&o.usageWrite, "usage-write-interval", 0, "Shortest time between two status writes of one node when only inUseBy changed (health changes go out after --min-write-interval, with usage). 0 (the default): 10m, so usage is at most that old and rides along with health writes and the status refresh (each such write costs the apiserver a few ms of CPU; at 5,000 busy nodes 10m is ~8 writes a second); negative: written at once. Nothing schedules from inUseBy: the GPU leases are the lock, and kubectl gpu reads them.")
	fs.DurationVar(&o.telemetryInterval, "telemetry-interval", 10*time.Second, "How often every GPU's utilisation, memory, temperature, power and ECC counters are read (for the status and the DCGM_FI_* series); negative: never.")
	fs.Float64Var(&o.telemetryWritesPerMinute, "telemetry-writes-per-minute", agent.DefaultTelemetryWritesPerMinute, "Budget of GpuNodeStatus writes per node per minute that telemetry alone may cause when it moved significantly; health changes are not held back by it. Negative (the default) or zero: none; telemetry then rides along with health, usage and refresh writes, at most --status-refresh-interval old (every GPU's load moves, so any budget is spent by every node).")
	fs.Float64Var(&o.qps, "kube-api-qps", 20, "Client QPS to the API server.")
	fs.IntVar(&o.burst, "kube-api-burst", 40, "Client burst to the API server.")
	fs.StringVar(&o.mockTopology, "mock-topology", "", "Demo mode, for a node without GPUs: report a simulated GPU server of this preset (scenarios/hardware, e.g. dgx-h100) instead of reading NVML. "+
		"The device plugin then hands out the node's /dev/nvidia<minor> device nodes as if they were those GPUs (docs/node.md#demo-mode). Never on a node with real GPUs. Empty (the default): the real NVML.")
	fs.StringVar(&o.mockFaultAddress, "mock-fault-address", "", "Demo mode, with --mock-topology: serve POST /fault?gpu=ID&fault=KIND (KIND: xid<code>, dbe, lost, remap-failure, recover) on this address, "+
		"so that a simulated GPU can be made unhealthy and healthy again. Unauthenticated: for demo and test nodes only. Empty (the default): off.")
	fs.BoolVar(&o.devicePlugin.enabled, "device-plugin", true, "Serve the kubelet device-plugin API on nodes labelled gpu.scheduling/managed=true.")
	fs.StringVar(&o.devicePlugin.resourceName, "resource-name", deviceplugin.DefaultResourceName, "Extended resource the device plugin serves; the webhook and the chart must use the same.")
	fs.BoolVar(&o.devicePlugin.allowOthers, "allow-other-gpu-plugins", false, "Serve the device plugin even while another GPU device plugin (NVIDIA's: nvidia.com/gpu in the node's capacity, or its socket in --device-plugin-dir) serves the node. Only where the node's GPUs are split between the plugins: two plugins serving one GPU hand it out twice. Without it the agent does not serve the device plugin there, is not ready, and says why (log, Event on the Node).")
	fs.StringVar(&o.devicePlugin.pluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "The kubelet's device-plugin directory (holds kubelet.sock).")
	fs.IntVar(&o.devicePlugin.sharedReplicas, "max-sharers", deviceplugin.DefaultReplicas, "With the device plugin: each GPU not in MIG mode is also advertised as this many "+deviceplugin.SharedResourceName+" devices, one per pod of a Shared claim that shares it (the scheduler's own bound, maxSharersPerGPU, should not exceed it). 0: Shared claims are not served through the device plugin.")
	fs.StringVar(&o.devicePlugin.cdiDir, "cdi-dir", "/var/run/cdi", "Where the CDI spec of the node's GPUs is written; empty: none.")
	fs.BoolVar(&o.devicePlugin.mps, "mps", false, "With the device plugin and --max-sharers above 0: run an MPS control daemon (--mps-control -f) for each GPU Shared pods hold, set the GPU to EXCLUSIVE_PROCESS while it runs, and make Shared containers its clients, so that their memory and compute shares bind (docs/sharing.md). Off: shares are accounted only, unless the operator runs MPS.")
	fs.StringVar(&o.devicePlugin.mpsControl, "mps-control", mps.DefaultControl, "The nvidia-cuda-mps-control binary for --mps: a path, or a name looked up in $PATH. Where it is missing the agent says so (log, Event on the Node) and shares are accounted only.")
	fs.StringVar(&o.devicePlugin.mpsRoot, "mps-root", mps.DefaultRoot, "Host directory of the MPS daemons' pipe and log directories (<root>/<gpu uuid>/pipe, .../log) and their shared memory (<root>/shm), mounted at the same path in the agent (--mps).")
	flag.Parse()
	flagSet := false
	fs.Visit(func(f *flag.Flag) { flagSet = flagSet || f.Name == "scheduler-name" })
	name, err := gpuv1.ResolveSchedulerName(o.schedulerName, flagSet, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-agent:", err)
		os.Exit(2)
	}
	if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
		// It becomes the value of the status's gpu.scheduling/scheduler-name label.
		fmt.Fprintf(os.Stderr, "gpu-agent: scheduler name %q is not a valid label value: %v\n", name, errs)
		os.Exit(2)
	}
	o.schedulerName = name

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.Background().Error(err, "gpu-agent failed")
		klog.Flush() //nolint:logcheck // a main flushes klog's backend before it exits; there is no contextual form
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	if o.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
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
	base := agent.Config{
		KubeClient: kube, GPUClient: gpus,
		ProbeInterval: o.probe, HeartbeatInterval: o.heartbeat, StatusRefreshInterval: o.refresh, LeaseNamespace: o.leaseNamespace,
		RecoveryQuietPeriod: o.quiet, MinWriteInterval: o.minWrite, UsageWriteInterval: o.usageWrite,
		SchedulerName: o.schedulerName, TakeoverAfter: o.takeoverAfter,
		TelemetryInterval: o.telemetryInterval, TelemetryWritesPerMinute: o.telemetryWritesPerMinute,
	}
	if o.telemetryWritesPerMinute == 0 {
		base.TelemetryWritesPerMinute = -1 // zero on the command line means none, not the default
	}
	// Per-GPU DCGM_FI_* series for this node's GPUs.
	telemetry.Register()
	base.Telemetry = telemetry.Default

	var ready atomic.Bool
	// checks are the device plugin's readiness, set by runNode before ready turns true.
	var checks atomic.Pointer[func() error]
	probe := readiness{ready: &ready, check: &checks}
	mux := http.NewServeMux()
	addProbes(mux, probe)

	httpserve.Run(ctx, &http.Server{Addr: o.listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second})
	if o.metricsAddr != "0" {
		guard, err := metricsauth.NewGuard(cfg, "gpu-agent")
		if err != nil {
			return err
		}
		tlsCfg, err := metricsauth.ServingTLS(o.metricsCert, o.metricsKey, o.nodeName)
		if err != nil {
			return err
		}
		secure := http.NewServeMux()
		addProbes(secure, probe)
		secure.Handle("GET /metrics", guard(legacyregistry.Handler()))
		httpserve.Run(ctx, &http.Server{Addr: o.metricsAddr, Handler: secure, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second})
	}
	logger.Info("gpu-agent starting", "node", o.nodeName, "listen", o.listen, "metrics", o.metricsAddr, "schedulerName", o.schedulerName)
	ready.Store(true)
	return runNode(ctx, o, base, &checks)
}

// readiness is what /readyz reports: the agent's loop has started, and the device plugin
// (when there is one) serves.
type readiness struct {
	ready *atomic.Bool
	check *atomic.Pointer[func() error]
}

// addProbes serves /healthz and /readyz. Liveness says only that the process serves: NVML
// failures are reported in the status (GPUs Unknown), never by failing the probe, which would
// crash-loop the agent. Readiness says the agent's loop has started and its device plugin is
// not refusing to serve (another GPU device plugin on the node).
func addProbes(mux *http.ServeMux, r readiness) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if c := r.check.Load(); c != nil {
			if err := (*c)(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
}

// runNode runs the agent for this node, over the real NVML or, in demo mode, a simulated server.
func runNode(ctx context.Context, o options, cfg agent.Config, checks *atomic.Pointer[func() error]) error {
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(cfg.KubeClient, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.nodeName).String()
		}))
	nodes := nodeFactory.Core().V1().Nodes()
	leaseFactory := leases.NewInformerFactory(cfg.KubeClient, o.leaseNamespace, o.nodeName, 0)
	leaseInformer, err := leases.Informer(leaseFactory)
	if err != nil {
		return err
	}
	cfg.NodeName = o.nodeName
	var lib nvml.Interface = nvml.New()
	var mockServer *mock.Server
	if o.mockTopology != "" {
		srv, err := mock.New(o.mockTopology, mock.WithSeed(o.nodeName))
		if err != nil {
			return fmt.Errorf("--mock-topology: %w", err)
		}
		logger := klog.FromContext(ctx)
		logger.Info("Reporting a simulated GPU server, not the real NVML", "topology", o.mockTopology)
		lib, mockServer = srv, srv
	} else if o.mockFaultAddress != "" {
		return fmt.Errorf("--mock-fault-address needs --mock-topology: faults are injected into simulated GPUs only")
	}
	cfg.GPUs = nvmlgpu.New(lib, nvmlgpu.Options{})
	cfg.Nodes, cfg.Leases = nodes.Lister(), leaseInformer.GetIndexer()
	node, err := cfg.KubeClient.CoreV1().Nodes().Get(ctx, o.nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %q: %w", o.nodeName, err)
	}
	var pluginReady func() error
	// The compute mode of real GPUs only: the simulated ones have none.
	var computeMode func(context.Context, string, bool) error
	if mockServer == nil {
		computeMode = nvmlComputeMode(lib)
	}
	// The MPS daemons are quit, and their GPUs' compute mode put back, before the agent exits.
	var stopped sync.WaitGroup
	defer stopped.Wait()
	if cfg.OnDevices, cfg.OnInventory, pluginReady, err = startDevicePlugin(ctx, o, cfg.KubeClient, node, nodes.Lister(), computeMode, &stopped); err != nil {
		return err
	}
	if pluginReady != nil {
		checks.Store(&pluginReady)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if mockServer != nil && o.mockFaultAddress != "" {
		if _, err := serveMockFaults(ctx, o.mockFaultAddress, mockServer, a.Poke); err != nil {
			return err
		}
	}
	poke := func(any) { a.Poke() }
	if _, err := leaseInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("watch leases: %w", err)
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 && !maps.Equal(o.Labels, n.Labels) {
				a.Poke() // someone touched the labels: the agent puts its own back
			}
		},
	}); err != nil {
		return fmt.Errorf("watch node: %w", err)
	}
	nodeFactory.Start(ctx.Done())
	leaseFactory.Start(ctx.Done())
	nodeFactory.WaitForCacheSync(ctx.Done())
	leaseFactory.WaitForCacheSync(ctx.Done())
	defer nodeFactory.Shutdown()
	defer leaseFactory.Shutdown()
	return a.Run(ctx)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (pass --kubeconfig outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}
