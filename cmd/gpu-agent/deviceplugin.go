package main

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent/deviceplugin"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// devicePluginOptions are the flags of the kubelet device plugin.
type devicePluginOptions struct {
	enabled      bool
	resourceName string
	pluginDir    string
	cdiDir       string
}

// startDevicePlugin serves the kubelet device-plugin API on this node when the node carries
// gpu.scheduling/managed=true, and returns the agent's OnDevices and OnInventory hooks (nil
// when not serving). Without the label the node's GPUs belong to the NVIDIA device plugin:
// serving both would hand one GPU out twice.
func startDevicePlugin(ctx context.Context, o options, kube kubernetes.Interface, node *corev1.Node) (func([]apiv1.Device), func([]topology.Device), error) {
	logger := klog.FromContext(ctx)
	if !o.devicePlugin.enabled {
		return nil, nil, nil
	}
	if node == nil || node.Labels[deviceplugin.LabelManaged] != "true" {
		logger.Info("Not serving the kubelet device plugin: the node is not labelled "+deviceplugin.LabelManaged+"=true", "node", o.nodeName)
		return nil, nil, nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", o.nodeName).String()
		}))
	pods := factory.Core().V1().Pods()
	p, err := deviceplugin.New(deviceplugin.Config{
		NodeName: o.nodeName, ResourceName: o.devicePlugin.resourceName, PluginDir: o.devicePlugin.pluginDir,
		CDIDir: o.devicePlugin.cdiDir, Pods: pods.Lister(), SchedulerName: o.schedulerName,
	})
	if err != nil {
		return nil, nil, err
	}
	pods.Informer() // registered before Start
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, nil, fmt.Errorf("device plugin: syncing the pods of node %q (%v) failed", o.nodeName, typ)
		}
	}
	go func() {
		if err := p.Run(ctx); err != nil {
			logger.Error(err, "Kubelet device plugin stopped")
		}
	}()
	// The agent calls both hooks from its loop; the lock only keeps the race detector honest.
	var mu sync.Mutex
	var inventory []topology.Device
	onInventory := func(inv []topology.Device) {
		mu.Lock()
		defer mu.Unlock()
		inventory = inv
	}
	onDevices := func(devs []apiv1.Device) {
		mu.Lock()
		inv := inventory
		mu.Unlock()
		if err := p.SetGPUs(deviceplugin.FromStatus(devs, inv)); err != nil {
			logger.Error(err, "Updating the device plugin's GPUs failed", "node", o.nodeName)
		}
	}
	return onDevices, onInventory, nil
}
