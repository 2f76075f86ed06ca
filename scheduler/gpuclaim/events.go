package gpuclaim

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// EventsToRegister lists the built-in events that can make a pod this plugin rejected
// schedulable, each with a hint that filters out the events that cannot.
//
// GpuNodeStatus and GpuClaim changes are deliberately not registered: the plugin's own
// informers already see them and send back exactly the pods they can help (activate.go).
// Registering them would make the scheduler run a second, dynamic informer for each, decoding
// every agent report and claim update into unstructured objects and caching a second copy —
// at 5,000 nodes that is tens of thousands of decodes per minute and a few hundred MiB, for
// events the plugin already acts on. docs/scheduler.md (Requeueing) lists every event the
// plugin reacts to and which of the two paths brings its pods back. Hints only read.
func (p *Plugin) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		// A pod that held GPUs went away (deleted, or finished: the scheduler's informer drops
		// finished pods, which arrives as a delete).
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: p.isSchedulableAfterPodDeleted},
		// A node appeared or gained the labels the claim selects on.
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: p.isSchedulableAfterNodeChange},
	}, nil
}

func (p *Plugin) isSchedulableAfterPodDeleted(logger klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	deleted, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, fmt.Errorf("unexpected object %T for a pod delete event", oldObj)
	}
	if raw, held := deleted.Annotations[apiv1.AnnotationAllocated]; held {
		if p.holdsAfterFinish(deleted) || p.finishing.held(deleted.UID) {
			// Its GPUs stay held until the kubelet lets go of them (finishing.go); their
			// release then activates the pods waiting for them (activate.go).
			return fwk.QueueSkip, nil
		}
		// At churn a pod finishes every few milliseconds: requeue only the pods whose claim
		// fits the node once this pod's GPUs are free, not the whole backlog each time. The
		// hint only reads: the plugin's pod handler frees the GPUs in the ledger (podGone), on
		// its own goroutine of the same informer. Should the retry run before it and find them
		// still held, podGone's gpusChanged has the activator send the pod back within
		// activateEvery (a pod being scheduled is activated once its attempt ends).
		if a, err := apiv1.ParseAllocation(raw); err == nil && !p.fitsWithout(pod, a.Node, deleted.UID) {
			return fwk.QueueSkip, nil
		}
		logger.V(5).Info("A pod holding GPUs went away", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted))
		return fwk.Queue, nil
	}
	if _, named := claimName(deleted); named && deleted.Spec.NodeName != "" {
		return fwk.Queue, nil
	}
	// A pending pod naming the same claim went away: the claim may be free now.
	if a, ok := claimName(deleted); ok && deleted.Namespace == pod.Namespace {
		if b, ok := claimName(pod); ok && a == b {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

func (p *Plugin) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	node, ok := newObj.(*v1.Node)
	if !ok {
		return fwk.Queue, fmt.Errorf("unexpected object %T for a node event", newObj)
	}
	name, ok := claimName(pod)
	if !ok {
		return fwk.QueueSkip, nil
	}
	claim, err := p.claimLister.GpuClaims(pod.Namespace).Get(name)
	if err != nil {
		return fwk.Queue, nil // let PreFilter say what is wrong
	}
	if !ledger.SelectorMatches(claim, node) {
		return fwk.QueueSkip, nil
	}
	if old, ok := oldObj.(*v1.Node); ok && ledger.SelectorMatches(claim, old) {
		return fwk.QueueSkip, nil // matched before: labels that matter did not change
	}
	logger.V(5).Info("A node now matches the claim's selector", "pod", klog.KObj(pod), "node", klog.KObj(node))
	return fwk.Queue, nil
}

// fitsWithout tells whether the pod's claim fits node in the ledger with the GPUs of pod gone
// counted free (its release may not have reached the ledger yet). A claim that cannot be read,
// or a node the ledger does not know, says yes.
func (p *Plugin) fitsWithout(pod *v1.Pod, node string, gone types.UID) bool {
	claim, req, named, err := p.podRequest(pod)
	if !named || err != nil {
		return named // a claim that cannot be read or served: let PreFilter say why
	}
	if !p.nodeSelected(claim, node) {
		return false
	}
	if pn, _ := ledger.PinOf(pod); pn != nil && pn.Alloc.Node != node {
		return false // GPUs freed elsewhere do not help a pod pinned by its scheduling map
	}
	n, heartbeat := p.ledger.NodeViewWithout(node, []types.UID{gone, pod.UID})
	if n == nil {
		return true
	}
	if heartbeat.Before(p.clock.Now().Add(-p.freshness)) {
		return false
	}
	_, err = allocator.Allocate(n, req)
	return err == nil
}

// mayHelp reports whether a GpuNodeStatus change can make a waiting pod schedulable: more
// free, healthy or total GPUs, a GPU turned healthy, islands or bandwidths changed. A heartbeat
// alone cannot; a stale node made fresh again can, whether by its status or by its agent's
// liveness lease, and that is the ledger's to say (becameFresh): a status's own heartbeat may be
// 30 minutes old on a node whose lease says it lives.
func (p *Plugin) mayHelp(oldS, newS *apiv1.GpuNodeStatus) bool {
	if newS.Status.Free > oldS.Status.Free || newS.Status.Healthy > oldS.Status.Healthy || newS.Status.Total > oldS.Status.Total {
		return true
	}
	return gainedHealthy(oldS, newS) || islandsOf(newS) != islandsOf(oldS)
}

// gainedHealthy reports whether a GPU is Healthy in next that was not in prev.
func gainedHealthy(prev, next *apiv1.GpuNodeStatus) bool {
	was := map[int32]bool{}
	for _, d := range prev.Status.Devices {
		if d.Health == apiv1.Healthy {
			was[d.ID] = true
		}
	}
	for _, d := range next.Status.Devices {
		if d.Health == apiv1.Healthy && !was[d.ID] {
			return true
		}
	}
	return false
}

func islandsOf(s *apiv1.GpuNodeStatus) string {
	out := ""
	for _, d := range s.Status.Devices {
		out += fmt.Sprint(d.ID, "=", d.Island, "@", d.BandwidthGBps, ",")
	}
	return out
}
