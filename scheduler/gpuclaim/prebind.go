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
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
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
// other GPUs. Beside the lease creates (after them while peers schedule beside this process),
// the claim is taken for the pod: its status names the pod (Bound, or Reserved with
// recordReservedPhase), unless another scheduler process took it for another pod first
// (claimlock.go). The Binding follows both.
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
	// The claim is taken (claimlock.go) with the status the Binding follows: Bound, or Reserved
	// with recordReservedPhase (PostBind then writes Bound).
	alloc := apiv1.Allocation{Node: nodeName, IDs: s.ids}
	mig := ledger.MIGDeviceRefs(s.mig)
	phase, msg := apiv1.ClaimBound, boundMessage(alloc, mig, pod)
	if *p.args.RecordReservedPhase {
		phase, msg = apiv1.ClaimReserved, fmt.Sprintf("%s on node %s locked for pod %s", placedWhat(alloc, mig), nodeName, pod.Name)
	}
	// A scheduler alone takes the claim beside the GPU leases rather than after them: the
	// Binding then waits for one round trip instead of two. The leases alone keep two pods off
	// one GPU, the claim's status alone keeps two pods off one claim, and the Binding follows
	// both, so no bound pod is seen without its leases or its claim's status; a lost lease race
	// (rare without peers: another process's lease the informer had not shown) costs the claim
	// write and its give-back in Unreserve. Beside peers, whose races are the common loss, the
	// claim is taken last, once the GPUs are, so that a lost GPU race costs no claim write.
	alone := p.peers == nil || p.peers.Current().Size() <= 1
	// A pod placed with its template's claim has the claim made here (template.go), beside
	// the leases rather than before them: the binding then waits for one round-trip fewer.
	// The claim is checked before the leases count: if it cannot be made, the attempt fails,
	// Unreserve releases the leases just taken, and the pod is retried with backoff.
	var claimDone chan claimOutcome
	if s.makeClaim || alone {
		claimDone = make(chan claimOutcome, 1)
		claim, makeIt := s.claim, s.makeClaim
		go func() {
			out := claimOutcome{claim: claim}
			if makeIt {
				if out.claim, out.makeErr = p.makeClaim(ctx, pod, claim); out.makeErr != nil {
					claimDone <- out
					return
				}
			}
			if alone {
				out.took = true
				out.takeErr = p.takeClaim(ctx, out.claim, pod, phase, alloc, mig, msg)
			}
			claimDone <- out
		}()
	}
	start := p.clock.Now()
	if !s.waitStart.IsZero() {
		metrics.GangWait.WithLabelValues("allowed").Observe(start.Sub(s.waitStart).Seconds())
		s.waitStart = time.Time{}
	}
	shared := s.claim.Spec.Devices.Exclusivity == apiv1.Shared
	var taken []string
	if len(s.mig) > 0 {
		taken, err = p.acquireMIG(ctx, pod, nodeName, s.mig)
	} else {
		taken, err = p.acquire(ctx, pod, nodeName, s.ids, shared, s.shares)
	}
	s.leases = taken
	leased := p.clock.Since(start)
	var claimErr error
	took := false
	if claimDone != nil {
		out := <-claimDone
		if out.makeErr != nil {
			metrics.Placement(metrics.ResultError, metrics.ReasonAPI)
			return fwk.AsStatus(out.makeErr)
		}
		s.claim, s.makeClaim = out.claim, false
		took, claimErr = out.took, out.takeErr
		// Recorded before any failure returns, so that Unreserve gives the claim back.
		s.claimTaken = took && claimErr == nil
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
	switch {
	case len(s.mig) > 0:
		p.ledger.AddMIG(pod.UID, nodeName, s.mig, ledger.FromLease)
	case shared:
		for i, id := range s.ids {
			p.ledger.AddShare(pod.UID, nodeName, []int{id}, shareAt(s.shares, i), ledger.FromLease)
		}
	default:
		p.ledger.Add(pod.UID, nodeName, s.ids, false, ledger.FromLease)
	}
	metrics.AllocationLatency.Observe(leased.Seconds())

	if !took {
		claimErr = p.takeClaim(ctx, s.claim, pod, phase, alloc, mig, msg)
	}
	if errors.Is(claimErr, errClaimTaken) {
		metrics.Placement(metrics.ResultError, metrics.ReasonClaimInUse)
		klog.FromContext(ctx).V(2).Info("Lost the claim to a pod another scheduler bound", "pod", klog.KObj(pod), "claim", s.key, "err", claimErr)
		if rec := p.handle.EventRecorder(); rec != nil {
			rec.Eventf(pod, s.claim, v1.EventTypeWarning, "GpuClaimInUse", "Binding", claimErr.Error())
		}
		return fwk.AsStatus(claimErr)
	}
	if claimErr != nil {
		metrics.Placement(metrics.ResultError, metrics.ReasonAPI)
		return fwk.AsStatus(fmt.Errorf("taking GpuClaim %s for pod %s/%s: %w", s.key, pod.Namespace, pod.Name, claimErr))
	}
	s.claimTaken = true
	return nil
}

// shareAt is shares[i], or none.
func shareAt(shares []allocator.Resolved, i int) allocator.Resolved {
	if i < len(shares) {
		return shares[i]
	}
	return allocator.Resolved{}
}

// claimOutcome is what PreBind's claim goroutine did: the claim it made (makeErr: could not),
// and whether it took it (took) with what result (takeErr).
type claimOutcome struct {
	claim   *apiv1.GpuClaim
	makeErr error
	took    bool
	takeErr error
}

// setAllocation writes an allocation into a claim status, with a MIG claim's devices mig.
func setAllocation(st *apiv1.GpuClaimStatus, phase apiv1.ClaimPhase, pod *v1.Pod, a apiv1.Allocation, mig []apiv1.MIGDeviceRef, msg string) {
	st.Phase = phase
	st.MigDevices = nil
	for _, m := range mig {
		st.MigDevices = append(st.MigDevices, m.String())
	}
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

// boundMessage is the message of a claim Bound to pod with alloc (and MIG devices mig).
func boundMessage(alloc apiv1.Allocation, mig []apiv1.MIGDeviceRef, pod *v1.Pod) string {
	return fmt.Sprintf("%s on node %s allocated to pod %s", placedWhat(alloc, mig), alloc.Node, pod.Name)
}

// placedWhat names what a claim got: "GPUs 0,1", or "MIG devices 2:4,2:5".
func placedWhat(alloc apiv1.Allocation, mig []apiv1.MIGDeviceRef) string {
	if len(mig) > 0 {
		return "MIG devices " + apiv1.FormatMIGDevices(mig)
	}
	return "GPUs " + apiv1.FormatIDs(alloc.IDs)
}

// podMIG is the MIG devices a pod carries (apiv1.AnnotationMIGDevices); nil when none.
func podMIG(pod *v1.Pod) []apiv1.MIGDeviceRef {
	refs, err := apiv1.ParseMIGDevices(pod.Annotations[apiv1.AnnotationMIGDevices])
	if err != nil {
		return nil
	}
	return refs
}
