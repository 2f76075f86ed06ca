package metrics

import (
	"math"
	"sort"
)

// FillPoint is the cluster after the first Arrived pods of a fill run.
type FillPoint struct {
	Arrived int `json:"arrived"`
	// Requested is the GPUs those pods asked for over all GPUs of the cluster (the x axis of
	// the allocation curve: it passes 100 % when the arrivals could fill the cluster).
	Requested float64 `json:"requested"`
	// Allocation is the GPUs held by those of them that were bound, over all GPUs.
	Allocation float64 `json:"allocation"`
}

// Fill is the outcome of a fill run (pods arrive in trace order and never leave), as in the
// fragmentation studies of GPU clusters: how much of the cluster the scheduler could allocate
// as arrivals grew, and what the free GPUs left were good for.
type Fill struct {
	TotalGPUs int `json:"totalGPUs"`
	// Curve has one point per arrival, in arrival order. Pods never leave, so a pod that was
	// bound at the end was bound for good; the point counts it from its arrival on.
	Curve []FillPoint `json:"curve"`
	// Steps is the allocation when the arrived demand first reached each tenth of the cluster's
	// GPUs (10 %, 20 %, ... as far as the arrivals went): the curve of the fragmentation studies
	// (GPU allocation ratio against arrived GPU demand) at a glance.
	Steps []FillPoint `json:"steps,omitempty"`
	// Allocation is the allocated share of the cluster's GPUs at the end.
	Allocation   float64 `json:"allocation"`
	AllocatedGPU int     `json:"allocatedGPUs"`
	// FirstUnplaced is the arrival number (1-based) of the first pod never bound; 0 when all
	// were. AllocationAtFirstUnplaced is the allocation rate after the arrivals before it.
	FirstUnplaced             int     `json:"firstUnplaced,omitempty"`
	FirstUnplacedPod          string  `json:"firstUnplacedPod,omitempty"`
	FirstUnplacedGPUs         int     `json:"firstUnplacedGPUs,omitempty"`
	AllocationAtFirstUnplaced float64 `json:"allocationAtFirstUnplaced,omitempty"`
	// Pods of 4 and 8 GPUs: arrived, and bound of those.
	Arrived4 int `json:"arrived4"`
	Placed4  int `json:"placed4"`
	Arrived8 int `json:"arrived8"`
	Placed8  int `json:"placed8"`
	// TypicalRequest is the GPU-weighted median request of the arrivals: half of the GPUs asked
	// came in pods of at least this size. StrandedGPUs are the free GPUs at the end on nodes
	// with fewer free GPUs than that (no typical pod can use them), and Fragmentation their
	// share of all free GPUs.
	TypicalRequest int     `json:"typicalRequest"`
	FreeGPUs       int     `json:"freeGPUs"`
	StrandedGPUs   int     `json:"strandedGPUs"`
	Fragmentation  float64 `json:"fragmentation"`
	// The same when the first pod could not be placed, counting the pods placed among the
	// arrivals before it: a cluster that small pods fill up in the end may still have turned
	// the first big pod away with many free GPUs.
	FreeAtFirstUnplaced          int     `json:"freeAtFirstUnplaced,omitempty"`
	StrandedAtFirstUnplaced      int     `json:"strandedAtFirstUnplaced,omitempty"`
	FragmentationAtFirstUnplaced float64 `json:"fragmentationAtFirstUnplaced,omitempty"`
}

// ComputeFill derives the fill figures from a run whose pods are in arrival order.
func ComputeFill(in Input) Fill {
	f := Fill{}
	capacity := map[string]int{}
	for _, n := range in.Nodes {
		capacity[n.Name] = len(n.Islands)
		f.TotalGPUs += len(n.Islands)
	}
	if f.TotalGPUs == 0 {
		return f
	}
	total := float64(f.TotalGPUs)
	held := map[string]int{}
	asked, allocated := 0.0, 0.0
	var sizes []int
	for i, p := range in.Pods {
		// A shared pod counts as its part of a GPU in the allocation, and as a GPU it holds on
		// its node in the stranded figures (the node's GPU is not free for a whole-GPU pod).
		gpus := float64(p.GPUs)
		if p.Part > 0 {
			gpus *= p.Part
		}
		asked += gpus
		sizes = append(sizes, p.GPUs)
		placed := p.BoundOK && !p.EndedOK
		if placed {
			allocated += gpus
			held[p.Node] += p.GPUs
		} else if f.FirstUnplaced == 0 {
			f.FirstUnplaced, f.FirstUnplacedPod, f.FirstUnplacedGPUs = i+1, p.Name, p.GPUs
			f.AllocationAtFirstUnplaced = allocated / total
		}
		switch p.GPUs {
		case 4:
			f.Arrived4++
			if placed {
				f.Placed4++
			}
		case 8:
			f.Arrived8++
			if placed {
				f.Placed8++
			}
		}
		pt := FillPoint{Arrived: i + 1, Requested: asked / total, Allocation: allocated / total}
		f.Curve = append(f.Curve, pt)
		// Small epsilon: ten pods of 0.1 GPU on a 10-GPU cluster reach 10 % exactly.
		for len(f.Steps) < 10 && pt.Requested+1e-9 >= float64(len(f.Steps)+1)/10 {
			f.Steps = append(f.Steps, pt)
		}
	}
	f.AllocatedGPU = int(math.Round(allocated))
	f.Allocation = allocated / total
	f.TypicalRequest = weightedMedian(sizes)
	f.FreeGPUs, f.StrandedGPUs, f.Fragmentation = stranded(capacity, held, f.TypicalRequest)
	if f.FirstUnplaced > 0 {
		before := map[string]int{}
		for _, p := range in.Pods[:f.FirstUnplaced-1] {
			if p.BoundOK && !p.EndedOK {
				before[p.Node] += p.GPUs
			}
		}
		f.FreeAtFirstUnplaced, f.StrandedAtFirstUnplaced, f.FragmentationAtFirstUnplaced = stranded(capacity, before, f.TypicalRequest)
	}
	return f
}

// stranded counts the free GPUs and those on nodes with fewer free than typical.
func stranded(capacity, held map[string]int, typical int) (free, stranded int, share float64) {
	for name, c := range capacity {
		n := max(c-held[name], 0)
		free += n
		if n < typical {
			stranded += n
		}
	}
	if free > 0 {
		share = float64(stranded) / float64(free)
	}
	return free, stranded, share
}

// weightedMedian is the smallest request size s such that pods of size <= s ask for at least
// half of all GPUs asked.
func weightedMedian(sizes []int) int {
	s := append([]int(nil), sizes...)
	sort.Ints(s)
	sum := 0
	for _, v := range s {
		sum += v
	}
	acc := 0
	for _, v := range s {
		acc += v
		if 2*acc >= sum {
			return v
		}
	}
	return 0
}
