package gpuclaim

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Score ranks a node by the quality of the claim's placement on it (island fit, bandwidth,
// policy fit, islands kept whole) and by the node strategy of the plugin's args. The
// allocator already scores 0..100, the framework's range, so no normalization is needed.
func (p *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := getState(cs)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	name := ni.Node().Name
	res, ok := s.result(name)
	if !ok {
		return 0, nil
	}
	n, _ := p.ledger.snapshot(name)
	if n == nil {
		return 0, nil
	}
	return int64(allocator.NodeScore(n, res, p.strategy)) * fwk.MaxNodeScore / 100, nil
}

// ScoreExtensions is nil: scores are already in range.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// PreScore skips scoring for pods that name no claim.
func (p *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, ok := claimName(pod); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	if _, err := getState(cs); err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}
