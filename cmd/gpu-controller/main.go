// Command gpu-controller runs the gpu-scheduler's controllers on one controller-runtime
// manager: the claim-template controller (a GpuClaim per pod that names a GpuClaimTemplate) and
// the GpuWorkload controller (replicas, claims, retries). It elects a leader, serves
// /healthz and /readyz on --health-probe-bind-address and Prometheus metrics over HTTPS on
// --metrics-bind-address, to callers the apiserver authenticates and authorises (TokenReview and
// SubjectAccessReview through controller-runtime's metrics filters): no anonymous scrape.
//
// gpu-controller apply-crds server-side-applies the CRDs built into it (the chart's crds/) and
// exits: the chart's pre-install/pre-upgrade hook (docs/install.md#upgrading). gpu-controller
// check is the chart's `helm test` pod (docs/install.md#helm-test).
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/controller/claimtemplate"
	"github.com/gpu-scheduler/gpu-scheduler/controller/workload"
)

type options struct {
	kubeconfig       string
	metricsAddr      string
	metricsCertDir   string
	probeAddr        string
	leaderElect      bool
	leaderElectionNS string
	leaderElectionID string
	schedulerName    string
	qps              float32
	burst            int
	workloadWorkers  int
	claimWorkers     int
	gracefulShutdown time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gpu-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "apply-crds" {
		return applyCRDsCommand(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "check" {
		return checkCommand(os.Args[2:])
	}
	o := options{schedulerName: apiv1.SchedulerName}
	if v := os.Getenv(apiv1.SchedulerNameEnv); v != "" {
		o.schedulerName = v
	}
	fs := pflag.NewFlagSet("gpu-controller", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty: in-cluster configuration (or $KUBECONFIG).")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus /metrics endpoint (HTTPS, bearer token checked with the apiserver); 0 turns it off.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for /metrics; empty: a self-signed certificate made at start-up.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader election Lease; empty: the pod's own namespace.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "gpu-controller.gpu.scheduling", "Name of the leader election Lease.")
	fs.StringVar(&o.schedulerName, "scheduler-name", o.schedulerName, "schedulerName of the pods the controllers create (also $"+apiv1.SchedulerNameEnv+").")
	fs.Float32Var(&o.qps, "kube-api-qps", 50, "QPS of the API client.")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "Burst of the API client.")
	fs.IntVar(&o.workloadWorkers, "workload-workers", 4, "GpuWorkloads reconciled at once.")
	fs.IntVar(&o.claimWorkers, "claim-template-workers", 4, "Pods whose GpuClaim is made from a GpuClaimTemplate at once.")
	fs.DurationVar(&o.gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "How long running reconciles may finish after SIGTERM.")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	name, err := apiv1.ResolveSchedulerName(o.schedulerName, fs.Changed("scheduler-name"), os.Getenv)
	if err != nil {
		return err
	}
	o.schedulerName = name
	logger := klog.Background()
	ctrl.SetLogger(logger)

	if o.kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", o.kubeconfig); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reading the client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = o.qps, o.burst
	cfg.UserAgent = "gpu-controller"

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := apiv1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// The controllers never read managedFields (they write with their own field manager,
		// and the server keeps the stored entries when an update omits them).
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Metrics: metricsserver.Options{
			BindAddress:    o.metricsAddr,
			SecureServing:  true,
			CertDir:        o.metricsCertDir,
			FilterProvider: filters.WithAuthenticationAndAuthorization,
			// HTTP/1.1 only: scrapers need nothing more, and HTTP/2's stream handling has been the
			// way to exhaust servers (CVE-2023-44487) before any authentication runs.
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		},
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.gracefulShutdown,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := workload.SetupWithManager(mgr, workload.Options{SchedulerName: o.schedulerName, MaxConcurrentReconciles: o.workloadWorkers}); err != nil {
		return err
	}
	if err := claimtemplate.SetupWithManager(mgr, claimtemplate.Options{SchedulerName: o.schedulerName, MaxConcurrentReconciles: o.claimWorkers}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	// Ready once the caches have synced: a replica that is not the leader is ready too (it
	// serves probes and waits), which is what a rolling update needs.
	if err := mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("caches not synced")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	logger.Info("Starting gpu-controller", "schedulerName", o.schedulerName, "leaderElect", o.leaderElect)
	return mgr.Start(ctrl.SetupSignalHandler())
}
