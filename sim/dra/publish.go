package dra

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Client kubernetes.Interface
	// WriteQPS and WriteBurst cap the slice writes of all nodes together. Defaults 100 and 200.
	WriteQPS   float32
	WriteBurst int
	// Workers write slices concurrently. Default 8.
	Workers int
}

// Publisher keeps one ResourceSlice per node in step with what the node's agent discovered.
// Agents hand it their devices on every loop (Hook); a slice is written only when the devices'
// facts or health changed, never for usage, from a few workers behind one rate limiter, so
// 5,000 nodes cost 5,000 creates and then a write per health change.
type Publisher struct {
	cfg     PublisherConfig
	limiter flowcontrol.RateLimiter
	queue   workqueue.TypedRateLimitingInterface[string]

	mu    sync.Mutex
	nodes map[string]*nodeState

	published atomic.Int64
}

type nodeState struct {
	node    *corev1.Node
	want    []apiv1.Device
	written []apiv1.Device // nil until a slice was written
	gen     int64
	exists  bool   // the slice is known to exist (written or read)
	rv      string // resourceVersion of the slice last written
}

// NewPublisher makes a publisher; Run starts its workers.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("DRA publisher: Client is required")
	}
	if cfg.WriteQPS <= 0 {
		cfg.WriteQPS = 100
	}
	if cfg.WriteBurst <= 0 {
		cfg.WriteBurst = 200
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	return &Publisher{
		cfg:     cfg,
		limiter: flowcontrol.NewTokenBucketRateLimiter(cfg.WriteQPS, cfg.WriteBurst),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "dra-slices"}),
		nodes: map[string]*nodeState{},
	}, nil
}

// EnsureDeviceClass creates the DeviceClass unless it exists.
func EnsureDeviceClass(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.ResourceV1().DeviceClasses().Create(ctx, DeviceClass(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating DeviceClass %s: %w", DeviceClassName, err)
	}
	return nil
}

// Hook returns the node's agent OnDevices function (agent.Config.OnDevices). It never blocks.
func (p *Publisher) Hook(node *corev1.Node) func([]apiv1.Device) {
	node = node.DeepCopy()
	return func(devices []apiv1.Device) {
		if len(devices) == 0 {
			return // nothing discovered yet: an empty pool would only be rewritten at once
		}
		p.mu.Lock()
		st := p.nodes[node.Name]
		if st == nil || st.node.UID != node.UID {
			st = &nodeState{node: node}
			p.nodes[node.Name] = st
		}
		changed := !sameDevices(st.want, devices)
		if changed {
			st.want = copyDevices(devices)
		}
		p.mu.Unlock()
		if changed {
			p.queue.Add(node.Name)
		}
	}
}

func copyDevices(in []apiv1.Device) []apiv1.Device {
	out := make([]apiv1.Device, len(in))
	for i, d := range in {
		out[i] = d
		out[i].InUseBy, out[i].UtilizationPercent = nil, nil
	}
	return out
}

// Published is how many nodes have had a slice written.
func (p *Publisher) Published() int { return int(p.published.Load()) }

// Run writes slices until ctx is done.
func (p *Publisher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Go(func() {
			for p.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	p.queue.ShutDown()
	wg.Wait()
}

func (p *Publisher) next(ctx context.Context) bool {
	node, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(node)
	if err := p.sync(ctx, node); err != nil {
		if ctx.Err() != nil {
			return true
		}
		klog.FromContext(ctx).Error(err, "Publishing the node's ResourceSlice failed; will retry", "node", node)
		p.queue.AddRateLimited(node)
		return true
	}
	p.queue.Forget(node)
	return true
}

// sync writes the node's slice if what it should say differs from what was written.
func (p *Publisher) sync(ctx context.Context, name string) error {
	p.mu.Lock()
	st := p.nodes[name]
	if st == nil || (st.written != nil && sameDevices(st.written, st.want)) {
		p.mu.Unlock()
		return nil
	}
	want, gen, rv, exists, node := st.want, st.gen+1, st.rv, st.exists, st.node
	p.mu.Unlock()

	if err := p.limiter.Wait(ctx); err != nil {
		return err
	}
	slices := p.cfg.Client.ResourceV1().ResourceSlices()
	s := Slice(node, want, gen)
	var out *resourceapi.ResourceSlice
	var err error
	if !exists {
		out, err = slices.Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Written before (by an earlier publisher, or a create that timed out on the
			// client): take its version, and a generation above its own.
			cur, gerr := slices.Get(ctx, s.Name, metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("reading ResourceSlice %s: %w", s.Name, gerr)
			}
			exists, rv, s.Spec.Pool.Generation = true, cur.ResourceVersion, max(gen, cur.Spec.Pool.Generation+1)
		}
	}
	if exists {
		s.ResourceVersion = rv
		out, err = slices.Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			p.mu.Lock()
			st.exists = false // read it anew, or create it, on the retry
			p.mu.Unlock()
		}
	}
	if err != nil {
		return fmt.Errorf("writing ResourceSlice %s of node %s: %w", s.Name, name, err)
	}
	p.mu.Lock()
	if st.written == nil {
		p.published.Add(1)
	}
	st.written, st.gen, st.rv, st.exists = want, out.Spec.Pool.Generation, out.ResourceVersion, true
	p.mu.Unlock()
	return nil
}
