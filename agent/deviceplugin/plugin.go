// Package deviceplugin is the agent's kubelet-facing side: it serves the kubelet device-plugin
// API (v1beta1) for our GPU resource, so that the kubelet counts our GPUs (node allocatable,
// ResourceQuota, the autoscaler) and hands a container exactly the GPUs our scheduler chose.
//
// The kubelet's requests carry no pod identity. The plugin finds the pod the way other exact-GPU
// schedulers do: among the pods bound to this node that carry our allocation annotation and have
// not been handed their GPUs yet, GetPreferredAllocation proposes the IDs of the one bound first
// whose GPU count matches and whose GPUs are all free. Allocate then accepts only an ID set that
// is exactly one such pod's allocation: the scheduler's Leases guarantee no two live pods hold a
// GPU, so an ID set names at most one pod and two pods starting at once can never swap GPUs.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// DefaultResourceName is the extended resource the plugin serves unless told otherwise. Our own
// name, not NVIDIA's nvidia.com/gpu: the kubelet keeps one plugin per resource name, so two
// plugins registering nvidia.com/gpu would silently replace each other, and a pod asking for
// nvidia.com/gpu by hand (placed by the default scheduler) must find no such resource on our
// nodes rather than be handed a claim pod's GPUs. A node is either ours or the NVIDIA device
// plugin's (LabelManaged), never both; OtherGPUPlugins checks it.
const DefaultResourceName = "gpu.scheduling/gpu"

// GPU is one of the node's GPUs as the plugin advertises it.
type GPU struct {
	// Index is the GPU's index, the ID the scheduler allocates and the kubelet's device ID.
	Index int
	// UUID is the GPU's NVML UUID (GPU-...), handed to the container in NVIDIA_VISIBLE_DEVICES.
	UUID string
	// Minor is the driver's minor number of the GPU: its device node is /dev/nvidia<Minor>,
	// which is not always /dev/nvidia<Index> (the driver numbers GPUs in its probe order, NVML
	// by PCI bus ID). -1 when unknown (the GPU was lost when discovered): it is not handed out.
	Minor int
	// Healthy is false when the agent's health tracker says the GPU is not Healthy.
	Healthy bool
	// NUMANode is the GPU's NUMA node, or -1 when unknown.
	NUMANode int
	// MIGMode is set when the GPU is in MIG mode: it is never handed out whole, only its MIG
	// devices are.
	MIGMode bool
	// MIG are the GPU's MIG devices.
	MIG []MIGDevice
}

func gpuEqual(a, b GPU) bool {
	return a.Index == b.Index && a.UUID == b.UUID && a.Minor == b.Minor && a.Healthy == b.Healthy &&
		a.NUMANode == b.NUMANode && a.MIGMode == b.MIGMode && slices.Equal(a.MIG, b.MIG)
}

// Config configures a Plugin.
type Config struct {
	// NodeName is this node; only pods bound to it are considered.
	NodeName string
	// ResourceName is the extended resource served. Default DefaultResourceName, for ModeMIG
	// MIGResourceName(MIGProfile), for ModeShared SharedResourceName.
	ResourceName string
	// Mode is what the plugin serves (whole GPUs by default).
	Mode Mode
	// MIGProfile is the MIG profile a ModeMIG plugin serves, such as 1g.10gb.
	MIGProfile string
	// Replicas is how many devices a ModeShared plugin advertises per GPU. Default
	// DefaultReplicas.
	Replicas int
	// ProcRoot is where the driver's /proc files are read (MIG capability device nodes).
	// Default /proc.
	ProcRoot string
	// PluginDir is the kubelet's device-plugin directory, holding kubelet.sock. Default
	// /var/lib/kubelet/device-plugins.
	PluginDir string
	// SocketName is the plugin's socket in PluginDir. Default gpu-scheduler.sock.
	SocketName string
	// Pods lists pods; those bound to NodeName are considered (a node-scoped informer suffices).
	Pods corelisters.PodLister
	// SchedulerName is the scheduler of this agent's release: only pods with that
	// spec.schedulerName are handed GPUs. Our scheduler locks a pod's GPUs with its Leases
	// before it writes the allocation; a pod some other scheduler (or a user with nodeName)
	// put here carrying an allocation annotation holds no lock, and gets nothing. Default
	// apiv1.SchedulerName.
	SchedulerName string
	// CDIVendorClass is the CDI kind of the devices handed over. Default DefaultCDIKind.
	CDIKind string
	// DevRoot is where the device nodes live on the host. Default /dev.
	DevRoot string
	// CDIDir, when set, is where the plugin keeps the CDI spec of the node's GPUs (normally
	// /var/run/cdi); it is rewritten when the GPUs (not their health) change.
	CDIDir string
	// UnallocatedWait is how long GetPreferredAllocation and Allocate wait, before refusing,
	// for a pod that asks for the resource without our allocation and that the request may be
	// for to be refused or gone (see settled). Default 10s; negative: no wait.
	UnallocatedWait time.Duration
	// Node, when set, reads this node (from an informer): its capacity shows the GPU resources
	// other device plugins registered with the kubelet. See AllowOtherGPUPlugins.
	Node func() (*corev1.Node, error)
	// OtherGPUResources are the resources of other GPU device plugins (OtherGPUPlugins);
	// default DefaultOtherGPUResources.
	OtherGPUResources []string
	// AllowOtherGPUPlugins serves even while another device plugin serves GPUs on this node
	// (OtherGPUPlugins finds one): only where the operator has split the node's GPUs between
	// the plugins, so that none is served by both. Without it the plugin does not serve, or
	// stops serving, while another one is there: two plugins would hand one GPU out twice.
	AllowOtherGPUPlugins bool
	// OnRefusal, when set, is called when the plugin starts refusing to serve (with the reason)
	// and when it serves again (with "").
	OnRefusal func(reason string)
	// MPS, when set, runs the MPS control daemons of shared GPUs (package agent/mps): a
	// ModeShared Allocate has it start the daemon of each GPU it hands over before the
	// container starts, mounts the daemon's pipe directory and shared memory into the
	// container and points CUDA_MPS_PIPE_DIRECTORY at it. nil: no MPS, shares accounted only.
	MPS MPS
	// RecheckInterval is how often the plugin checks that its socket still exists (the kubelet
	// removes every socket when it restarts, and the plugin then serves and registers again)
	// and looks for other GPU device plugins. Default 5s.
	RecheckInterval time.Duration
}

// Plugin serves the device-plugin API for one node.
type Plugin struct {
	cfg Config

	mu      sync.Mutex
	gpus    []GPU
	changed chan struct{} // closed and replaced on every change of gpus
	// taken records, by pod UID, the pods whose allocation the kubelet has been handed.
	taken map[string]bool
	// refusal says why the plugin does not serve ("" while it serves or may).
	refusal string

	// allocMu serialises GetPreferredAllocation and Allocate: one pod is matched at a time.
	allocMu sync.Mutex

	server *grpc.Server
}

// New makes a plugin. Call SetGPUs, then Run.
func New(cfg Config) (*Plugin, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("device plugin: NodeName is empty")
	}
	if cfg.Pods == nil {
		return nil, fmt.Errorf("device plugin for node %q: Pods lister is required", cfg.NodeName)
	}
	switch cfg.Mode {
	case ModeMIG:
		if cfg.MIGProfile == "" {
			return nil, fmt.Errorf("device plugin for node %q: a MIG plugin needs its MIGProfile", cfg.NodeName)
		}
		if cfg.ResourceName == "" {
			cfg.ResourceName = MIGResourceName(cfg.MIGProfile)
		}
		if cfg.SocketName == "" {
			cfg.SocketName = "gpu-scheduler-mig-" + strings.ReplaceAll(cfg.MIGProfile, "+", ".") + ".sock"
		}
		if cfg.CDIKind == "" {
			cfg.CDIKind = DefaultCDIKind + "-mig-" + strings.ReplaceAll(cfg.MIGProfile, "+", ".")
		}
	case ModeShared:
		if cfg.ResourceName == "" {
			cfg.ResourceName = SharedResourceName
		}
		if cfg.SocketName == "" {
			cfg.SocketName = "gpu-scheduler-shared.sock"
		}
		if cfg.CDIKind == "" {
			cfg.CDIKind = DefaultCDIKind + "-shared"
		}
		if cfg.Replicas <= 0 {
			cfg.Replicas = DefaultReplicas
		}
	}
	if cfg.ResourceName == "" {
		cfg.ResourceName = DefaultResourceName
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = apiv1.SchedulerName
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = pluginapi.DevicePluginPath
	}
	if cfg.SocketName == "" {
		cfg.SocketName = "gpu-scheduler.sock"
	}
	if cfg.CDIKind == "" {
		cfg.CDIKind = DefaultCDIKind
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/dev"
	}
	if cfg.UnallocatedWait == 0 {
		cfg.UnallocatedWait = 10 * time.Second
	}
	if cfg.RecheckInterval <= 0 {
		cfg.RecheckInterval = 5 * time.Second
	}
	return &Plugin{cfg: cfg, changed: make(chan struct{}), taken: map[string]bool{}}, nil
}

// LabelManaged on a node says its GPUs are ours: the chart runs the agent's device plugin there,
// and the NVIDIA device plugin must not run there (see docs/node.md).
const LabelManaged = apiv1.LabelPrefix + "managed"

// SetGPUs replaces the advertised GPUs (inventory and health); ListAndWatch streams the change.
// With CDIDir set, a change of the inventory also rewrites the CDI spec.
func (p *Plugin) SetGPUs(gpus []GPU) error {
	// A GPU whose index no allocation annotation can name (apiv1.ParseIDs is the annotations'
	// parser) could never be handed to a claim pod: it is not advertised, so that the kubelet
	// does not count it either.
	var unnamed []string
	gpus = slices.DeleteFunc(slices.Clone(gpus), func(g GPU) bool {
		if _, err := apiv1.ParseIDs(deviceID(g.Index)); err != nil {
			unnamed = append(unnamed, fmt.Sprintf("GPU %d (%s): %v", g.Index, g.UUID, err))
			return true
		}
		return false
	})
	if err := p.setGPUs(gpus); err != nil {
		return err
	}
	if len(unnamed) > 0 {
		return fmt.Errorf("device plugin for node %q does not advertise %s", p.cfg.NodeName, strings.Join(unnamed, "; "))
	}
	return nil
}

func (p *Plugin) setGPUs(gpus []GPU) error {
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	byMinor := map[int]int{}
	for _, g := range gpus {
		if g.Minor < 0 {
			continue
		}
		if other, dup := byMinor[g.Minor]; dup {
			return fmt.Errorf("device plugin for node %q: GPUs %d and %d both have device minor %d (/dev/nvidia%d); each GPU has its own device node",
				p.cfg.NodeName, other, g.Index, g.Minor, g.Minor)
		}
		byMinor[g.Minor] = g.Index
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.EqualFunc(gpus, p.gpus, gpuEqual) {
		return nil
	}
	inventory := func(g GPU) [4]string {
		var mig []string
		for _, m := range g.MIG {
			mig = append(mig, strconv.Itoa(m.Slot)+"="+m.UUID)
		}
		return [4]string{deviceID(g.Index), g.UUID, strconv.Itoa(g.Minor), strconv.FormatBool(g.MIGMode) + strings.Join(mig, ",")}
	}
	sameInventory := slices.EqualFunc(gpus, p.gpus, func(a, b GPU) bool { return inventory(a) == inventory(b) })
	p.gpus = gpus
	close(p.changed)
	p.changed = make(chan struct{})
	if p.cfg.CDIDir != "" && !sameInventory {
		return p.WriteCDISpec(p.cfg.CDIDir, gpus)
	}
	return nil
}

func (p *Plugin) snapshot() ([]GPU, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gpus, p.changed
}

func (p *Plugin) socketPath() string { return filepath.Join(p.cfg.PluginDir, p.cfg.SocketName) }

// Run serves and registers with the kubelet until ctx is done, serving and registering again
// whenever the kubelet restarts (it removes the plugin's socket when it does).
func (p *Plugin) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", p.cfg.NodeName, "resource", p.cfg.ResourceName)
	ctx = klog.NewContext(ctx, logger)
	defer p.stop()
	registered := false
	for {
		reason := p.othersReason()
		if p.setRefusal(reason) {
			if reason != "" {
				logger.Error(nil, "Not serving the kubelet device plugin: two device plugins would hand one GPU out twice; "+
					"remove the other one from this node or, if the node's GPUs are split between the plugins, set the chart's "+
					"devicePlugin.allowOtherGPUPlugins (--allow-other-gpu-plugins)", "reason", reason)
			} else {
				logger.Info("No other GPU device plugin on this node (any more): serving")
			}
		}
		if reason != "" {
			p.stop() // closing the listener removes the socket: the kubelet stops counting our GPUs
			registered = false
		} else if _, err := os.Stat(p.socketPath()); err != nil || !registered {
			p.stop()
			if err := p.serveAndRegister(ctx); err != nil {
				// The kubelet may not be up yet: try again at the next check.
				logger.Error(err, "Serving the device plugin failed; retrying")
				registered = false
			} else {
				logger.Info("Registered the device plugin with the kubelet", "socket", p.socketPath())
				registered = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.cfg.RecheckInterval):
		}
	}
}

// Refusal says why the plugin does not serve: another GPU device plugin serves this node (see
// Config.AllowOtherGPUPlugins); "" while it serves. The agent's readiness follows it.
func (p *Plugin) Refusal() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusal
}

// setRefusal records reason and reports whether it changed whether the plugin refuses (or why).
func (p *Plugin) setRefusal(reason string) bool {
	p.mu.Lock()
	changed := p.refusal != reason
	p.refusal = reason
	p.mu.Unlock()
	if changed && p.cfg.OnRefusal != nil {
		p.cfg.OnRefusal(reason)
	}
	return changed
}

// othersReason says why the plugin must not serve now: another GPU device plugin on the node,
// or that it cannot tell. "" when it may serve.
func (p *Plugin) othersReason() string {
	if p.cfg.AllowOtherGPUPlugins {
		return ""
	}
	var node *corev1.Node
	if p.cfg.Node != nil {
		n, err := p.cfg.Node()
		if err != nil {
			return fmt.Sprintf("cannot tell whether another device plugin serves GPUs on node %s: reading the node: %v", p.cfg.NodeName, err)
		}
		node = n
	}
	found, err := OtherGPUPlugins(node, p.cfg.PluginDir, p.cfg.ResourceName, p.cfg.SocketName, p.cfg.OtherGPUResources)
	if err != nil {
		return fmt.Sprintf("cannot tell whether another device plugin serves GPUs on node %s: %v", p.cfg.NodeName, err)
	}
	if len(found) == 0 {
		return ""
	}
	return fmt.Sprintf("another device plugin serves GPUs on node %s (%s); this plugin serves %s", p.cfg.NodeName, strings.Join(found, "; "), p.cfg.ResourceName)
}

func (p *Plugin) stop() {
	p.mu.Lock()
	s := p.server
	p.server = nil
	p.mu.Unlock()
	if s != nil {
		s.Stop()
	}
}

func (p *Plugin) serveAndRegister(ctx context.Context) error {
	path := p.socketPath()
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, &server{p: p})
	go func() { _ = s.Serve(lis) }()
	p.mu.Lock()
	p.server = s
	p.mu.Unlock()

	kubelet := filepath.Join(p.cfg.PluginDir, filepath.Base(pluginapi.KubeletSocket))
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to the kubelet at %s: %w", kubelet, err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.SocketName,
		ResourceName: p.cfg.ResourceName,
		Options:      options(),
	})
	if err != nil {
		return fmt.Errorf("registering resource %s with the kubelet at %s: %w", p.cfg.ResourceName, kubelet, err)
	}
	return nil
}

func options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// server is the gRPC face of a Plugin.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	p *Plugin
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return options(), nil
}

// ListAndWatch sends the GPUs and their health, then again on every change.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		gpus, changed := s.p.snapshot()
		resp := &pluginapi.ListAndWatchResponse{Devices: s.p.advertised(gpus)}
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// FromStatus turns the agent's view of the GPUs into what the plugin advertises: a GPU is
// Healthy for the kubelet only when the agent says Healthy (Unknown is not safe to hand out).
// The device minors come from the agent's discovery (inventory), which the status does not
// carry; a GPU missing there has none (Minor -1) and is not handed out. A GPU in MIG mode
// carries its MIG devices (their instance IDs from the discovery too); a MIG device is Healthy
// only when the agent says so.
func FromStatus(devs []apiv1.Device, inventory []topology.Device) []GPU {
	inv := make(map[int]topology.Device, len(inventory))
	for _, d := range inventory {
		inv[d.Index] = d
	}
	out := make([]GPU, 0, len(devs))
	for _, d := range devs {
		found, ok := inv[int(d.ID)]
		minor := found.Minor
		if !ok {
			minor = -1
		}
		g := GPU{Index: int(d.ID), UUID: d.UUID, Minor: minor, Healthy: d.Health == apiv1.Healthy, NUMANode: -1}
		if d.MIG != nil && d.MIG.Enabled {
			g.MIGMode = true
			for _, m := range d.MIG.Devices {
				md := MIGDevice{Slot: int(m.Slot), Profile: m.Profile, UUID: m.UUID, GI: -1, CI: -1, Healthy: m.Health == apiv1.Healthy}
				if found.MIG != nil {
					for _, im := range found.MIG.Devices {
						if im.Slot == md.Slot && im.UUID == md.UUID {
							md.GI, md.CI = im.GI, im.CI
						}
					}
				}
				g.MIG = append(g.MIG, md)
			}
		}
		out = append(out, g)
	}
	return out
}
