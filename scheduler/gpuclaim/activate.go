package gpuclaim

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// activateEvery bounds how often freed GPUs send every waiting pod back to the active queue:
// at churn a completion every few milliseconds would otherwise reschedule the whole backlog
// each time.
const activateEvery = 500 * time.Millisecond

// activateClaim sends the waiting pods that name a claim back to the active queue.
func (p *Plugin) activateClaim(ctx context.Context, key string) {
	pods := p.waiting.selectPods(func(w waitingPod) bool { return w.claim == key })
	if len(pods) > 0 && p.handle != nil {
		p.handle.Activate(klog.FromContext(ctx), pods)
	}
}

// gpusChanged notes that GPUs may have become available (freed, recovered, a node fresh
// again); runActivator turns that into one activation of every waiting pod per period.
func (p *Plugin) gpusChanged() { p.gpusDirty.Store(true) }

func (p *Plugin) runActivator(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if !p.gpusDirty.Swap(false) {
			return
		}
		pods := p.waiting.selectPods(func(waitingPod) bool { return true })
		if len(pods) > 0 && p.handle != nil {
			klog.FromContext(ctx).V(4).Info("GPUs changed; reactivating waiting pods", "pods", len(pods))
			p.handle.Activate(klog.FromContext(ctx), pods)
		}
	}, activateEvery)
}
