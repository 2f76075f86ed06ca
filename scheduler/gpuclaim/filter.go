package gpuclaim

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
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
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ledger.ReasonNotPinned)
	}
	if !ledger.SelectorMatches(s.claim, node) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ledger.ReasonSelector)
	}
	if !s.domain.holds(node.Labels) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonOutsideDomain)
	}
	if g := p.holds.holder(node.Name, s.gang); g != "" {
		return fwk.NewStatus(fwk.Unschedulable, reasonHeldForGang)
	}
	if len(node.Name) > validation.LabelValueMaxLength && apiv1.CheckNodeName(node.Name) != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ledger.ReasonNodeName)
	}
	if removed := s.removed[node.Name]; len(removed) > 0 {
		if s.capped {
			// A preemption dry run after an offer PreFilter capped: nodes it left out may have
			// room without evicting anyone. PostFilter (after DefaultPreemption) lifts the cap
			// for the next attempt; that attempt may preempt.
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ledger.ReasonCapped)
		}
		// A preemption dry run: the node as if the removed pods held no GPUs; not cached.
		return p.filterWithout(s, pod, node.Name, removed)
	}
	res, why := ledger.Judge(p.ledger, node.Name, pod.UID, s.reqKey, s.req, p.clock.Now().Add(-p.freshness))
	if why != nil {
		return verdictStatus(why)
	}
	s.setResult(node.Name, res)
	return nil
}

// filterWithout is Filter for a node some of whose pods a preemption dry run took off.
func (p *Plugin) filterWithout(s *stateData, pod *v1.Pod, node string, removed []types.UID) *fwk.Status {
	n, heartbeat := p.ledger.NodeViewWithout(node, append([]types.UID{pod.UID}, removed...))
	if n == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ledger.ReasonNoStatus)
	}
	if heartbeat.Before(p.clock.Now().Add(-p.freshness)) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ledger.ReasonStale)
	}
	_, err := allocator.Allocate(n, s.req)
	var unfit *allocator.Unfit
	if errors.As(err, &unfit) {
		return fwk.NewStatus(fwk.Unschedulable, ledger.ReasonNoFit)
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}

// verdictStatus is the framework's status for a node the ledger refuses: Unschedulable where
// preempting pods could free room on it, UnschedulableAndUnresolvable where it could not.
func verdictStatus(v *ledger.Verdict) *fwk.Status {
	switch {
	case v.Err != nil:
		return fwk.AsStatus(v.Err)
	case v.Resolvable:
		return fwk.NewStatus(fwk.Unschedulable, v.Reason)
	default:
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, v.Reason)
	}
}
