package gpuclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// PreBindPreFlight tells the framework whether PreBind has work for this pod.
func (p *Plugin) PreBindPreFlight(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if _, ok := claimName(pod); !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: true}, nil
}

// PreBind makes the reservation real, off the scheduling cycle: one Lease per GPU. Losing a
// lease race fails the attempt; the framework then calls Unreserve, and the pod is retried on
// other GPUs. With the leases held, the claim is taken for the pod: its status names the pod
// (Bound, or Reserved with recordReservedPhase), unless another scheduler process took it for
// another pod first (claimlock.go).
func (p *Plugin) PreBind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if _, ok := claimName(pod); !ok {
		return nil
	}
	s, err := getState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s.node != nodeName || len(s.ids) == 0 {
		return fwk.AsStatus(fmt.Errorf("pod %s/%s: no GPUs reserved on node %s", pod.Namespace, pod.Name, nodeName))
	}
	// With the device plugin, a pod of the same GPU count as one the kubelet has not yet
	// admitted waits for it (admitgate.go), its GPUs held in the ledger meanwhile.
	if p.admit != nil {
		began := p.clock.Now()
		if err := p.admit.acquire(ctx, pod, nodeName); err != nil {
			metrics.Placement(metrics.ResultError, metrics.ReasonAdmitWait)
			return fwk.AsStatus(err)
		}
		metrics.AdmitWait.Observe(p.clock.Since(began).Seconds())
	}
	// A pod placed with its template's claim has the claim made here (template.go), beside
	// the leases rather than before them: the binding then waits for one round-trip fewer.
	// The claim is checked before the leases count: if it cannot be made, the attempt fails,
	// Unreserve releases the leases just taken, and the pod is retried with backoff.
	var claimMade chan madeClaim
	if s.makeClaim {
		claimMade = make(chan madeClaim, 1)
		want := s.claim
		go func() {
			c, err := p.makeClaim(ctx, pod, want)
			claimMade <- madeClaim{c, err}
		}()
	}
	start := p.clock.Now()
	if !s.waitStart.IsZero() {
		metrics.GangWait.WithLabelValues("allowed").Observe(start.Sub(s.waitStart).Seconds())
		s.waitStart = time.Time{}
	}
	shared := s.claim.Spec.Devices.Exclusivity == apiv1.Shared
	taken, err := p.acquire(ctx, pod, nodeName, s.ids, shared)
	s.leases = taken
	if claimMade != nil {
		made := <-claimMade
		if made.err != nil {
			metrics.Placement(metrics.ResultError, metrics.ReasonAPI)
			return fwk.AsStatus(made.err)
		}
		s.claim, s.makeClaim = made.claim, false
	}
	if errors.Is(err, errLeaseConflict) {
		// An error, not Unschedulable: the pod goes to the backoff queue and is retried in a
		// second or so, whereas an Unschedulable pod would wait for a cluster event.
		metrics.LeaseConflicts.Inc()
		metrics.Placement(metrics.ResultError, metrics.ReasonLeaseConflict)
		klog.FromContext(ctx).V(2).Info("Lost a GPU lease race; will retry", "pod", klog.KObj(pod), "node", nodeName, "err", err)
		return fwk.AsStatus(fmt.Errorf("GpuClaim %s: %w", s.key, err))
	}
	if err != nil {
		metrics.Placement(metrics.ResultError, metrics.ReasonAPI)
		return fwk.AsStatus(fmt.Errorf("locking GPUs %v on node %s for pod %s/%s: %w", s.ids, nodeName, pod.Namespace, pod.Name, err))
	}
	// The leases are ours: record them in the ledger now rather than waiting for the informer.
	p.ledger.add(pod.UID, nodeName, s.ids, shared, fromLease)
	metrics.AllocationLatency.Observe(p.clock.Since(start).Seconds())

	// The claim is taken last, once the GPUs are: a lost GPU race, the common loss, then costs
	// no claim write (claimlock.go). The status written is Bound, which the Binding follows at
	// once; with recordReservedPhase it is Reserved, and PostBind writes Bound.
	alloc := apiv1.Allocation{Node: nodeName, IDs: s.ids}
	phase, msg := apiv1.ClaimBound, boundMessage(alloc, pod)
	if *p.args.RecordReservedPhase {
		phase, msg = apiv1.ClaimReserved, fmt.Sprintf("GPUs %s on node %s locked for pod %s", apiv1.FormatIDs(s.ids), nodeName, pod.Name)
	}
	err = p.takeClaim(ctx, s.claim, pod, phase, alloc, msg)
	if errors.Is(err, errClaimTaken) {
		metrics.Placement(metrics.ResultError, metrics.ReasonClaimInUse)
		klog.FromContext(ctx).V(2).Info("Lost the claim to a pod another scheduler bound", "pod", klog.KObj(pod), "claim", s.key, "err", err)
		if rec := p.handle.EventRecorder(); rec != nil {
			rec.Eventf(pod, s.claim, v1.EventTypeWarning, "GpuClaimInUse", "Binding", err.Error())
		}
		return fwk.AsStatus(err)
	}
	if err != nil {
		metrics.Placement(metrics.ResultError, metrics.ReasonAPI)
		return fwk.AsStatus(fmt.Errorf("taking GpuClaim %s for pod %s/%s: %w", s.key, pod.Namespace, pod.Name, err))
	}
	s.claimTaken = true
	return nil
}

// madeClaim is the outcome of makeClaim.
type madeClaim struct {
	claim *apiv1.GpuClaim
	err   error
}

// setAllocation writes an allocation into a claim status.
func setAllocation(st *apiv1.GpuClaimStatus, phase apiv1.ClaimPhase, pod *v1.Pod, a apiv1.Allocation, msg string) {
	st.Phase = phase
	st.NodeName = a.Node
	st.GpuIDs = make([]int32, len(a.IDs))
	for i, id := range a.IDs {
		st.GpuIDs[i] = int32(id)
	}
	st.Allocated = a.String()
	st.PodName = pod.Name
	st.PodUID = string(pod.UID)
	st.Message = msg
}

// boundMessage is the message of a claim Bound to pod with alloc.
func boundMessage(alloc apiv1.Allocation, pod *v1.Pod) string {
	return fmt.Sprintf("GPUs %s on node %s allocated to pod %s", apiv1.FormatIDs(alloc.IDs), alloc.Node, pod.Name)
}
