package gpuclaim

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// PostBind records the claim as Bound and counts the allocation.
func (p *Plugin) PostBind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) {
	if _, ok := claimName(pod); !ok {
		return
	}
	s, err := getState(cs)
	if err != nil {
		return
	}
	metrics.Allocations.WithLabelValues(fmt.Sprint(len(s.ids))).Inc()
	if len(s.ids) > 1 {
		metrics.MultiGPUAllocations.Inc()
		if s.islands == 1 {
			metrics.IslandLocalAllocations.Inc()
		}
	}
	alloc := apiv1.Allocation{Node: nodeName, IDs: s.ids}
	msg := fmt.Sprintf("GPUs %s on node %s allocated to pod %s", apiv1.FormatIDs(s.ids), nodeName, pod.Name)
	if err := p.writeClaimStatus(ctx, s.claim, func(st *apiv1.GpuClaimStatus) {
		setAllocation(st, apiv1.ClaimBound, pod, alloc, msg)
	}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording the claim as Bound", "claim", s.key, "pod", klog.KObj(pod))
	}
}
