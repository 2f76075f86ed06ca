//go:build integration

// Package integration runs the production gpu-scheduler binary and the CRDs against a real control plane
// (etcd, kube-apiserver, kube-controller-manager, kwok) from the sim/cluster harness. The test
// itself plays the node agents: it writes each node's GpuNodeStatus, so every expectation
// about islands and health is exact.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

const leaseNamespace = "gpu-scheduler"

// env is the one control plane and scheduler of this package's tests.
var env struct {
	c      *cluster.Cluster
	kube   kubernetes.Interface
	gpu    versioned.Interface
	schedA *launch.Scheduler
}

func TestMain(m *testing.M) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	code, err := setup(ctx, m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scheduler integration:", err)
		code = 1
	}
	if env.c != nil {
		if env.schedA != nil && code != 0 {
			fmt.Fprintf(os.Stderr, "--- last lines of %s:\n%s\n", env.schedA.LogPath(), env.schedA.LogTail(60))
		}
		if err := env.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// step prints setup progress, so a slow or stuck start-up shows where it is.
func step(format string, args ...any) {
	fmt.Printf("%s setup: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func setup(ctx context.Context, m *testing.M) (int, error) {
	step("starting the control plane")
	// The Workload API too: TestGangsFromPodGroups places gangs of its PodGroups.
	c, err := cluster.Start(ctx, cluster.Config{Name: "sched-it", APIServerExtraArgs: cluster.WorkloadAPIArgs})
	if err != nil {
		return 1, err
	}
	env.c = c
	root, err := launch.RepoRoot()
	if err != nil {
		return 1, err
	}
	if err := c.InstallCRDs(ctx, filepath.Join(root, "charts/gpu-scheduler/crds"), filepath.Join(root, "test/testdata/podgroup-crd")); err != nil {
		return 1, err
	}
	if env.kube, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return 1, err
	}
	if env.gpu, err = versioned.NewForConfig(c.RESTConfig()); err != nil {
		return 1, err
	}
	if err := ensureNamespace(ctx, leaseNamespace); err != nil {
		return 1, err
	}
	pools := []cluster.NodePool{
		{Name: "two-island", Count: 3, GPUsPerNode: 8, Topology: "two-island"},
		{Name: "dgx", Count: 2, GPUsPerNode: 8, Topology: "dgx-a100", Labels: map[string]string{"gpu-type": "a100"}},
		{Name: "race", Count: 5, GPUsPerNode: 8, Topology: "two-island"},
	}
	for _, p := range pools {
		if err := c.CreateNodePool(ctx, p); err != nil {
			return 1, err
		}
	}
	step("waiting for %d node pools", len(pools))
	for _, p := range pools {
		if err := c.WaitNodesReady(ctx, cluster.PoolSelector(p.Name), p.Count, time.Minute); err != nil {
			return 1, err
		}
		for i := 0; i < p.Count; i++ {
			if err := publishStatus(ctx, cluster.NodeName(p.Name, i), p.Topology); err != nil {
				return 1, err
			}
		}
	}
	step("starting gpu-scheduler")
	if env.schedA, err = launch.StartScheduler(ctx, c, launch.SchedulerOptions{Name: "gpu-scheduler-a"}); err != nil {
		return 1, err
	}
	step("ready")
	return m.Run(), nil
}

func ensureNamespace(ctx context.Context, name string) error {
	_, err := env.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// devices returns what an agent reports for a topology: "two-island" is the API reference's
// box (GPUs 0-3 at 600 GB/s, 4-7 at 64 GB/s, GPU 7 unhealthy), "dgx-a100" one NVSwitch island.
func devices(topology string) []apiv1.Device {
	var out []apiv1.Device
	for i := int32(0); i < 8; i++ {
		d := apiv1.Device{ID: i, Health: apiv1.Healthy}
		switch topology {
		case "dgx-a100":
			d.Island, d.BandwidthGBps = "nvswitch-0", 600
		default:
			d.Island, d.BandwidthGBps = "nvlink-group-0", 600
			if i >= 4 {
				d.Island, d.BandwidthGBps = "nvlink-group-1", 64
			}
			if i == 7 {
				d.Health, d.BandwidthGBps = apiv1.Unhealthy, 0
			}
		}
		out = append(out, d)
	}
	return out
}

// publishStatus writes a node's GpuNodeStatus as the agent would.
func publishStatus(ctx context.Context, node, topology string) error {
	return writeStatus(ctx, node, devices(topology))
}

func writeStatus(ctx context.Context, node string, devs []apiv1.Device) error {
	gns := env.gpu.GpuV1().GpuNodeStatuses()
	obj, err := gns.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj, err = gns.Create(ctx, &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: apiv1.GpuNodeStatusSpec{NodeName: node}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("GpuNodeStatus %s: %w", node, err)
	}
	obj.Status.Devices = devs
	obj.Status.Total = int32(len(devs))
	obj.Status.Healthy, obj.Status.Free = 0, 0
	for _, d := range devs {
		if d.Health == apiv1.Healthy {
			obj.Status.Healthy++
			obj.Status.Free++
		}
	}
	obj.Status.LastHeartbeatTime = metav1.Now()
	if _, err := gns.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating GpuNodeStatus %s: %w", node, err)
	}
	return nil
}
