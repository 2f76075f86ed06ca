// Command e2e-kind is the end-to-end smoke test for users with Docker: it creates a kind
// cluster, loads the three gpu-scheduler images into it, installs charts/gpu-scheduler, and runs
// a GPU-less smoke test. kind nodes have no GPUs and no NVML, so the chart's agent is turned
// off and this program plays a mock-topology agent on every worker (the API reference's
// two-island box: GPUs 0-3 in one NVLink island, 4-7 in another); everything else is the
// production path: webhook, scheduler with leader election, leases, bindings.
//
//	make e2e-kind                      # builds the images, then runs this program
//	go run ./test/e2e-kind --help
//
// It cannot run on machines without a container engine (this project's development machines
// included); there it is only compiled and its pure parts unit-tested.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// mockTopology is the agent's mock topology of every worker (agent/mock: GPUs 0-3 and 4-7 in
// two NVLink islands).
const mockTopology = "two-island"

func main() {
	opts := defaultOptions()
	opts.addFlags(flag.CommandLine)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-kind:", err)
		os.Exit(1)
	}
	fmt.Println("e2e-kind: smoke test passed")
}

// options of one run.
type options struct {
	ClusterName   string
	NodeImage     string
	Workers       int
	ImageRegistry string
	ImageTag      string
	Helm          string
	Chart         string
	Namespace     string
	KeepCluster   bool
	Timeout       time.Duration
	// MockAgents is "fleet" (build cmd/gpu-sim and run its agent-fleet) or "static".
	MockAgents string
}

func defaultOptions() options {
	return options{
		ClusterName:   "gpu-scheduler-e2e",
		NodeImage:     "kindest/node:v1.35.0",
		Workers:       2,
		ImageRegistry: "ghcr.io/gpu-scheduler",
		ImageTag:      "dev",
		Helm:          "_output/bin/helm",
		Chart:         "charts/gpu-scheduler",
		Namespace:     "gpu-scheduler",
		Timeout:       20 * time.Minute,
		MockAgents:    "fleet",
	}
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "kind cluster to create (an existing one of that name is reused)")
	fs.StringVar(&o.NodeImage, "node-image", o.NodeImage, "kindest/node image: the Kubernetes version under test (1.34, 1.35 or 1.36)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "worker nodes, each with 8 mock GPUs")
	fs.StringVar(&o.ImageRegistry, "image-registry", o.ImageRegistry, "registry prefix of the gpu-scheduler, gpu-webhook, gpu-controller and gpu-agent images (as built by make docker-all)")
	fs.StringVar(&o.ImageTag, "image-tag", o.ImageTag, "tag of the four images")
	fs.StringVar(&o.Helm, "helm", o.Helm, "helm binary (make tools builds one into _output/bin)")
	fs.StringVar(&o.Chart, "chart", o.Chart, "chart directory")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "release namespace")
	fs.BoolVar(&o.KeepCluster, "keep-cluster", o.KeepCluster, "leave the cluster running afterwards (delete it with kind delete cluster --name ...)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on the whole run")
	fs.StringVar(&o.MockAgents, "mock-agents", o.MockAgents, "who reports the workers' mock GPUs: fleet (gpu-sim agent-fleet, cmd/gpu-sim built here with cgo) or static (this program)")
}

func (o options) validate() error {
	switch {
	case o.Workers < 1:
		return fmt.Errorf("--workers %d: need at least one worker for the GPU pod", o.Workers)
	case o.ClusterName == "" || o.ImageRegistry == "" || o.ImageTag == "":
		return fmt.Errorf("--cluster-name, --image-registry and --image-tag must not be empty")
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout %s must be positive", o.Timeout)
	case o.MockAgents != "fleet" && o.MockAgents != "static":
		return fmt.Errorf("--mock-agents %q: want fleet or static", o.MockAgents)
	}
	return nil
}

// images are the four images the chart runs, in the order make docker-all builds them.
func (o options) images() []string {
	return []string{
		o.ImageRegistry + "/gpu-scheduler:" + o.ImageTag,
		o.ImageRegistry + "/gpu-webhook:" + o.ImageTag,
		o.ImageRegistry + "/gpu-controller:" + o.ImageTag,
		o.ImageRegistry + "/gpu-agent:" + o.ImageTag,
	}
}

// helmInstallArgs installs the chart with the loaded images (never pulled) and without the NVML
// agent, and waits for the Deployments.
func (o options) helmInstallArgs(kubeconfig string) []string {
	return []string{
		"upgrade", "--install", "gpu-scheduler", o.Chart,
		"--kubeconfig", kubeconfig, "--namespace", o.Namespace, "--create-namespace",
		"--wait", "--timeout", "5m",
		"--set", "scheduler.image.repository=" + o.ImageRegistry + "/gpu-scheduler",
		"--set", "webhook.image.repository=" + o.ImageRegistry + "/gpu-webhook",
		"--set", "controller.image.repository=" + o.ImageRegistry + "/gpu-controller",
		"--set", "agent.image.repository=" + o.ImageRegistry + "/gpu-agent",
		"--set", "scheduler.image.tag=" + o.ImageTag,
		"--set", "webhook.image.tag=" + o.ImageTag,
		"--set", "controller.image.tag=" + o.ImageTag,
		"--set", "agent.image.tag=" + o.ImageTag,
		"--set", "scheduler.image.pullPolicy=Never",
		"--set", "webhook.image.pullPolicy=Never",
		"--set", "controller.image.pullPolicy=Never",
		"--set", "agent.image.pullPolicy=Never",
		"--set", "agent.enabled=false",
	}
}

// kindConfig is the cluster: one control plane and the workers, labelled as GPU feature
// discovery would label GPU nodes, and with the mock topology the fleet agent simulates.
func (o options) kindConfig() []byte {
	cfg := "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n"
	for i := 0; i < o.Workers; i++ {
		cfg += "- role: worker\n  labels:\n    nvidia.com/gpu.present: \"true\"\n    " + apiv1.LabelTopology + ": " + mockTopology + "\n"
	}
	return []byte(cfg)
}

// fleetArgs are gpu-sim's: the agent over mock NVML for every worker, against the cluster's
// leases.
func (o options) fleetArgs(kubeconfig string) []string {
	return []string{"agent-fleet", "--kubeconfig", kubeconfig, "--lease-namespace", o.Namespace, "--listen-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0"}
}
