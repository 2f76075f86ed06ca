package gpuclaim

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// PostBind counts the allocation, and records the claim as Bound when PreBind recorded it
// Reserved (recordReservedPhase).
func (p *Plugin) PostBind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) {
	if _, ok := claimName(pod); !ok {
		return
	}
	p.waiting.remove(pod.UID)
	p.relaxed.forget(pod.UID)
	s, err := getState(cs)
	if err != nil {
		return
	}
	metrics.Allocations.WithLabelValues(fmt.Sprint(len(s.ids))).Inc()
	metrics.Placement(metrics.ResultBound, metrics.ReasonAllocated)
	if !pod.CreationTimestamp.IsZero() {
		metrics.AllocationDuration.Observe(p.clock.Since(pod.CreationTimestamp.Time).Seconds())
	}
	if len(s.ids) > 1 {
		metrics.MultiGPUAllocations.Inc()
		if s.islands == 1 {
			metrics.IslandLocalAllocations.Inc()
		}
	}
	p.status.boundByMe(pod.UID)
	p.releaseStale(ctx, pod, s.leases)
	if !*p.args.RecordReservedPhase {
		return // PreBind wrote Bound when it took the claim (claimlock.go)
	}
	alloc := apiv1.Allocation{Node: nodeName, IDs: s.ids}
	mig := ledger.MIGDeviceRefs(s.mig)
	msg := boundMessage(alloc, mig, pod)
	if err := p.writeClaimStatus(ctx, s.claim, func(st *apiv1.GpuClaimStatus) {
		setAllocation(st, apiv1.ClaimBound, pod, alloc, mig, msg)
	}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording the claim as Bound; will repair", "claim", s.key, "pod", klog.KObj(pod))
		p.status.bound(s.claim, pod, alloc)
	}
}

// releaseStale frees leases that name the pod but are not the ones it was just bound with:
// leftovers of an attempt whose scheduler crashed between PreBind and Bind. Without this they
// would stay held until the pod goes away.
func (p *Plugin) releaseStale(ctx context.Context, pod *v1.Pod, keep []string) {
	leases, err := p.leasesOf(pod.UID)
	if err != nil {
		return
	}
	for _, l := range leases {
		if slices.Contains(keep, l.Name) {
			continue
		}
		if err := p.releaseLease(ctx, l.Name, pod.UID); err != nil {
			klog.FromContext(ctx).Error(err, "Releasing a stale GPU lease", "pod", klog.KObj(pod), "lease", l.Name)
			continue
		}
		if ref, ok := parseLease(l); ok {
			p.ledger.RemoveLeaseHold(pod.UID, ref.lease)
		}
		metrics.LeasesReleased.Inc()
	}
}
