package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/deviceplugin"
	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mps"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// devicePluginOptions are the flags of the kubelet device plugin.
type devicePluginOptions struct {
	enabled      bool
	resourceName string
	pluginDir    string
	cdiDir       string
	allowOthers  bool
	// sharedReplicas is how many gpu.scheduling/gpu-shared devices each GPU is advertised as;
	// 0: no Shared plugin.
	sharedReplicas int
	// mps runs an MPS control daemon per GPU Shared pods hold (package agent/mps), with the
	// binary mpsControl and its directories under mpsRoot.
	mps                 bool
	mpsControl, mpsRoot string
}

// startDevicePlugin serves the kubelet device-plugin API on this node when the node carries
// gpu.scheduling/managed=true, and returns the agent's OnDevices and OnInventory hooks (nil
// when not serving) and a readiness check. Without the label the node's GPUs belong to the
// NVIDIA device plugin: serving both would hand one GPU out twice. With the label the plugin
// still refuses to serve while another GPU device plugin serves the node (unless
// --allow-other-gpu-plugins), and says so: the check fails (the agent is not ready), an Event
// on the Node and an error in the log.
//
// With --mps, the Shared plugin makes its containers clients of their GPU's MPS control daemon,
// which it starts (package agent/mps); computeMode, when set, switches a GPU's compute mode, and
// stopped is done once the daemons have quit after ctx ended.
func startDevicePlugin(ctx context.Context, o options, kube kubernetes.Interface, node *corev1.Node, nodes corelisters.NodeLister, computeMode func(context.Context, string, bool) error, stopped *sync.WaitGroup) (func([]apiv1.Device), func([]topology.Device), func() error, error) {
	logger := klog.FromContext(ctx)
	if !o.devicePlugin.enabled {
		return nil, nil, nil, nil
	}
	if node == nil || node.Labels[deviceplugin.LabelManaged] != "true" {
		logger.Info("Not serving the kubelet device plugin: the node is not labelled "+deviceplugin.LabelManaged+"=true", "node", o.nodeName)
		return nil, nil, nil, nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", o.nodeName).String()
		}))
	pods := factory.Core().V1().Pods()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "gpu-agent", Host: o.nodeName})
	// Events about a Node are filed under its name and UID, as the kubelet's are.
	nodeRef := &corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: types.UID(node.Name)}
	// One plugin per resource: whole GPUs, Shared replicas, and one per MIG profile the node
	// has (started when the layout first shows it).
	var mpsManager *mps.Manager
	if o.devicePlugin.mps && o.devicePlugin.sharedReplicas > 0 {
		mpsManager = mps.New(ctx, mps.Config{
			Control: o.devicePlugin.mpsControl, Root: o.devicePlugin.mpsRoot, SetComputeMode: computeMode,
			Event: func(warning bool, reason, message string) {
				typ := corev1.EventTypeNormal
				if warning {
					typ = corev1.EventTypeWarning
				}
				recorder.Event(nodeRef, typ, reason, message)
			},
			OnRunning: func(n int) { metrics.MPSDaemons.Set(float64(n)) },
			OnRestart: func(string) { metrics.MPSRestarts.Inc() },
		})
		if computeMode == nil {
			logger.Info("MPS on simulated GPUs: their compute mode is not set")
		}
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			<-ctx.Done()
			mpsManager.Wait()
		}()
	}
	newPlugin := func(mode deviceplugin.Mode, profile, resource string) (*deviceplugin.Plugin, error) {
		var mpsServer deviceplugin.MPS
		if mode == deviceplugin.ModeShared && mpsManager != nil {
			mpsServer = mps.Plugin(mpsManager)
		}
		return deviceplugin.New(deviceplugin.Config{
			MPS:      mpsServer,
			NodeName: o.nodeName, ResourceName: resource, Mode: mode, MIGProfile: profile, Replicas: o.devicePlugin.sharedReplicas,
			PluginDir: o.devicePlugin.pluginDir,
			CDIDir:    o.devicePlugin.cdiDir, Pods: pods.Lister(), SchedulerName: o.schedulerName,
			Node: func() (*corev1.Node, error) {
				n, err := nodes.Get(o.nodeName)
				if apierrors.IsNotFound(err) {
					return node, nil // the node informer has not synced yet: the node as read at start
				}
				return n, err
			},
			AllowOtherGPUPlugins: o.devicePlugin.allowOthers,
			OnRefusal: func(reason string) {
				if resource == "" {
					resource = deviceplugin.MIGResourceName(profile)
				}
				if reason != "" {
					recorder.Event(nodeRef, corev1.EventTypeWarning, "GPUDevicePluginRefused",
						"gpu-agent does not serve "+resource+": "+reason)
				} else {
					recorder.Event(nodeRef, corev1.EventTypeNormal, "GPUDevicePluginServing",
						"gpu-agent serves "+resource+": no other GPU device plugin on the node")
				}
			},
		})
	}
	p, err := newPlugin(deviceplugin.ModeGPU, "", o.devicePlugin.resourceName)
	if err != nil {
		return nil, nil, nil, err
	}
	plugins := []*deviceplugin.Plugin{p}
	if o.devicePlugin.sharedReplicas > 0 {
		shared, err := newPlugin(deviceplugin.ModeShared, "", deviceplugin.SharedResourceName)
		if err != nil {
			return nil, nil, nil, err
		}
		plugins = append(plugins, shared)
		if mpsManager == nil {
			logger.Info("Shared GPUs: the agent runs no MPS (--mps is off); shares are enforced only where the operator runs MPS for the GPU, otherwise accounted only (docs/sharing.md)")
		}
	}
	migPlugins := map[string]*deviceplugin.Plugin{}
	pods.Informer() // registered before Start
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, nil, nil, fmt.Errorf("device plugin: syncing the pods of node %q (%v) failed", o.nodeName, typ)
		}
	}
	run := func(p *deviceplugin.Plugin) {
		go func() {
			if err := p.Run(ctx); err != nil {
				logger.Error(err, "Kubelet device plugin stopped")
			}
		}()
	}
	go func() {
		<-ctx.Done()
		broadcaster.Shutdown()
	}()
	for _, p := range plugins {
		run(p)
	}
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
		gpus := deviceplugin.FromStatus(devs, inv)
		for _, g := range gpus {
			for _, m := range g.MIG {
				if migPlugins[m.Profile] != nil {
					continue
				}
				mp, err := newPlugin(deviceplugin.ModeMIG, m.Profile, "")
				if err != nil {
					logger.Error(err, "Starting the device plugin of a MIG profile failed", "profile", m.Profile)
					continue
				}
				migPlugins[m.Profile] = mp
				plugins = append(plugins, mp)
				run(mp)
			}
		}
		all := slices.Clone(plugins)
		mu.Unlock()
		if mpsManager != nil {
			mpsManager.Sync(ctx, sharedGPUs(devs))
		}
		for _, p := range all {
			if err := p.SetGPUs(gpus); err != nil {
				logger.Error(err, "Updating the device plugin's GPUs failed", "node", o.nodeName)
			}
		}
	}
	ready := func() error {
		mu.Lock()
		all := slices.Clone(plugins)
		mu.Unlock()
		for _, p := range all {
			if r := p.Refusal(); r != "" {
				return errors.New("not serving the kubelet device plugin: " + r)
			}
		}
		return nil
	}
	return onDevices, onInventory, ready, nil
}

// sharedGPUs are the UUIDs of the GPUs that Shared pods hold, as the leases the agent read say:
// those whose MPS control daemon must keep running.
func sharedGPUs(devs []apiv1.Device) map[string]bool {
	out := map[string]bool{}
	for _, d := range devs {
		if d.Shares != nil && d.Shares.Sharers > 0 && d.UUID != "" {
			out[d.UUID] = true
		}
	}
	return out
}

// nvmlComputeMode switches a GPU's compute mode through NVML: EXCLUSIVE_PROCESS while its MPS
// daemon runs (only the MPS server may then open a context), DEFAULT after. NVML refuses it
// without root or on GPUs that do not support it; the error says which.
func nvmlComputeMode(lib nvml.Interface) func(context.Context, string, bool) error {
	return func(_ context.Context, uuid string, exclusive bool) error {
		// Init and Shutdown are reference counted: the agent's own NVML session is untouched.
		if ret := lib.Init(); ret != nvml.SUCCESS {
			return fmt.Errorf("initialising NVML: %s", nvml.ErrorString(ret))
		}
		defer func() { _ = lib.Shutdown() }() // the agent's own session stays open
		dev, ret := lib.DeviceGetHandleByUUID(uuid)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("finding GPU %s: %s", uuid, nvml.ErrorString(ret))
		}
		mode, name := nvml.COMPUTEMODE_DEFAULT, "DEFAULT"
		if exclusive {
			mode, name = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, "EXCLUSIVE_PROCESS"
		}
		if ret := dev.SetComputeMode(mode); ret != nvml.SUCCESS {
			return fmt.Errorf("setting GPU %s to compute mode %s: %s", uuid, name, nvml.ErrorString(ret))
		}
		return nil
	}
}
