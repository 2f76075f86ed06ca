package gpuclaim

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Filter reasons are short and shared across nodes, so the scheduler's summary of a pending
// pod reads "3 node(s) had not enough healthy free GPUs" instead of one line per node.
const (
	reasonSelector  = "node does not match the GpuClaim's selector"
	reasonNoStatus  = "node has no GpuNodeStatus"
	reasonStale     = "node's agent is silent: its GpuNodeStatus and liveness lease are stale"
	reasonNoFit     = "not enough healthy free GPUs for the GpuClaim"
	reasonNotPinned = "node is not the one the pod's gpu-scheduling-map entry names"
	reasonNodeName  = "node name is longer than 63 characters: its GPU leases cannot be labelled with it"
	reasonCapped    = "GPU candidates were capped (maxCandidateNodes); the pod is retried with every node before anything is preempted"
)

// Filter keeps nodes that match the claim's selector, have a fresh GpuNodeStatus, and can
// serve the claim under its exclusivity and topology; it remembers the placement for Score.
func (p *Plugin) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	s, err := getState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := ni.Node()
	if node == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node not found")
	}
	if s.gangHeld != "" {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, s.gangHeld)
	}
	if s.pinNode != "" && node.Name != s.pinNode {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonNotPinned)
	}
	if !selectorMatches(s.claim, node) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonSelector)
	}
	if len(node.Name) > validation.LabelValueMaxLength && apiv1.CheckNodeName(node.Name) != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonNodeName)
	}
	if removed := s.removed[node.Name]; len(removed) > 0 {
		if s.capped {
			// A preemption dry run after an offer PreFilter capped: nodes it left out may have
			// room without evicting anyone. PostFilter (after DefaultPreemption) lifts the cap
			// for the next attempt; that attempt may preempt.
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonCapped)
		}
		// A preemption dry run: the node as if the removed pods held no GPUs; not cached.
		return p.filterWithout(s, pod, node.Name, removed)
	}
	res, st, _ := judgeNode(p.ledger, node.Name, pod.UID, s.reqKey, s.req, p.clock.Now().Add(-p.freshness))
	if st != nil {
		return st
	}
	s.setResult(node.Name, res)
	return nil
}

// judgeNode is Filter's verdict on one node that matches the claim's selector: the placement,
// or the status refusing the node and, for a node the allocator turned down, its *Unfit
// explanation. kubectl gpu explain runs it too (DryRun), so both give the same reasons.
func judgeNode(l *ledger, node string, self types.UID, reqKey string, req allocator.Request, oldest time.Time) (allocator.Result, *fwk.Status, *allocator.Unfit) {
	res, heartbeat, err, ok := l.place(node, self, reqKey, req)
	if !ok {
		return res, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonNoStatus), nil
	}
	if heartbeat.Before(oldest) {
		return res, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonStale), nil
	}
	var unfit *allocator.Unfit
	if errors.As(err, &unfit) {
		return res, fwk.NewStatus(fwk.Unschedulable, reasonNoFit), unfit
	}
	if err != nil {
		return res, fwk.AsStatus(err), nil
	}
	return res, nil, nil
}

// filterWithout is Filter for a node some of whose pods a preemption dry run took off.
func (p *Plugin) filterWithout(s *stateData, pod *v1.Pod, node string, removed []types.UID) *fwk.Status {
	n, heartbeat := p.ledger.snapshotWithout(node, append([]types.UID{pod.UID}, removed...))
	if n == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonNoStatus)
	}
	if heartbeat.Before(p.clock.Now().Add(-p.freshness)) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonStale)
	}
	_, err := allocator.Allocate(n, s.req)
	var unfit *allocator.Unfit
	if errors.As(err, &unfit) {
		return fwk.NewStatus(fwk.Unschedulable, reasonNoFit)
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}
