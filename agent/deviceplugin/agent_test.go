package deviceplugin_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/deviceplugin"
	"github.com/gpu-scheduler/gpu-scheduler/agent/leases"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TestUnhealthyGPUFromNVML runs the whole node side: the agent's loop over mock NVML feeds the
// plugin (OnDevices), and an Xid 79 on GPU 3 reaches the kubelet's device manager as one GPU
// fewer in its allocatable, with GPU 3 no longer allocatable; a reset brings it back.
func TestUnhealthyGPUFromNVML(t *testing.T) {
	srv, err := mock.New(mock.DGXA100, mock.WithSeed(nodeName))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil), active: map[types.UID]*corev1.Pod{}}
	n.startKubelet()
	p, err := deviceplugin.New(deviceplugin.Config{NodeName: nodeName, Pods: corelisters.NewPodLister(n.pods), RecheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.plugin, n.stopPlg, n.plgDone = p, cancel, done
	go func() {
		defer close(done)
		_ = p.Run(ctx)
	}()

	k8sNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}
	kube := fake.NewClientset(k8sNode)
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(k8sNode); err != nil {
		t.Fatal(err)
	}
	inf, err := leases.Informer(leases.NewInformerFactory(kube, "gpu-scheduler", nodeName, 0))
	if err != nil {
		t.Fatal(err)
	}
	var inventory []topology.Device
	a, err := agent.New(agent.Config{
		NodeName: nodeName, GPUs: nvmlgpu.New(srv, nvmlgpu.Options{EventWaitTimeout: 5 * time.Millisecond}),
		GPUClient: gpufake.NewSimpleClientset(), KubeClient: kube, Nodes: corelisters.NewNodeLister(nodes), Leases: inf.GetIndexer(),
		ProbeInterval: 20 * time.Millisecond, MinWriteInterval: -1, UsageWriteInterval: -1, RecoveryQuietPeriod: time.Hour,
		// Both hooks run on the agent's loop, inventory first after each discovery.
		OnInventory: func(inv []topology.Device) { inventory = inv },
		OnDevices: func(devs []apiv1.Device) {
			if err := p.SetGPUs(deviceplugin.FromStatus(devs, inventory)); err != nil {
				t.Errorf("SetGPUs: %v", err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := <-agentDone; err != nil {
			t.Errorf("agent Run: %v", err)
		}
		_ = n.mgr.Stop(klog.Background())
	})

	n.waitAllocatable(8)
	if err := srv.Inject(3, mock.Fault{Kind: mock.FaultXid, Xid: mock.XidFallenOffBus}); err != nil {
		t.Fatal(err)
	}
	a.Poke()
	n.waitAllocatable(7)
	if _, ok := n.mgr.GetAllocatableDevices()[resName]["3"]; ok {
		t.Fatalf("the kubelet still lists GPU 3 as allocatable after Xid 79")
	}
	if err := srv.Inject(3, mock.Fault{Kind: mock.FaultRecover}); err != nil {
		t.Fatal(err)
	}
	a.Poke()
	// An event fault clears after a reset once the probe saw the GPU lost and then answering.
	n.waitAllocatable(8)
}
