//go:build e2enode

package e2enode

// This file's name sorts last on purpose: the kubelet keeps a device plugin's resource in the
// node's capacity for a while after the plugin is gone, and the agent refuses to serve while it
// is there, so the tests after this one would find no GPUs.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// standIn stands in for NVIDIA's device plugin: it lists count healthy devices
// GPU-standin-<minor> and hands each one out as its /dev/nvidia<minor> node, as NVIDIA's plugin
// does without CDI.
type standIn struct {
	pluginapi.UnimplementedDevicePluginServer
	count int
}

func (s *standIn) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (s *standIn) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr := &pluginapi.ContainerAllocateResponse{}
		for _, id := range c.DevicesIds {
			var minor int
			if _, err := fmt.Sscanf(id, "GPU-standin-%d", &minor); err != nil {
				return nil, fmt.Errorf("stand-in: device %q is not one of mine", id)
			}
			node := fmt.Sprintf("/dev/nvidia%d", minor)
			cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: node, HostPath: node, Permissions: "rw"})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (s *standIn) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for i := range s.count {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: fmt.Sprintf("GPU-standin-%d", i), Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// A stand-in for NVIDIA's device plugin registers nvidia.com/gpu with the real kubelet beside
// the agent's plugin: the agent refuses to serve (two plugins would hand one GPU out twice), so
// the node's allocatable gpu.scheduling/gpu drops to 0 and a Warning GPUDevicePluginRefused
// event names the node.
func TestOtherGPUDevicePluginStopsTheAgents(t *testing.T) {
	ctx := context.Background()
	stop := startStandIn(t)
	defer stop()
	var alloc, other string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := env.cs.CoreV1().Nodes().Get(ctx, env.node.Name(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q, o := n.Status.Allocatable[gpuResource], n.Status.Allocatable["nvidia.com/gpu"]
		alloc, other = q.String(), o.String()
		return q.Value() == 0 && o.Value() == 8, nil
	})
	if err != nil {
		t.Fatalf("with the stand-in registered: allocatable %s=%s, nvidia.com/gpu=%s; want 0 and 8", gpuResource, alloc, other)
	}
	var reasons []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := env.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + env.node.Name()})
		if err != nil {
			return false, nil
		}
		reasons = reasons[:0]
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason)
			if e.Reason == "GPUDevicePluginRefused" && e.Type == corev1.EventTypeWarning {
				t.Logf("event: %s", e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no Warning GPUDevicePluginRefused event on node %s (events: %v)", env.node.Name(), reasons)
	}
}

// startStandIn serves the stand-in plugin and registers it for nvidia.com/gpu with the kubelet;
// the returned func stops it.
func startStandIn(t *testing.T) func() {
	t.Helper()
	socket := "standin-nvidia.sock"
	path := filepath.Join(pluginapi.DevicePluginPath, socket)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, &standIn{count: 8})
	go func() { _ = s.Serve(lis) }()
	stop := func() {
		s.Stop()
		_ = os.Remove(path)
	}
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socket, ResourceName: "nvidia.com/gpu",
	}); err != nil {
		stop()
		t.Fatalf("registering the stand-in plugin for nvidia.com/gpu: %v", err)
	}
	return stop
}

// The baseline for the burst of TestFiftyConcurrentPodsSeeExactlyTheirGPUs: the same 50 pods,
// sizes and command, asking for nvidia.com/gpu from the stand-in plugin and placed by the stock
// kube-scheduler. Each container gets as many device nodes as it asked for; the create ->
// running figures go in the report beside ours (the node and its load are the same run's).
func TestStockSchedulerBurstWithStandInPlugin(t *testing.T) {
	ctx := context.Background()
	stop := startStandIn(t)
	defer stop()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := env.cs.CoreV1().Nodes().Get(ctx, env.node.Name(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q := n.Status.Allocatable["nvidia.com/gpu"]
		return q.Value() == 8, nil
	})
	if err != nil {
		t.Fatalf("the node never showed 8 nvidia.com/gpu allocatable: %v", err)
	}
	ns := "e2e-stock-burst"
	ensureNamespace(t, ns)
	defer deleteNamespace(t, ns)
	started := runBurst(t, ns, func(i int) *corev1.Pod {
		p := testboxPod(fmt.Sprintf("p%d", i), devScriptOnce)
		p.Namespace = ns
		p.Spec.NodeName = ""
		n := resource.MustParse(fmt.Sprint(burstSizes[i%len(burstSizes)]))
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": n}
		return p
	})
	for i := 0; i < burstPods; i++ {
		v, err := viewOf(t, ns, fmt.Sprintf("p%d", i))
		if err != nil {
			t.Error(err)
			continue
		}
		if len(v.minors) != burstSizes[i%len(burstSizes)] {
			t.Errorf("stock pod p%d asked for %d nvidia.com/gpu and saw /dev/nvidia%v", i, burstSizes[i%len(burstSizes)], v.minors)
		}
	}
	reportStart(fmt.Sprintf("%d pods (stock kube-scheduler + a stand-in nvidia.com/gpu plugin)", burstPods), started)
}
