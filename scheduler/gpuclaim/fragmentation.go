package gpuclaim

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// The fragmentation strategy weighs a node's stranded capacity by the demand "seen so far":
// the shapes of the GPU pods that arrived lately, each counted once when the scheduler first
// tries it. FGD takes the target workload's task mix as known; counting arrivals rather than
// placements learns that mix, and keeps the big tasks a full cluster turns away in it (counting
// placements would forget exactly the tasks the strategy must keep room for). The histogram is
// kept here, in memory, rather than read from the API: it is a statistic, a restarted
// scheduler starts again from the typical shapes and learns the real ones within demandMinSeen
// arrivals.
const (
	// demandDecay ages every shape's weight at each arrival, so that a shape last seen a few
	// thousand arrivals ago (weight e^-2 after 2,000) counts little against today's.
	demandDecay = 0.999
	// demandMaxShapes bounds the shapes kept; the lightest goes when a new one comes. Real
	// workloads have tens to a hundred shapes (the openb trace: 91 of GPU count, fraction and
	// CPU, the 64 most common covering 99 % of its pods).
	demandMaxShapes = 128
	// demandMinSeen is how many arrivals it takes before the learnt shapes replace
	// allocator.TypicalDemand: fewer would let the first handful of claims decide for all.
	demandMinSeen = 50
	// demandMaxUIDs bounds the pods remembered as counted; past it the memory starts afresh,
	// and a pod still pending then is counted once more.
	demandMaxUIDs = 1 << 16
)

// demandHistogram is the decaying, bounded histogram of request shapes. The zero value is ready.
type demandHistogram struct {
	mu      sync.Mutex
	w       map[allocator.Shape]float64
	seen    int
	counted map[types.UID]struct{}
}

// arrived counts the shape of a pod the first time it is seen; later attempts of the same pod
// (a pending pod is tried again and again) are not counted again.
func (h *demandHistogram) arrived(uid types.UID, s allocator.Shape) {
	h.mu.Lock()
	if _, ok := h.counted[uid]; ok {
		h.mu.Unlock()
		return
	}
	if h.counted == nil || len(h.counted) >= demandMaxUIDs {
		h.counted = make(map[types.UID]struct{}, 1024)
	}
	h.counted[uid] = struct{}{}
	h.mu.Unlock()
	h.observe(s)
}

// observe counts one claim of shape s.
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
// claims arrived, the typical ones before.
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

// claimShape is the shape of a pod's request: its GPU count, each a whole GPU unless it is a
// Shared claim stating a compute share (computePercent 30 is 300 milli-GPU of each GPU), and
// the CPU and memory its containers request. A share by memory alone counts as a whole GPU:
// its compute is not capped. A MIG claim has no shape here (its devices are not GPU fractions
// of this measure): the zero Shape, which the histogram does not count.
func claimShape(claim *apiv1.GpuClaim, req *allocator.Request, pod *v1.Pod) allocator.Shape {
	if req.Exclusivity == allocator.MIG {
		return allocator.Shape{}
	}
	s := allocator.Shape{Milli: allocator.FullMilli, GPUs: req.Count}
	if claim != nil && req.Exclusivity == allocator.Shared {
		if sh := claim.Spec.Devices.Share; sh != nil && sh.ComputePercent > 0 && sh.ComputePercent < 100 {
			s.Milli = int(sh.ComputePercent) * allocator.FullMilli / 100
		}
	}
	if pod != nil {
		cpu, mem := podRequests(pod)
		s.CPUMilli, s.MemoryMiB = cpu, mem>>20
	}
	return s
}

// podRequests is the CPU (millicores) and memory (bytes) a pod asks of its node, by the
// kubelet's rule: its containers' requests summed, or its largest init container's where that
// is more (init containers run one at a time, before the others), plus the pod overhead.
func podRequests(pod *v1.Pod) (cpu, mem int64) {
	for _, c := range pod.Spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	for _, c := range pod.Spec.InitContainers {
		cpu = max(cpu, c.Resources.Requests.Cpu().MilliValue())
		mem = max(mem, c.Resources.Requests.Memory().Value())
	}
	cpu += pod.Spec.Overhead.Cpu().MilliValue()
	mem += pod.Spec.Overhead.Memory().Value()
	return cpu, mem
}

// nodeRoom is the CPU and memory of a node its pods have not requested; unbounded for a node
// that states no allocatable CPU or memory (nothing can be refused for want of them there).
func nodeRoom(ni fwk.NodeInfo) allocator.NodeRoom {
	room := allocator.Unbounded
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	if c := alloc.GetMilliCPU(); c > 0 {
		room.CPUMilli = c - used.GetMilliCPU()
	}
	if m := alloc.GetMemory(); m > 0 {
		room.MemoryMiB = (m - used.GetMemory()) >> 20
	}
	return room
}

// fragmentationScores scores the candidate nodes by how little the pod's placement on each
// (Filter's result) would fragment it for the demand seen so far. For a one-GPU Shared claim
// left to the allocator's choice of GPU it also chooses the GPU: of the node's GPUs that can
// take the share, the one whose taking fragments the node least (picks, which Reserve takes).
func (p *Plugin) fragmentationScores(s *stateData, pod *v1.Pod, nodes []fwk.NodeInfo) (ranks map[string]int, picks map[string][]int) {
	demand := p.demand.demand()
	task := claimShape(s.claim, &s.req, pod)
	perGPU := s.req.Exclusivity == allocator.Shared && s.req.Count == 1 && len(s.req.Pinned) == 0 && s.req.Policy != allocator.PreferIDs
	deltas := make(map[string]float64, len(nodes))
	for _, ni := range nodes {
		if ni.Node() == nil {
			continue
		}
		name := ni.Node().Name
		res, ok := s.result(name)
		if !ok {
			continue
		}
		n, _ := p.ledger.NodeView(name)
		if n == nil {
			continue
		}
		ids, free := allocator.FreeMilli(n)
		nf := allocator.NodeFree{GPUs: free, Room: nodeRoom(ni)}
		deltas[name] = allocator.FragmentationDelta(ids, nf, res.IDs, task, demand)
		if !perGPU {
			continue
		}
		one := s.req
		fits := func(id int) bool {
			one.Pinned = []int{id}
			_, err := allocator.Allocate(n, one)
			return err == nil
		}
		if id, d, ok := allocator.LeastFragmentingGPU(ids, nf, task, demand, fits); ok && d < deltas[name] {
			deltas[name] = d
			if picks == nil {
				picks = make(map[string][]int)
			}
			picks[name] = []int{id}
		}
	}
	return allocator.FragmentationScores(deltas), picks
}

// reserve reserves the GPUs the fragmentation strategy picked on the node, or, without a pick
// or when the pick was taken meanwhile, those the allocator chooses for the claim.
func (p *Plugin) reserve(uid types.UID, s *stateData, node string) (allocator.Result, error) {
	if ids, ok := s.fragPicks[node]; ok {
		req := s.req
		req.Pinned, req.Count = ids, len(ids)
		if res, err := p.ledger.Reserve(uid, s.key, node, req); err == nil {
			return res, nil
		}
	}
	return p.ledger.Reserve(uid, s.key, node, s.req)
}
