// Package metrics turns what a simulator run recorded (nodes and their islands, pods with their
// creation, binding and end times and GPU IDs, GPU health changes) into the figures of the
// report: throughput, latency, island locality, contiguity, fragmentation, utilization over
// time and the safety counts. It is pure: the same records always give the same figures.
package metrics

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Node is one GPU node: its GPUs' islands, by GPU ID.
type Node struct {
	Name     string   `json:"name"`
	Pool     string   `json:"pool"`
	Topology string   `json:"topology"`
	Islands  []string `json:"islands"`
	// BandwidthGBps is each GPU's interconnect bandwidth to its island peers, by GPU ID, as
	// the agent reported it (missing: 0).
	BandwidthGBps []int `json:"bandwidthGBps,omitempty"`
	// Labels are the node's labels that a claim's selector can match.
	Labels map[string]string `json:"labels,omitempty"`
	// MemoryMiB is each GPU's memory, by GPU ID, as the agent reported it (missing or 0: not
	// known, and no memory share is judged against it).
	MemoryMiB []int64 `json:"memoryMiB,omitempty"`
}

// Pod is what a run recorded about one pod. Times are offsets from the start of the workload.
type Pod struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	GPUs   int    `json:"gpus"`
	Shared bool   `json:"shared,omitempty"`
	// Part is the share of each of its GPUs a Shared pod with a compute share asks for (0.46
	// for 46 %); 0 for whole GPUs. A fill run counts its GPUs at that part.
	Part float64 `json:"part,omitempty"`
	// ShareMemoryMiB and ShareComputePercent are the share of each of its GPUs the scheduler
	// gave a Shared pod (its gpu.scheduling/share annotation); 0: not stated.
	ShareMemoryMiB      int64         `json:"shareMemoryMiB,omitempty"`
	ShareComputePercent int           `json:"shareComputePercent,omitempty"`
	Created             time.Duration `json:"created"`
	// Seen is when the pod was first seen in the API (SeenOK: at all); a scheduler cannot place
	// it before.
	Seen   time.Duration `json:"seen,omitempty"`
	SeenOK bool          `json:"seenOK,omitempty"`
	// Unschedulable is when it was first seen with PodScheduled=False (UnschedulableOK: at all).
	Unschedulable   time.Duration `json:"unschedulable,omitempty"`
	UnschedulableOK bool          `json:"unschedulableOK,omitempty"`
	// Bound is when the pod was seen bound; zero with BoundOK false when it never was.
	Bound   time.Duration `json:"bound,omitempty"`
	BoundOK bool          `json:"boundOK"`
	Node    string        `json:"node,omitempty"`
	// IDs are the GPU IDs the scheduler allocated; empty for the stock scheduler.
	IDs []int `json:"ids,omitempty"`
	// Ended is when the pod finished or was deleted; zero with EndedOK false while it runs.
	Ended   time.Duration `json:"ended,omitempty"`
	EndedOK bool          `json:"endedOK"`
	// Gang is the pod's gang (its claim's gangRef); empty outside a gang.
	Gang string `json:"gang,omitempty"`
	// GangLevel and GangMode are its claim's gangTopology (level and Required or Preferred);
	// empty when it states none.
	GangLevel string `json:"gangLevel,omitempty"`
	GangMode  string `json:"gangMode,omitempty"`
	// Topology is its claim's topology mode (Required, Preferred, Ignore; empty: none stated)
	// and MinBandwidthGBps the claim's bandwidth floor; Selector its claim's node selector.
	Topology         string            `json:"topology,omitempty"`
	MinBandwidthGBps int               `json:"minBandwidthGBps,omitempty"`
	Selector         map[string]string `json:"selector,omitempty"`
}

// HealthChange is a GPU turning Unhealthy or Healthy, as its GpuNodeStatus showed.
type HealthChange struct {
	Node    string        `json:"node"`
	GPU     int           `json:"gpu"`
	At      time.Duration `json:"at"`
	Healthy bool          `json:"healthy"`
}

// Input is one run's records.
type Input struct {
	Nodes  []Node
	Pods   []Pod
	Health []HealthChange
	// AnyN says the scheduler chose only a node, not GPU IDs (the stock scheduler with
	// nvidia.com/gpu): the GPU IDs are those StockPick picks among the node's free healthy
	// GPUs, as the node's device plugin would; without StockPick, the lowest-numbered ones.
	AnyN bool
	// StockPick picks size of the available GPU IDs of node (package sim/baseline: the NVIDIA
	// device plugin's preferred allocation); nil when it cannot.
	StockPick func(node Node, available []int, size int) []int
	// End of the workload phase; SampleEvery spaces the utilization samples (default End/200).
	End         time.Duration
	SampleEvery time.Duration
}

// UnhealthyGrace: a GPU counts as unhealthy for an allocation only once it had been reported
// Unhealthy this long before the pod was bound, since the scheduler may have chosen it (and
// started writing leases) just before the report arrived.
const UnhealthyGrace = 5 * time.Second

// Sample is the cluster at one moment.
type Sample struct {
	At   time.Duration `json:"at"`
	Used int           `json:"used"`
	// Utilization is Used over all GPUs.
	Utilization float64 `json:"utilization"`
	// Fragmentation is the share of free GPUs that sit in an island that is not entirely
	// free, so cannot serve an island-sized claim.
	Fragmentation float64 `json:"fragmentation"`
}

// NodeMap is one node's GPUs at the moment of peak utilization, for the report's GPU map.
type NodeMap struct {
	Name    string   `json:"name"`
	Pool    string   `json:"pool"`
	Islands []string `json:"islands"`
	// Holders is the pod holding each GPU, "" when free.
	Holders []string `json:"holders"`
	// Unhealthy GPUs at that moment.
	Unhealthy []bool `json:"unhealthy"`
}

// Result holds the figures of one run.
type Result struct {
	Pods        int `json:"pods"`
	Bound       int `json:"bound"`
	Unscheduled int `json:"unscheduled"`
	// Throughput is pods bound per second from the first creation to the last binding.
	Throughput float64       `json:"throughputPodsPerSecond"`
	LastBound  time.Duration `json:"lastBound"`
	LatencyP50 time.Duration `json:"latencyP50"`
	LatencyP99 time.Duration `json:"latencyP99"`
	LatencyMax time.Duration `json:"latencyMax"`
	// MultiGPU pods bound; of them IslandPossible had, when bound, some node with a free
	// island that fit them, and IslandLocal of those got GPUs all in one island.
	MultiGPU         int     `json:"multiGPU"`
	IslandPossible   int     `json:"islandPossible"`
	IslandLocal      int     `json:"islandLocal"`
	IslandLocalRatio float64 `json:"islandLocalRatio"`
	// IslandMissAges are, for each multi-GPU pod placed across islands while an island fit
	// it, how long the longest-free fitting island had had room for it when the pod was bound.
	// The replay frees GPUs the instant a pod ended; a scheduler learns of it a little later,
	// so a miss whose age is a few milliseconds is a placement made before the scheduler could
	// know of the island, and one whose age is long is a placement that ignored it.
	IslandMissAges []time.Duration `json:"islandMissAges,omitempty"`
	// Contiguous multi-GPU pods got adjacent IDs (0,1,2 not 0,2,4).
	Contiguous      int     `json:"contiguous"`
	ContiguityRatio float64 `json:"contiguityRatio"`
	// DoubleBookedGPUs counts allocations that put a pod on a GPU another pod held (an
	// Exclusive pod with anyone, a Shared pod with an Exclusive one).
	DoubleBookedGPUs int `json:"doubleBookedGPUs"`
	// OvercommittedGPUs counts allocations that put a Shared pod on a GPU whose holders'
	// compute shares then summed past 100 % or their memory shares past the GPU's memory.
	OvercommittedGPUs int `json:"overcommittedGPUs"`
	// UnhealthyAllocations counts GPUs allocated while reported Unhealthy (see UnhealthyGrace).
	UnhealthyAllocations int `json:"unhealthyAllocations"`
	TotalGPUs            int `json:"totalGPUs"`
	// Utilization over time and its mean and peak; fragmentation's mean over the samples
	// with free GPUs.
	Samples           []Sample      `json:"samples"`
	MeanUtilization   float64       `json:"meanUtilization"`
	PeakUtilization   float64       `json:"peakUtilization"`
	PeakAt            time.Duration `json:"peakAt"`
	MeanFragmentation float64       `json:"meanFragmentation"`
	// Map is every node's GPUs at PeakAt.
	Map []NodeMap `json:"map,omitempty"`
	// Gangs counts the workload's gangs; of them GangsWhole had every member bound and
	// GangsPartial some but not all. GangBindSpreadP50/P99 are, over whole gangs, the time from
	// the first member's binding to the last one's. GangIdleGPUSeconds is the GPU time members
	// held while waiting for their mates: for each bound member, (the last member's binding, or
	// the end of the workload if one never bound) minus its own binding, times its GPUs.
	Gangs              int           `json:"gangs,omitempty"`
	GangsWhole         int           `json:"gangsWhole,omitempty"`
	GangsPartial       int           `json:"gangsPartial,omitempty"`
	GangBindSpreadP50  time.Duration `json:"gangBindSpreadP50,omitempty"`
	GangBindSpreadP99  time.Duration `json:"gangBindSpreadP99,omitempty"`
	GangIdleGPUSeconds float64       `json:"gangIdleGPUSeconds,omitempty"`
	// Waits: whether the pods that were not bound at once could have been (wait.go).
	Waits WaitFigures `json:"waits"`
	// Domains: gangs placed inside one topology domain (domains.go); nil without gangTopology.
	Domains *DomainFigures `json:"domains,omitempty"`
}

// Compute derives every figure from in.
func Compute(in Input) Result {
	r := Result{Pods: len(in.Pods)}
	var first time.Duration = -1
	var lat []time.Duration
	for _, p := range in.Pods {
		if first < 0 || p.Created < first {
			first = p.Created
		}
		if !p.BoundOK {
			r.Unscheduled++
			continue
		}
		r.Bound++
		lat = append(lat, max(p.Bound-p.Created, 0))
		r.LastBound = max(r.LastBound, p.Bound)
	}
	if r.Bound > 0 {
		if span := (r.LastBound - first).Seconds(); span > 0 {
			r.Throughput = float64(r.Bound) / span
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		r.LatencyP50, r.LatencyP99, r.LatencyMax = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	}
	for _, n := range in.Nodes {
		r.TotalGPUs += len(n.Islands)
	}

	waited := waitedPods(in, r.LatencyP50)
	rp := newReplay(in, waited)
	rp.run(-1, &r)
	r.Samples = rp.samples
	var fragSum float64
	var fragN int
	for _, s := range r.Samples {
		r.MeanUtilization += s.Utilization
		if s.Utilization > r.PeakUtilization {
			r.PeakUtilization, r.PeakAt = s.Utilization, s.At
		}
		if s.Used < r.TotalGPUs {
			fragSum += s.Fragmentation
			fragN++
		}
	}
	if len(r.Samples) > 0 {
		r.MeanUtilization /= float64(len(r.Samples))
	}
	if fragN > 0 {
		r.MeanFragmentation = fragSum / float64(fragN)
	}
	if r.IslandPossible > 0 {
		r.IslandLocalRatio = float64(r.IslandLocal) / float64(r.IslandPossible)
	}
	if r.MultiGPU > 0 {
		r.ContiguityRatio = float64(r.Contiguous) / float64(r.MultiGPU)
	}
	gangFigures(in, &r)
	r.Domains = ComputeDomains(in)
	r.Waits = waitFigures(in, rp.waits)
	// Second pass, to the peak, for the GPU map.
	snap := newReplay(in, nil)
	snap.run(r.PeakAt, nil)
	r.Map = snap.nodeMap()
	return r
}

// percentile by nearest rank over sorted values.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

type event struct {
	at   time.Duration
	kind int // evRelease, evHealth, evSeen, evBind (the order at equal times)
	pod  int
	hc   HealthChange
}

const (
	evRelease = iota
	evHealth
	// evSeen starts following a pod that waited (wait.go): after the releases of the same
	// moment, so a GPU freed as the pod appeared counts as free to it.
	evSeen
	evBind
)

type gpuState struct {
	holders        []int // pod indexes
	exclusive      bool  // held by an Exclusive pod
	unhealthy      bool
	unhealthySince time.Duration
}

type nodeState struct {
	idx     int // in replay.order
	node    *Node
	gpus    []gpuState
	islands map[string][]int // island -> GPU IDs
	// fitSince[island][k] is when the island last came to have at least k free GPUs (absent
	// while it has fewer).
	fitSince map[string]map[int]time.Duration
}

type replay struct {
	in      Input
	nodes   map[string]*nodeState
	order   []string
	events  []event
	alloc   map[int][]int // pod -> GPU IDs it holds
	samples []Sample
	used    int
	// islandFree[f] counts islands with exactly f free GPUs.
	islandFree []int
	// now is the time of the event being applied.
	now time.Duration
	// waits follows the pods that waited; nil when none are followed.
	waits *waitTracker
}

// newReplay prepares the replay of in; waited are the pods (indexes into in.Pods) whose waits
// it follows, none when nil.
func newReplay(in Input, waited []int) *replay {
	rp := &replay{in: in, nodes: map[string]*nodeState{}, alloc: map[int][]int{}}
	maxIsland := 0
	for i := range in.Nodes {
		n := &in.Nodes[i]
		ns := &nodeState{idx: i, node: n, gpus: make([]gpuState, len(n.Islands)), islands: map[string][]int{}, fitSince: map[string]map[int]time.Duration{}}
		for id, isl := range n.Islands {
			ns.islands[isl] = append(ns.islands[isl], id)
		}
		for isl, ids := range ns.islands {
			maxIsland = max(maxIsland, len(ids))
			ns.fitSince[isl] = map[int]time.Duration{}
			for k := 1; k <= len(ids); k++ {
				ns.fitSince[isl][k] = 0 // free from the start
			}
		}
		rp.nodes[n.Name] = ns
		rp.order = append(rp.order, n.Name)
	}
	rp.islandFree = make([]int, maxIsland+1)
	for _, ns := range rp.nodes {
		for _, ids := range ns.islands {
			rp.islandFree[len(ids)]++
		}
	}
	for i, p := range in.Pods {
		if !p.BoundOK {
			continue
		}
		rp.events = append(rp.events, event{at: p.Bound, kind: evBind, pod: i})
		if p.EndedOK {
			rp.events = append(rp.events, event{at: max(p.Ended, p.Bound), kind: evRelease, pod: i})
		}
	}
	for _, h := range in.Health {
		rp.events = append(rp.events, event{at: h.At, kind: evHealth, hc: h})
	}
	if len(waited) > 0 {
		rp.waits = newWaitTracker()
		for _, i := range waited {
			rp.events = append(rp.events, event{at: in.Pods[i].seenAt(), kind: evSeen, pod: i})
		}
	}
	sort.SliceStable(rp.events, func(i, j int) bool {
		a, b := rp.events[i], rp.events[j]
		if a.at != b.at {
			return a.at < b.at
		}
		return a.kind < b.kind
	})
	return rp
}

func (g *gpuState) free() bool { return len(g.holders) == 0 && !g.unhealthy }

// islandFreeCount counts the free GPUs of one island.
func (ns *nodeState) islandFreeCount(isl string) int {
	n := 0
	for _, id := range ns.islands[isl] {
		if ns.gpus[id].free() {
			n++
		}
	}
	return n
}

// change applies f to GPU id of ns, keeping the island histogram and the used count right.
func (rp *replay) change(ns *nodeState, id int, f func(g *gpuState)) {
	isl := ns.node.Islands[id]
	before := ns.islandFreeCount(isl)
	wasUsed := len(ns.gpus[id].holders) > 0
	f(&ns.gpus[id])
	after := ns.islandFreeCount(isl)
	rp.islandFree[before]--
	rp.islandFree[after]++
	for k := before + 1; k <= after; k++ {
		ns.fitSince[isl][k] = rp.now
	}
	for k := after + 1; k <= before; k++ {
		delete(ns.fitSince[isl], k)
	}
	if isUsed := len(ns.gpus[id].holders) > 0; isUsed != wasUsed {
		if isUsed {
			rp.used++
		} else {
			rp.used--
		}
	}
}

// fitAge is how long the island that has had at least g free GPUs the longest has had them;
// false when no island has.
func (rp *replay) fitAge(g int) (time.Duration, bool) {
	oldest, found := time.Duration(0), false
	for _, name := range rp.order {
		for _, since := range rp.nodes[name].fitSince {
			if t, ok := since[g]; ok && (!found || t < oldest) {
				oldest, found = t, true
			}
		}
	}
	return rp.now - oldest, found
}

// fitPossible: some node has an island with at least g free GPUs.
func (rp *replay) fitPossible(g int) bool {
	for f := g; f < len(rp.islandFree); f++ {
		if rp.islandFree[f] > 0 {
			return true
		}
	}
	return false
}

// run replays events up to and including until (all of them when until < 0), taking samples
// and, when r is not nil, the placement and safety counts.
func (rp *replay) run(until time.Duration, r *Result) {
	step := rp.in.SampleEvery
	if step <= 0 {
		step = max(rp.in.End/200, 100*time.Millisecond)
	}
	next := time.Duration(0)
	for _, ev := range rp.events {
		if until >= 0 && ev.at > until {
			break
		}
		for r != nil && next < ev.at && next <= rp.in.End {
			rp.sample(next)
			next += step
		}
		rp.apply(ev, r)
	}
	for r != nil && next <= rp.in.End {
		rp.sample(next)
		next += step
	}
}

func (rp *replay) apply(ev event, r *Result) {
	rp.now = ev.at
	switch ev.kind {
	case evSeen:
		rp.startWait(ev.pod)
	case evHealth:
		ns := rp.nodes[ev.hc.Node]
		if ns == nil || ev.hc.GPU < 0 || ev.hc.GPU >= len(ns.gpus) {
			return
		}
		rp.change(ns, ev.hc.GPU, func(g *gpuState) {
			if !ev.hc.Healthy && !g.unhealthy {
				g.unhealthySince = ev.at
			}
			g.unhealthy = !ev.hc.Healthy
		})
		rp.updateWaits(ns)
	case evRelease:
		ids, ok := rp.alloc[ev.pod]
		if !ok {
			return
		}
		delete(rp.alloc, ev.pod)
		ns := rp.nodes[rp.in.Pods[ev.pod].Node]
		for _, id := range ids {
			rp.change(ns, id, func(g *gpuState) {
				for i, h := range g.holders {
					if h == ev.pod {
						g.holders = append(g.holders[:i], g.holders[i+1:]...)
						break
					}
				}
				g.exclusive = false
				for _, h := range g.holders {
					if !rp.in.Pods[h].Shared {
						g.exclusive = true
					}
				}
			})
		}
		rp.updateWaits(ns)
	case evBind:
		p := rp.in.Pods[ev.pod]
		rp.endWait(ev.pod) // judged on the cluster just before its own binding
		ns := rp.nodes[p.Node]
		if ns == nil {
			return
		}
		ids := p.IDs
		if rp.in.AnyN {
			ids = rp.anyN(ns, p.GPUs)
		}
		if r != nil && len(ids) > 1 {
			r.MultiGPU++
			possible := rp.fitPossible(len(ids))
			local := true
			for _, id := range ids[1:] {
				if id >= len(ns.node.Islands) || ids[0] >= len(ns.node.Islands) || ns.node.Islands[id] != ns.node.Islands[ids[0]] {
					local = false
				}
			}
			if possible {
				r.IslandPossible++
				if local {
					r.IslandLocal++
				} else if age, ok := rp.fitAge(len(ids)); ok {
					r.IslandMissAges = append(r.IslandMissAges, age)
				}
			}
			if contiguous(ids) {
				r.Contiguous++
			}
		}
		var held []int
		for _, id := range ids {
			if id < 0 || id >= len(ns.gpus) {
				continue
			}
			g := &ns.gpus[id]
			if r != nil {
				if len(g.holders) > 0 && (!p.Shared || g.exclusive) {
					r.DoubleBookedGPUs++
				}
				if g.unhealthy && p.Bound-g.unhealthySince >= UnhealthyGrace {
					r.UnhealthyAllocations++
				}
			}
			rp.change(ns, id, func(g *gpuState) {
				g.holders = append(g.holders, ev.pod)
				if !p.Shared {
					g.exclusive = true
				}
			})
			if r != nil && p.Shared && rp.overcommitted(ns, id) {
				r.OvercommittedGPUs++
			}
			held = append(held, id)
		}
		rp.alloc[ev.pod] = held
		rp.updateWaits(ns)
	}
}

// overcommitted says whether the Shared holders of a node's GPU together hold more than the
// GPU has: compute shares past 100 %, or memory shares past its memory where that is known.
func (rp *replay) overcommitted(ns *nodeState, id int) bool {
	var compute int
	var mem int64
	for _, h := range ns.gpus[id].holders {
		if hp := rp.in.Pods[h]; hp.Shared {
			compute += hp.ShareComputePercent
			mem += hp.ShareMemoryMiB
		}
	}
	capMiB := int64(0)
	if id < len(ns.node.MemoryMiB) {
		capMiB = ns.node.MemoryMiB[id]
	}
	return compute > 100 || (capMiB > 0 && mem > capMiB)
}

// anyN models the stock cluster's pick: StockPick's choice among the free healthy GPUs (the
// lowest IDs without one); when too few are healthy (the kwok node's capacity does not shrink
// as a real device plugin's would), the lowest free healthy IDs, then any free ones.
func (rp *replay) anyN(ns *nodeState, n int) []int {
	if rp.in.StockPick != nil {
		var healthy []int
		for id, g := range ns.gpus {
			if g.free() {
				healthy = append(healthy, id)
			}
		}
		if len(healthy) >= n {
			if ids := rp.in.StockPick(*ns.node, healthy, n); len(ids) == n {
				return ids
			}
		}
	}
	var ids []int
	for pass := 0; pass < 2 && len(ids) < n; pass++ {
		for id := range ns.gpus {
			g := ns.gpus[id]
			if len(ids) < n && len(g.holders) == 0 && (g.unhealthy == (pass == 1)) {
				ids = append(ids, id)
			}
		}
	}
	sort.Ints(ids)
	return ids
}

func contiguous(ids []int) bool {
	s := append([]int(nil), ids...)
	sort.Ints(s)
	return s[len(s)-1]-s[0] == len(s)-1
}

func (rp *replay) sample(at time.Duration) {
	total, free, wholeFree := 0, 0, 0
	for _, ns := range rp.nodes {
		for _, ids := range ns.islands {
			f := 0
			for _, id := range ids {
				if ns.gpus[id].free() {
					f++
				}
			}
			total += len(ids)
			free += f
			if f == len(ids) {
				wholeFree += f
			}
		}
	}
	s := Sample{At: at, Used: rp.used}
	if total > 0 {
		s.Utilization = float64(rp.used) / float64(total)
	}
	if free > 0 {
		s.Fragmentation = 1 - float64(wholeFree)/float64(free)
	}
	rp.samples = append(rp.samples, s)
}

func (rp *replay) nodeMap() []NodeMap {
	out := make([]NodeMap, 0, len(rp.order))
	for _, name := range rp.order {
		ns := rp.nodes[name]
		m := NodeMap{Name: name, Pool: ns.node.Pool, Islands: ns.node.Islands, Holders: make([]string, len(ns.gpus)), Unhealthy: make([]bool, len(ns.gpus))}
		for id, g := range ns.gpus {
			if len(g.holders) > 0 {
				m.Holders[id] = rp.in.Pods[g.holders[0]].Name
				if len(g.holders) > 1 {
					m.Holders[id] += fmt.Sprintf(" +%d", len(g.holders)-1)
				}
			}
			m.Unhealthy[id] = g.unhealthy
		}
		out = append(out, m)
	}
	return out
}

// gangFigures fills the gang counts, bind spreads and idle GPU time of r.
func gangFigures(in Input, r *Result) {
	gangs := map[string][]Pod{}
	for _, p := range in.Pods {
		if p.Gang != "" {
			gangs[p.Gang] = append(gangs[p.Gang], p)
		}
	}
	r.Gangs = len(gangs)
	var spreads []time.Duration
	for _, members := range gangs {
		bound, first, last := 0, time.Duration(-1), time.Duration(0)
		for _, m := range members {
			if !m.BoundOK {
				continue
			}
			bound++
			if first < 0 || m.Bound < first {
				first = m.Bound
			}
			last = max(last, m.Bound)
		}
		switch {
		case bound == len(members):
			r.GangsWhole++
			spreads = append(spreads, last-first)
		case bound > 0:
			r.GangsPartial++
			last = max(last, in.End) // the members bound waited until the end for the rest
		}
		for _, m := range members {
			if m.BoundOK {
				r.GangIdleGPUSeconds += (last - m.Bound).Seconds() * float64(m.GPUs)
			}
		}
	}
	if len(spreads) > 0 {
		sort.Slice(spreads, func(i, j int) bool { return spreads[i] < spreads[j] })
		r.GangBindSpreadP50, r.GangBindSpreadP99 = percentile(spreads, 0.50), percentile(spreads, 0.99)
	}
}
