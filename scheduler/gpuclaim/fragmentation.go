package gpuclaim

import (
	"sync"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// The fragmentation strategy weighs a node's stranded capacity by the demand "seen so far":
// the shapes of the claims this scheduler placed lately. The histogram is kept here, in memory,
// rather than read from the API: it is a statistic, a restarted scheduler starts again from the
// typical shapes and learns the real ones within demandMinSeen placements.
const (
	// demandDecay ages every shape's weight at each placement, so that a shape last seen a few
	// thousand placements ago (weight e^-2 after 2,000) counts little against today's.
	demandDecay = 0.999
	// demandMaxShapes bounds the shapes kept; the lightest goes when a new one comes. Real
	// workloads have tens of shapes (the openb trace: 30-odd GPU fractions and counts).
	demandMaxShapes = 64
	// demandMinSeen is how many placements it takes before the learnt shapes replace
	// allocator.TypicalDemand: fewer would let the first handful of claims decide for all.
	demandMinSeen = 50
)

// demandHistogram is the decaying, bounded histogram of request shapes. The zero value is ready.
type demandHistogram struct {
	mu   sync.Mutex
	w    map[allocator.Shape]float64
	seen int
}

// observe counts one placed claim of shape s.
func (h *demandHistogram) observe(s allocator.Shape) {
	if s.GPUs < 1 || s.Milli < 1 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w == nil {
		h.w = make(map[allocator.Shape]float64, demandMaxShapes)
	}
	for k := range h.w {
		h.w[k] *= demandDecay
	}
	h.w[s]++
	h.seen++
	if len(h.w) > demandMaxShapes {
		var light allocator.Shape
		first := true
		for k, v := range h.w {
			if k != s && (first || v < h.w[light]) {
				light, first = k, false
			}
		}
		delete(h.w, light)
	}
}

// demand is the workload to weigh fragmentation by: the learnt shapes once demandMinSeen
// claims were placed, the typical ones before.
func (h *demandHistogram) demand() []allocator.WeightedShape {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen < demandMinSeen {
		return allocator.TypicalDemand()
	}
	out := make([]allocator.WeightedShape, 0, len(h.w))
	for k, v := range h.w {
		out = append(out, allocator.WeightedShape{Shape: k, Weight: v})
	}
	return out
}

// claimShape is the shape of a claim's request: its GPU count, each a whole GPU unless it is a
// Shared claim stating a compute share (computePercent 30 is 300 milli-GPU of each GPU). A
// share by memory alone counts as a whole GPU: its compute is not capped.
func claimShape(claim *apiv1.GpuClaim, req *allocator.Request) allocator.Shape {
	s := allocator.Shape{Milli: allocator.FullMilli, GPUs: req.Count}
	if claim != nil && req.Exclusivity == allocator.Shared {
		if sh := claim.Spec.Devices.Share; sh != nil && sh.ComputePercent > 0 && sh.ComputePercent < 100 {
			s.Milli = int(sh.ComputePercent) * allocator.FullMilli / 100
		}
	}
	return s
}

// fragmentationScores scores the candidate nodes by how little the pod's placement on each
// (Filter's result) would fragment it for the demand seen so far.
func (p *Plugin) fragmentationScores(s *stateData, nodes []string) map[string]int {
	demand := p.demand.demand()
	shape := claimShape(s.claim, &s.req)
	deltas := make(map[string]float64, len(nodes))
	for _, name := range nodes {
		res, ok := s.result(name)
		if !ok {
			continue
		}
		n, _ := p.ledger.NodeView(name)
		if n == nil {
			continue
		}
		ids, free := allocator.FreeMilli(n)
		deltas[name] = allocator.FragmentationDelta(ids, free, res.IDs, shape.Milli, demand)
	}
	return allocator.FragmentationScores(deltas)
}
