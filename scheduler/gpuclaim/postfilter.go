package gpuclaim

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// PostFilter runs when no node passed the filters. PreFilter offered only the best fit tier
// (nodes with a fitting free island), and at most maxCandidateNodes of them; if those nodes all
// failed for another reason (a taint, another plugin), this lifts the cap or else lowers the
// tier for the pod's next attempt and sends it straight back to the active queue, so Preferred topology never leaves a pod pending that could run
// elsewhere. Preemption is the stock DefaultPreemption's (it runs first), which works with GPU
// claims through this plugin's PreFilterExtensions (prefilter.go).
func (p *Plugin) PostFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	s, err := getState(cs)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	p.waiting.add(pod, s.key, s.gang)
	if !s.offered || s.gangHeld != "" {
		return nil, fwk.NewStatus(fwk.Unschedulable) // no node had room: nothing to widen (PreFilter counted it)
	}
	metrics.Placement(metrics.ResultUnschedulable, metrics.ReasonFiltered)
	if !p.relaxed.relax(pod.UID, s.tier, s.capped) {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	logger := klog.FromContext(ctx)
	logger.V(3).Info("No node of the best GPU fit tier passed the filters; widening", "pod", klog.KObj(pod), "claim", s.key, "tier", s.tier)
	p.handle.Activate(logger, map[string]*v1.Pod{pod.Namespace + "/" + pod.Name: pod})
	return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("no node with a fitting free island passed the other filters; GpuClaim %s will consider more nodes", s.key))
}
