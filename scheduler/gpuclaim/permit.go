package gpuclaim

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Permit holds a gang member whose GPUs are reserved until every member of its gang is
// placed, for at most gangWaitSeconds; the last member to arrive lets the others go. Pods
// outside a gang pass at once. A waiting pod holds only its in-memory reservation: leases are
// taken in PreBind, after the whole gang is placed.
func (p *Plugin) Permit(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) (*fwk.Status, time.Duration) {
	if _, ok := claimName(pod); !ok {
		return nil, 0
	}
	s, err := getState(cs)
	if err != nil {
		return fwk.AsStatus(err), 0
	}
	if s.gang == "" {
		return nil, 0
	}
	g, err := p.gangOf(s.claim)
	if err != nil {
		return fwk.AsStatus(err), 0
	}
	placed := p.gangPlaced(g)
	if placed >= g.size {
		klog.FromContext(ctx).V(2).Info("Gang placed", "gang", g.key, "pods", placed, "lastPod", klog.KObj(pod), "node", nodeName)
		p.allowGang(ctx, g.key)
		return nil, 0
	}
	msg := fmt.Sprintf("GPUs %s on node %s reserved; waiting for the rest of gang %s (%d of %d pods placed)", apiv1.FormatIDs(s.ids), nodeName, g.key, placed, g.size)
	p.status.pending(s.claim, pod, msg)
	s.waitStart = p.clock.Now()
	// One member fewer to place changes what the gang needs: mates that PreFilter turned away
	// for want of room for all of them may fit now. Nothing else would wake them before this
	// member's wait runs out (a freed or new node wakes only pods that fit it, and this
	// member may just have filled it).
	if mates := p.waiting.selectPods(func(w waitingPod) bool { return w.gang == g.key && w.pod.UID != pod.UID }); len(mates) > 0 && p.handle != nil {
		p.handle.Activate(klog.FromContext(ctx), mates)
	}
	return fwk.NewStatus(fwk.Wait, msg), time.Duration(*p.args.GangWaitSeconds) * time.Second
}
