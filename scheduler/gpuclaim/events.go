package gpuclaim

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Custom resources are registered as <plural>.<version>.<group>; any other spelling is only
// logged by the scheduler and silently never fires.
const (
	gpuNodeStatusResource fwk.EventResource = "gpunodestatuses.v1." + apiv1.GroupName
	gpuClaimResource      fwk.EventResource = "gpuclaims.v1." + apiv1.GroupName
)

// EventsToRegister lists the events that can make a pod this plugin rejected schedulable,
// each with a hint that filters out the events that cannot.
func (p *Plugin) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		// A pod that held GPUs went away (deleted, or finished: the scheduler's informer drops
		// finished pods, which arrives as a delete).
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: p.isSchedulableAfterPodDeleted},
		// A node appeared or gained the labels the claim selects on.
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: p.isSchedulableAfterNodeChange},
		// An agent reported GPUs: new, recovered, freed, or fresh again.
		{Event: fwk.ClusterEvent{Resource: gpuNodeStatusResource, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.isSchedulableAfterNodeStatusChange},
		// The pod's claim was created, changed, or released by its previous pod.
		{Event: fwk.ClusterEvent{Resource: gpuClaimResource, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.isSchedulableAfterClaimChange},
	}, nil
}

func (p *Plugin) isSchedulableAfterPodDeleted(logger klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	deleted, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, fmt.Errorf("unexpected object %T for a pod delete event", oldObj)
	}
	if raw, held := deleted.Annotations[apiv1.AnnotationAllocated]; held {
		// At churn a pod finishes every few milliseconds: requeue only the pods whose claim
		// fits the node once this pod's GPUs are free, not the whole backlog each time.
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
	if !selectorMatches(claim, node) {
		return fwk.QueueSkip, nil
	}
	if old, ok := oldObj.(*v1.Node); ok && selectorMatches(claim, old) {
		return fwk.QueueSkip, nil // matched before: labels that matter did not change
	}
	logger.V(5).Info("A node now matches the claim's selector", "pod", klog.KObj(pod), "node", klog.KObj(node))
	return fwk.Queue, nil
}

func (p *Plugin) isSchedulableAfterNodeStatusChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	newS, err := asNodeStatus(newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if oldObj != nil {
		oldS, err := asNodeStatus(oldObj)
		if err != nil {
			return fwk.Queue, err
		}
		if !p.mayHelp(oldS, newS) {
			return fwk.QueueSkip, nil
		}
	}
	// Something improved; requeue only if the pod's claim fits the node as reported now, so
	// that in a full cluster a freed GPU does not send every pending pod through an attempt.
	if !p.fitsReported(pod, newS) {
		logger.V(5).Info("GpuNodeStatus improved, but the claim does not fit it", "pod", klog.KObj(pod), "node", newS.Name)
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// fitsWithout tells whether the pod's claim fits node in the ledger with the GPUs of pod gone
// counted free (its release may not have reached the ledger yet). A claim that cannot be read,
// or a node the ledger does not know, says yes.
func (p *Plugin) fitsWithout(pod *v1.Pod, node string, gone types.UID) bool {
	name, ok := claimName(pod)
	if !ok {
		return false
	}
	claim, err := p.claimLister.GpuClaims(pod.Namespace).Get(name)
	if err != nil {
		return true
	}
	req, err := requestFor(claim)
	if err != nil {
		return true
	}
	if !p.nodeSelected(claim, node) {
		return false
	}
	n, heartbeat := p.ledger.snapshotWithout(node, []types.UID{gone, pod.UID})
	if n == nil {
		return true
	}
	if heartbeat.Before(p.clock.Now().Add(-p.freshness)) {
		return false
	}
	_, err = allocator.Allocate(n, req)
	return err == nil
}

// fitsReported tells whether the pod's claim fits a node as its GpuNodeStatus reports it:
// healthy GPUs whose inUseBy is empty are free (a Shared claim may also join GPUs in use). A
// claim that cannot be read says yes, so that PreFilter reports what is wrong. The agent's
// inUseBy lags the leases; a GPU freed meanwhile comes with a later status, and the plugin's
// own activator (which reads the leases) covers the gap.
func (p *Plugin) fitsReported(pod *v1.Pod, gns *apiv1.GpuNodeStatus) bool {
	name, ok := claimName(pod)
	if !ok {
		return false
	}
	claim, err := p.claimLister.GpuClaims(pod.Namespace).Get(name)
	if err != nil {
		return true
	}
	req, err := requestFor(claim)
	if err != nil {
		return true
	}
	node := nodeNameOf(gns)
	if gns.Status.LastHeartbeatTime.Time.Before(p.clock.Now().Add(-p.freshness)) || !p.nodeSelected(claim, node) {
		return false
	}
	n := nodeFromStatus(gns)
	inUse := map[int]int{}
	for _, d := range gns.Status.Devices {
		inUse[int(d.ID)] = len(d.InUseBy)
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if inUse[g.ID] == 0 {
			continue
		}
		if req.Exclusivity == allocator.Shared {
			g.SharedHolders = inUse[g.ID]
		} else {
			g.ExclusiveHolder = "in-use"
		}
	}
	_, err = allocator.Allocate(n, req)
	return err == nil
}

// mayHelp reports whether a GpuNodeStatus change can make a waiting pod schedulable: more
// free, healthy or total GPUs, a GPU turned healthy, islands or bandwidths changed, or a stale
// node fresh again. A heartbeat alone cannot.
func (p *Plugin) mayHelp(oldS, newS *apiv1.GpuNodeStatus) bool {
	if newS.Status.Free > oldS.Status.Free || newS.Status.Healthy > oldS.Status.Healthy || newS.Status.Total > oldS.Status.Total {
		return true
	}
	if gainedHealthy(oldS, newS) || islandsOf(newS) != islandsOf(oldS) {
		return true
	}
	return newS.Status.LastHeartbeatTime.After(oldS.Status.LastHeartbeatTime.Time) &&
		oldS.Status.LastHeartbeatTime.Time.Before(p.clock.Now().Add(-p.freshness))
}

func (p *Plugin) isSchedulableAfterClaimChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	newC, err := asClaim(newObj)
	if err != nil {
		return fwk.Queue, err
	}
	name, ok := claimName(pod)
	if !ok || newC.Namespace != pod.Namespace || newC.Name != name {
		return fwk.QueueSkip, nil
	}
	if oldObj == nil {
		return fwk.Queue, nil
	}
	oldC, err := asClaim(oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	if newC.Generation != oldC.Generation || newC.Status.PodUID != oldC.Status.PodUID {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// asNodeStatus accepts the typed object or the unstructured one the scheduler's dynamic
// informer delivers for custom resources.
func asNodeStatus(obj any) (*apiv1.GpuNodeStatus, error) {
	switch o := obj.(type) {
	case *apiv1.GpuNodeStatus:
		return o, nil
	case *unstructured.Unstructured:
		out := &apiv1.GpuNodeStatus{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.UnstructuredContent(), out); err != nil {
			return nil, fmt.Errorf("converting %s to GpuNodeStatus: %w", o.GetName(), err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected object %T for a GpuNodeStatus event", obj)
}

func asClaim(obj any) (*apiv1.GpuClaim, error) {
	switch o := obj.(type) {
	case *apiv1.GpuClaim:
		return o, nil
	case *unstructured.Unstructured:
		out := &apiv1.GpuClaim{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.UnstructuredContent(), out); err != nil {
			return nil, fmt.Errorf("converting %s/%s to GpuClaim: %w", o.GetNamespace(), o.GetName(), err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected object %T for a GpuClaim event", obj)
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
