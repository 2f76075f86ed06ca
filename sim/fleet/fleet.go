// Package fleet runs the production agent loop for many simulated (kwok) nodes in one process:
// the simulator's agents (gpu-sim run in process, gpu-sim agent-fleet as a process of its own).
// No product binary links it.
//
// Each node carrying the label gpu.scheduling/topology gets an agent over a fresh mock server of
// that topology (package agent/mock); nodes that come and go start and stop their agents. The
// agents share one node informer, one lease informer and one status-write rate limiter, so
// 5,000 nodes cost three watches and a bounded write rate, not 5,000 of each.
//
// The simulator injects faults with Fleet.InjectFault, or over HTTP through Fleet.Handler.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/leases"
	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Config configures a Fleet.
type Config struct {
	KubeClient kubernetes.Interface
	GPUClient  versioned.Interface
	// LeaseNamespace is where the scheduler keeps its GPU leases and each node's agent renews
	// its liveness Lease. Default gpu-scheduler.
	LeaseNamespace string
	// Agent holds the intervals and clock every node's agent uses; the fleet fills in the
	// node name, GPUs, clients, listers and write limiter.
	Agent agent.Config
	// WriteQPS and WriteBurst cap the status writes of the whole fleet. Defaults 100 and 200.
	WriteQPS   float32
	WriteBurst int
	// NodeSelector, a label selector (kubectl's syntax), narrows the fleet to some of the
	// labelled nodes: a release's pool, as a DaemonSet's node selector does for real nodes, or
	// a test that runs a fleet beside nodes it plays itself. Empty: every node carrying
	// gpu.scheduling/topology.
	NodeSelector string
	// EventWaitTimeout bounds each agent's wait for mock NVML events (how fast a removed node's
	// agent stops). Default 2s.
	EventWaitTimeout time.Duration
	// DeviceHook, when set, gives each node's agent its OnDevices function (agent.Config): the
	// simulator's DRA baseline publishes every node's ResourceSlice from it (package sim/dra).
	DeviceHook func(node *corev1.Node) func([]apiv1.Device)
}

// Fleet is the set of simulated node agents.
type Fleet struct {
	cfg     Config
	limiter flowcontrol.RateLimiter
	// selector is NodeSelector parsed: the watch asks the API server for these nodes only, and
	// nodeChanged checks again (a node relabelled out of the pool stops its agent).
	selector labels.Selector

	mu      sync.Mutex
	ctx     context.Context // Run's; nil before Run
	members map[string]*member
	nodes   corelisters.NodeLister
	leases  cache.Indexer
	wg      sync.WaitGroup
}

type member struct {
	topology string
	uid      types.UID
	server   *mock.Server
	agent    *agent.Agent
	cancel   context.CancelFunc
	// done is closed when the agent's Run has returned.
	done chan struct{}
	// suspended: the agent was stopped on purpose (Suspend) and stays stopped until Resume.
	suspended bool
}

// New makes a fleet; Run starts it.
func New(cfg Config) (*Fleet, error) {
	if cfg.KubeClient == nil || cfg.GPUClient == nil {
		return nil, errors.New("fleet: KubeClient and GPUClient are required")
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = "gpu-scheduler"
	}
	selector, err := labels.Parse(cfg.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("fleet: node selector %q: %w", cfg.NodeSelector, err)
	}
	if cfg.WriteQPS <= 0 {
		cfg.WriteQPS = 100
	}
	if cfg.WriteBurst <= 0 {
		cfg.WriteBurst = 200
	}
	return &Fleet{
		cfg:      cfg,
		limiter:  flowcontrol.NewTokenBucketRateLimiter(cfg.WriteQPS, cfg.WriteBurst),
		selector: selector,
		members:  map[string]*member{},
	}, nil
}

// Run watches the nodes and runs their agents until ctx is done, then stops them all.
func (f *Fleet) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(f.cfg.KubeClient, 0,
		informers.WithTransform(crcache.TransformStripManagedFields()),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = f.labelSelector() }))
	nodeInformer := nodeFactory.Core().V1().Nodes()
	leaseFactory := leases.NewInformerFactory(f.cfg.KubeClient, f.cfg.LeaseNamespace, "", 0)
	leaseInformer, err := leases.Informer(leaseFactory)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	f.mu.Lock()
	f.ctx, f.nodes, f.leases = ctx, nodeInformer.Lister(), leaseInformer.GetIndexer()
	f.mu.Unlock()

	if _, err := leaseInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.poke(leases.NodeOf(obj)) },
		UpdateFunc: func(_, obj any) { f.poke(leases.NodeOf(obj)) },
		DeleteFunc: func(obj any) { f.poke(leases.NodeOf(obj)) },
	}); err != nil {
		return fmt.Errorf("fleet: watch leases: %w", err)
	}
	leaseFactory.Start(ctx.Done())
	// Leases first: an agent that starts before the lease cache is full would publish GPUs
	// as free that are held.
	leaseFactory.WaitForCacheSync(ctx.Done())

	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.nodeChanged(ctx, nil, obj) },
		UpdateFunc: func(old, obj any) { f.nodeChanged(ctx, old, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				f.stop(ctx, n.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("fleet: watch nodes: %w", err)
	}
	nodeFactory.Start(ctx.Done())
	nodeFactory.WaitForCacheSync(ctx.Done())
	logger.Info("Fleet agent running", "nodes", len(f.Nodes()))

	<-ctx.Done()
	f.mu.Lock()
	for name := range f.members {
		f.stopLocked(ctx, name)
	}
	f.mu.Unlock()
	f.wg.Wait()
	nodeFactory.Shutdown()
	leaseFactory.Shutdown()
	return nil
}

// labelSelector selects the fleet's nodes: those with a topology, within NodeSelector.
func (f *Fleet) labelSelector() string {
	if f.cfg.NodeSelector == "" {
		return apiv1.LabelTopology
	}
	return apiv1.LabelTopology + "," + f.cfg.NodeSelector
}

func (f *Fleet) poke(node string) {
	f.mu.Lock()
	m := f.members[node]
	f.mu.Unlock()
	if m != nil {
		m.agent.Poke()
	}
}

// nodeChanged starts, restarts or pokes the node's agent.
func (f *Fleet) nodeChanged(ctx context.Context, oldObj, obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	topology := n.Labels[apiv1.LabelTopology]
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.selector.Matches(labels.Set(n.Labels)) {
		f.stopLocked(ctx, n.Name) // not (or no longer) in this fleet's pool
		return
	}
	m := f.members[n.Name]
	if m != nil && m.topology == topology && m.uid == n.UID {
		if m.suspended {
			return
		}
		if old, ok := oldObj.(*corev1.Node); ok && !maps.Equal(old.Labels, n.Labels) {
			m.agent.Poke() // someone touched the labels: the agent puts its own back
		}
		return
	}
	if m != nil {
		f.stopLocked(ctx, n.Name)
	}
	if err := f.startLocked(ctx, n, topology); err != nil {
		klog.FromContext(ctx).Error(err, "Node gets no simulated GPUs", "node", klog.KObj(n))
	}
}

func (f *Fleet) startLocked(ctx context.Context, n *corev1.Node, topology string) error {
	srv, err := mock.New(topology, mock.WithSeed(n.Name))
	if err != nil {
		return err
	}
	m := &member{topology: topology, uid: n.UID, server: srv}
	if err := f.runLocked(ctx, n, m); err != nil {
		return err
	}
	f.members[n.Name] = m
	return nil
}

// runLocked starts an agent for node n over m's mock server.
func (f *Fleet) runLocked(ctx context.Context, n *corev1.Node, m *member) error {
	srv := m.server
	cfg := f.cfg.Agent
	cfg.NodeName, cfg.LeaseNamespace = n.Name, f.cfg.LeaseNamespace
	cfg.GPUs = nvmlgpu.New(srv, nvmlgpu.Options{EventWaitTimeout: f.cfg.EventWaitTimeout})
	cfg.GPUClient, cfg.KubeClient = f.cfg.GPUClient, f.cfg.KubeClient
	cfg.Nodes, cfg.Leases, cfg.WriteLimiter = f.nodes, f.leases, f.limiter
	if f.cfg.DeviceHook != nil {
		cfg.OnDevices = f.cfg.DeviceHook(n)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	m.agent, m.cancel, m.done, m.suspended = a, cancel, done, false
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(done)
		if err := a.Run(actx); err != nil {
			klog.FromContext(ctx).Error(err, "Node agent stopped", "node", n.Name)
		}
	}()
	return nil
}

func (f *Fleet) stop(ctx context.Context, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopLocked(ctx, name)
}

// stopLocked cancels the node's agent without waiting for it: informer handlers must not block.
func (f *Fleet) stopLocked(ctx context.Context, name string) {
	m := f.members[name]
	if m == nil {
		return
	}
	m.cancel()
	delete(f.members, name)
	metrics.ForgetNode(name)
	klog.FromContext(ctx).V(2).Info("Node agent stopping", "node", name)
}

// Nodes lists the nodes that have an agent, sorted.
func (f *Fleet) Nodes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.members))
}

// ErrUnknownNode is returned by InjectFault for a node without an agent.
var ErrUnknownNode = errors.New("node has no simulated GPUs")

// InjectFault applies fault to GPU gpu of node and makes the node's agent look at once.
func (f *Fleet) InjectFault(node string, gpu int, fault mock.Fault) error {
	f.mu.Lock()
	m := f.members[node]
	f.mu.Unlock()
	if m == nil {
		return fmt.Errorf("inject %s into node %s GPU %d: %w", fault, node, gpu, ErrUnknownNode)
	}
	if err := m.server.Inject(gpu, fault); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	m.agent.Poke()
	return nil
}

// SetLoad pins the utilisation of GPU gpu of node to percent (0-100); a negative percent lets
// it follow its simulated load again (see mock.Server.SetLoad).
func (f *Fleet) SetLoad(node string, gpu, percent int) error {
	f.mu.Lock()
	m := f.members[node]
	f.mu.Unlock()
	if m == nil {
		return fmt.Errorf("set load of node %s GPU %d: %w", node, gpu, ErrUnknownNode)
	}
	if err := m.server.SetLoad(gpu, percent); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return nil
}

// Watched tells whether node's agent listens to the events of all its GPUs: a fault injected
// before that is seen by the probes but not as an event.
func (f *Fleet) Watched(node string) bool {
	f.mu.Lock()
	m := f.members[node]
	f.mu.Unlock()
	if m == nil {
		return false
	}
	for i := range m.server.NumDevices() {
		if !m.server.Watched(i) {
			return false
		}
	}
	return true
}

// Handler serves POST /fault?node=NODE&gpu=ID&fault=KIND (KIND as mock.ParseFault reads it:
// xid79, dbe, lost, remap-failure, recover) and GET /nodes (one node name per line).
func (f *Fleet) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		node, gpuArg, faultArg := r.FormValue("node"), r.FormValue("gpu"), r.FormValue("fault")
		gpu, err := strconv.Atoi(gpuArg)
		if err != nil || len(gpuArg) > 4 {
			http.Error(w, fmt.Sprintf("gpu %q is not a GPU index", truncate(gpuArg)), http.StatusBadRequest)
			return
		}
		fault, err := mock.ParseFault(faultArg)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := f.InjectFault(node, gpu, fault); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, ErrUnknownNode) {
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
			return
		}
		fmt.Fprintf(w, "injected %s into %s GPU %d\n", fault, node, gpu)
	})
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, r *http.Request) {
		for _, n := range f.Nodes() {
			fmt.Fprintln(w, n)
		}
	})
	return mux
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
