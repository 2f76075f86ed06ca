package gpuclaim

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
)

// activateEvery bounds how often freed GPUs send waiting pods back to the active queue: at
// churn a completion every few milliseconds would otherwise reschedule the backlog each time.
const activateEvery = 500 * time.Millisecond

// activateClaim sends the waiting pods that name a claim back to the active queue.
func (p *Plugin) activateClaim(ctx context.Context, key string) {
	pods := p.waiting.selectPods(func(w waitingPod) bool { return w.claim == key })
	if len(pods) > 0 && p.handle != nil {
		p.handle.Activate(klog.FromContext(ctx), pods)
	}
}

// changedNodes collects the nodes whose GPUs may have become available since the activator
// last ran.
type changedNodes struct {
	mu    sync.Mutex
	nodes map[string]struct{}
}

func (c *changedNodes) add(node string) {
	c.mu.Lock()
	if c.nodes == nil {
		c.nodes = map[string]struct{}{}
	}
	c.nodes[node] = struct{}{}
	c.mu.Unlock()
}

func (c *changedNodes) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.nodes))
	for n := range c.nodes {
		out = append(out, n)
	}
	c.nodes = nil
	return out
}

// gpusChanged notes that GPUs on node may have become available (freed, recovered, the node
// fresh again); runActivator turns that into one activation per period of the waiting pods
// whose claim now fits one of the changed nodes.
func (p *Plugin) gpusChanged(node string) { p.changed.add(node) }

func (p *Plugin) runActivator(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) { p.activateChanged(ctx) }, activateEvery)
}

// activateChanged activates the waiting pods that a node changed since the last call may now
// serve. A pod whose claim fits none of them stays where it is: in a full cluster every freed
// GPU would otherwise send the whole backlog through a scheduling attempt.
func (p *Plugin) activateChanged(ctx context.Context) {
	nodes := p.changed.take()
	if len(nodes) == 0 {
		return
	}
	oldest := p.clock.Now().Add(-p.freshness)
	pods := p.waiting.selectPods(func(w waitingPod) bool { return p.mayFitOn(w.pod, nodes, oldest) })
	if len(pods) > 0 && p.handle != nil {
		klog.FromContext(ctx).V(4).Info("GPUs changed; reactivating waiting pods", "pods", len(pods), "nodes", len(nodes))
		p.handle.Activate(klog.FromContext(ctx), pods)
	}
}

// mayFitOn tells whether the pod's claim fits one of nodes now, judged from the ledger's
// summaries. A claim that cannot be read says yes: PreFilter then reports what is wrong.
func (p *Plugin) mayFitOn(pod *v1.Pod, nodes []string, oldest time.Time) bool {
	claim, req, named, err := p.podRequest(pod)
	if !named || err != nil {
		return named // a claim that cannot be read or served: let PreFilter say why
	}
	pn, _ := ledger.PinOf(pod) // podRequest parsed it already
	for _, n := range nodes {
		if pn != nil && n != pn.Alloc.Node {
			continue // a pinned pod waits on its own node only
		}
		if p.ledger.FitsOn(n, &req, oldest) && p.nodeSelected(claim, n) {
			return true
		}
	}
	return false
}
