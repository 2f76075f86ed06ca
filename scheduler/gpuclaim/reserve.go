package gpuclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// Reserve records the chosen GPUs in the in-memory ledger, atomically with a last check
// against it; no API call happens here, so the scheduling cycle never waits on the API server.
func (p *Plugin) Reserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if _, ok := claimName(pod); !ok {
		return nil
	}
	s, err := getState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	res, err := p.reserve(pod.UID, s, nodeName) // fragmentation.go
	var unfit *allocator.Unfit
	if errors.As(err, &unfit) {
		// The ledger changed between Filter and Reserve: retry after backoff, not after an event.
		return fwk.AsStatus(fmt.Errorf("GPUs on node %s were taken meanwhile: %s", nodeName, unfit.Reason))
	}
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reserving GPUs on node %s for pod %s/%s: %w", nodeName, pod.Namespace, pod.Name, err))
	}
	s.node, s.ids, s.islands, s.shares, s.mig = nodeName, res.IDs, res.Islands, res.Shares, res.MIG
	if s.strategy == allocator.RoundRobin {
		p.roundRobin.set(nodeName)
	}
	klog.FromContext(ctx).V(4).Info("Reserved GPUs", "pod", klog.KObj(pod), "claim", s.key, "node", nodeName, "gpus", res.IDs, "migDevices", res.MIG, "score", res.Score, "note", res.Note)
	return nil
}

// Unreserve reverts Reserve and releases the leases this attempt took. It is idempotent and
// never fails; leases it cannot release are collected later as orphans.
func (p *Plugin) Unreserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) {
	if _, ok := claimName(pod); !ok {
		return
	}
	s, err := getState(cs)
	if err != nil {
		return
	}
	logger := klog.FromContext(ctx)
	for _, name := range s.leases {
		if err := p.releaseLease(ctx, name, pod.UID); err != nil {
			logger.Error(err, "Releasing GPU lease after a failed attempt; it will be collected as an orphan", "pod", klog.KObj(pod), "lease", name)
		}
	}
	s.leases = nil
	p.admit.forget(pod.UID)
	if s.claimTaken {
		if err := p.giveBackClaim(ctx, s.claim, pod); err != nil {
			logger.Error(err, "Giving back the claim after a failed attempt; the pod's next attempt or its release resets it", "pod", klog.KObj(pod), "claim", s.key)
		}
		s.claimTaken = false
	}
	if !s.waitStart.IsZero() {
		metrics.GangWait.WithLabelValues("rejected").Observe(p.clock.Since(s.waitStart).Seconds())
		s.waitStart = time.Time{}
	}
	p.ledger.Unreserve(pod.UID, s.key)
	s.node, s.ids, s.mig = "", nil, nil
	if s.gang != "" {
		// One member failed or timed out: the others must not keep GPUs waiting for it.
		p.rejectGang(ctx, s.gang, fmt.Sprintf("gang %s: member pod %s/%s was not placed; the gang is retried as a whole", s.gang, pod.Namespace, pod.Name))
	}
}
