package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Labels and resources on the fake GPU nodes.
const (
	// LabelPool names the NodePool a node belongs to.
	LabelPool = gpuv1.LabelPrefix + "pool"
	// ResourceGPU is the extended resource the stock scheduler counts (the device plugin's name).
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// LabelKwokType and the taint of the same key mark kwok nodes the way kwokctl does.
	LabelKwokType = "type"
)

// NodePool is a group of identical fake GPU nodes, named <Name>-<index>.
type NodePool struct {
	// Name of the pool: label gpu.scheduling/pool and the node name prefix. A DNS label.
	Name string
	// Count of nodes.
	Count int
	// GPUsPerNode is each node's nvidia.com/gpu capacity and allocatable.
	GPUsPerNode int
	// Topology is the mock GPU topology the nodes carry (label gpu.scheduling/topology), the
	// name the agent's mock NVML and the scheduler look up.
	Topology string
	// Labels are added to every node (they cannot override the pool and topology labels).
	Labels map[string]string
	// Taints are put on every node.
	Taints []corev1.Taint
	// CPU and Memory capacity of each node; defaults 128 and 1Ti.
	CPU, Memory resource.Quantity
	// Pods is each node's pod capacity; default 110.
	Pods int
}

// Validate reports every problem with the pool.
func (p NodePool) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(p.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("name %q: %s", p.Name, strings.Join(msgs, "; ")))
	}
	if p.Count < 1 {
		errs = append(errs, fmt.Errorf("count %d: must be at least 1", p.Count))
	}
	if p.GPUsPerNode < 0 {
		errs = append(errs, fmt.Errorf("gpusPerNode %d: must not be negative", p.GPUsPerNode))
	}
	if p.Topology != "" {
		if msgs := validation.IsValidLabelValue(p.Topology); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("topology %q: %s", p.Topology, strings.Join(msgs, "; ")))
		}
	}
	for k, v := range p.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label key %q: %s", k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %s=%q: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	if p.Pods < 0 {
		errs = append(errs, fmt.Errorf("pods %d: must not be negative", p.Pods))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid node pool %q: %w", p.Name, errors.Join(errs...))
	}
	return nil
}

// NodeName is the name of node i of pool.
func NodeName(pool string, i int) string { return fmt.Sprintf("%s-%05d", pool, i) }

// PoolSelector selects the nodes of one pool.
func PoolSelector(pool string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelPool: pool})
}

// Node builds node i of the pool as CreateNodePool creates it: status capacity is set at create
// time (the apiserver keeps a node's status on create, as for a registering kubelet), so each
// node costs one write; kwok's node-initialize stage then makes it Ready.
func (p NodePool) Node(i int) *corev1.Node {
	name := NodeName(p.Name, i)
	l := map[string]string{}
	for k, v := range p.Labels {
		l[k] = v
	}
	l[corev1.LabelHostname] = name
	l[corev1.LabelOSStable] = "linux"
	l[corev1.LabelArchStable] = "amd64"
	l[LabelKwokType] = "kwok"
	l[LabelPool] = p.Name
	if p.Topology != "" {
		l[gpuv1.LabelTopology] = p.Topology
	}
	cpu, mem, pods := p.CPU, p.Memory, p.Pods
	if cpu.IsZero() {
		cpu = resource.MustParse("128")
	}
	if mem.IsZero() {
		mem = resource.MustParse("1Ti")
	}
	if pods == 0 {
		pods = 110
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    cpu,
		corev1.ResourceMemory: mem,
		corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
		ResourceGPU:           *resource.NewQuantity(int64(p.GPUsPerNode), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: l,
			Annotations: map[string]string{
				AnnotationKwokNode: KwokNodeValue,
				// Lets the scheduler and clients cache node data without kubelet-style TTL hints.
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Spec: corev1.NodeSpec{Taints: append([]corev1.Taint(nil), p.Taints...)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Phase:       corev1.NodePending,
		},
	}
}

// createWorkers is how many node creates are in flight at once: enough to keep the apiserver's
// two cores busy, few enough not to queue thousands of requests at it.
const createWorkers = 32

// CreateNodePool creates the pool's nodes concurrently. It does not wait for them to be Ready:
// call WaitNodesReady.
func (c *Cluster) CreateNodePool(ctx context.Context, pool NodePool) error {
	return c.CreateNodes(ctx, pool, nil)
}

// CreateNodes creates the pool's nodes of the given indices (all of them when only is nil)
// concurrently: a run that reuses the nodes of an earlier one makes only those missing (a
// NodeRemoved fault deleted them).
func (c *Cluster) CreateNodes(ctx context.Context, pool NodePool, only []int) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	if only == nil {
		only = make([]int, pool.Count)
		for i := range only {
			only[i] = i
		}
	}
	for _, i := range only {
		if i < 0 || i >= pool.Count {
			return fmt.Errorf("node pool %s: no node %d (it has %d)", pool.Name, i, pool.Count)
		}
	}
	if len(only) == 0 {
		return nil
	}
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 10000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client for node pool %s: %w", pool.Name, err)
	}
	began := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(createWorkers, len(only)) {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= len(only) || ctx.Err() != nil {
					return
				}
				i := only[k]
				if _, err := cs.CoreV1().Nodes().Create(ctx, pool.Node(i), metav1.CreateOptions{}); err != nil {
					cancel(fmt.Errorf("creating node %s of pool %s: %w", NodeName(pool.Name, i), pool.Name, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Created node pool", "pool", pool.Name, "nodes", len(only),
		"gpusPerNode", pool.GPUsPerNode, "topology", pool.Topology, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// NodeSchedulable reports whether a node is Ready and carries neither the not-ready nor the
// unreachable taint, i.e. the stock scheduler would place pods on it now.
func NodeSchedulable(n *corev1.Node) bool {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return true
}

// WaitNodesReady waits until at least count nodes matching selector are Ready and untainted
// (NodeSchedulable). It watches nodes instead of listing them repeatedly, which would cost the
// apiserver megabytes a second at 5,000 nodes.
func (c *Cluster) WaitNodesReady(ctx context.Context, selector labels.Selector, count int, timeout time.Duration) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return fmt.Errorf("creating client to wait for nodes %s: %w", selector, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }))
	inf := factory.Core().V1().Nodes().Informer()
	factory.Start(ctx.Done())
	// Shutdown waits for the informer goroutines, which end only once ctx is cancelled.
	defer func() { cancel(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("waiting for nodes %s: informer did not sync: %w", selector, ctx.Err())
	}
	ready := 0
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ready = 0
		for _, obj := range inf.GetStore().List() {
			if n, ok := obj.(*corev1.Node); ok && NodeSchedulable(n) {
				ready++
			}
		}
		return ready >= count, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d nodes %q to be Ready: %d are after %s: %w", count, selector, ready, timeout, err)
	}
	return nil
}
