package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// fleetAddressFile holds host:port of the agent fleet's /fault endpoint in a --gpu-stack
// cluster's state dir, for `gpu-sim cluster fault`.
const fleetAddressFile = "fleet-address"

// devNamespace holds the GPU leases, as the chart's release namespace does.
const devNamespace = "gpu-scheduler"

// resolveTopology checks a --gpu-stack topology against the hardware presets and, unless the
// user set --gpus-per-node, takes the GPU count from the preset.
func (o *upOptions) resolveTopology(gpusSet bool) error {
	if !o.gpuStack {
		return nil
	}
	h, ok := mock.Lookup(o.topology)
	if !ok {
		names := mock.Names()
		sort.Strings(names)
		return fmt.Errorf("--topology %q is not a hardware preset (scenarios/hardware): want one of %s", o.topology, strings.Join(names, ", "))
	}
	if !gpusSet {
		o.gpusPerNode = h.Spec.GPUs.Count
	}
	return nil
}

// startGPUStack installs the CRDs and starts the production binaries beside the control plane:
// the agent fleet (gpu-sim agent-fleet, one mock agent per node), then gpu-webhook, gpu-scheduler
// and gpu-controller. Every process is the cluster's, so `cluster down` stops it.
func startGPUStack(ctx context.Context, c *cluster.Cluster, dir string, nodes int) error {
	logger := klog.FromContext(ctx)
	root, err := launch.RepoRoot()
	if err != nil {
		return err
	}
	if err := c.InstallCRDs(ctx, filepath.Join(root, "charts", "gpu-scheduler", "crds")); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: devNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", devNamespace, err)
	}
	bin, err := launch.Binary(ctx, "gpu-sim")
	if err != nil {
		return err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	metricsPort, err := cluster.FreePort()
	if err != nil {
		return err
	}
	// Short probe and recovery periods, so that a fault injected by hand shows in seconds.
	fleet, err := c.StartProcess("gpu-agent-fleet", bin, []string{
		"agent-fleet", "--kubeconfig=" + c.Kubeconfig(), "--lease-namespace=" + devNamespace, "--listen-address=" + addr,
		"--probe-interval=2s", "--recovery-quiet-period=20s", "--kube-api-qps=200", "--kube-api-burst=400",
		// Its HTTPS /metrics on loopback too, never the default :8443 of every interface.
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
	}, nil)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, fleetAddressFile), []byte(addr), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", fleetAddressFile, err)
	}
	gcs, err := versioned.NewForConfig(c.RESTConfig())
	if err != nil {
		return fmt.Errorf("GPU client: %w", err)
	}
	logger.Info("Waiting for the agent fleet", "nodes", nodes)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if !fleet.Running() {
			return false, fmt.Errorf("gpu-sim agent-fleet exited; its log ends:\n%s", fleet.LogTail(20))
		}
		l, err := gcs.GpuV1().GpuNodeStatuses().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) >= nodes, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d GpuNodeStatus objects from the agent fleet: %w", nodes, err)
	}
	if _, err := launch.StartWebhook(ctx, c, launch.WebhookOptions{Namespace: devNamespace}); err != nil {
		return err
	}
	if _, err := launch.StartScheduler(ctx, c, launch.SchedulerOptions{Name: "gpu-scheduler", LeaseNamespace: devNamespace, QPS: 100}); err != nil {
		return err
	}
	if _, err := launch.StartController(ctx, c, launch.ControllerOptions{}); err != nil {
		return err
	}
	return nil
}

func newClusterFaultCommand(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "fault NODE GPU KIND",
		Short: "Inject a GPU fault into a --gpu-stack cluster's mock agent (KIND: xid79 or any xid<code>, dbe, lost, remap-failure, recover)",
		Example: `  gpu-sim cluster fault --name dev gpu-0 3 xid79     # GPU 3 of node gpu-0 falls off the bus
  gpu-sim cluster fault --name dev gpu-0 3 recover   # it answers again (Healthy after the quiet period)`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := f.dir()
			if err != nil {
				return err
			}
			addr, err := os.ReadFile(filepath.Join(dir, fleetAddressFile))
			if err != nil {
				return fmt.Errorf("cluster %s runs no agent fleet (start it with \"gpu-sim cluster up --gpu-stack\" or \"make dev\"): %w", f.name, err)
			}
			q := url.Values{"node": {args[0]}, "gpu": {args[1]}, "fault": {args[2]}}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, "http://"+string(addr)+"/fault?"+q.Encode(), nil)
			if err != nil {
				return err
			}
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				return fmt.Errorf("asking the agent fleet of cluster %s: %w", f.name, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("agent fleet: %s", strings.TrimSpace(string(body)))
			}
			fmt.Print(string(body))
			return nil
		},
	}
}
