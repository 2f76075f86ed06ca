package metrics

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Whether a pod's wait was avoidable. A pod that was not bound at once may have waited because
// nothing could hold it (capacity: every fitting placement was taken) or although a placement
// that satisfied its claim was free (a scheduler that could have placed it did not, yet). The
// replay that gives the utilization and island figures follows each such pod from the moment
// it was seen to its binding and notes when, on the GPUs as the recorder saw them, some node
// could have held it.
//
// "Free" is the replay's: a pod's GPUs are taken when it was seen bound and given back when it
// was seen finished or deleted. That is when a scheduler's informers learn of either, so a GPU
// counts as free from the moment a scheduler could first know it was, and not from when the
// pod's process stopped. gpu-scheduler takes GPUs in Reserve, and its PreBind writes a lease
// per GPU before the binding can be seen (a fraction of a second for an 8-GPU pod,
// docs/benchmarks.md): that time reads as free, to the pod itself and to any other pod
// waiting beside it, so the figures are upper bounds for it. WaitTolerance absorbs the shorter such windows.

// WaitTolerance is how long a fitting placement may have sat free while a pod waited before the
// wait counts as avoidable: about what the scheduler needs to learn of a release and bind.
const WaitTolerance = 100 * time.Millisecond

// maxListedWaits caps WaitFigures.Avoidable, so a large run's report stays small.
const maxListedWaits = 100

// Wait is what the replay saw of one pod that waited.
type Wait struct {
	Pod string `json:"pod"`
	// Seen is when it was first seen (its creation when the recorder did not note that).
	Seen time.Duration `json:"seen"`
	// FirstFit is the first moment at or after Seen at which a placement satisfying its claim
	// was free on some node; FitOK is false when none was before it was bound.
	FirstFit time.Duration `json:"firstFit,omitempty"`
	FitOK    bool          `json:"fitOK"`
	// FitNode is a node that had the fit free at FirstFit.
	FitNode string        `json:"fitNode,omitempty"`
	Bound   time.Duration `json:"bound"`
	// Avoidable is Bound - FirstFit (0 without a fit): the wait that capacity does not explain.
	Avoidable time.Duration `json:"avoidable"`
	// FitFree is how long, in all, some fitting placement was free between Seen and Bound. It
	// is less than Avoidable when a fit freed, was taken by another pod and the pod waited on.
	FitFree time.Duration `json:"fitFree"`
}

// WaitFigures says whether the pods that were not bound at once waited for capacity or while a
// placement for them was free.
type WaitFigures struct {
	// Waited counts the bound pods that were not bound at once: seen unschedulable before or at
	// their binding, or bound more than the run's median latency plus WaitTolerance after
	// their creation.
	Waited int `json:"waited"`
	// WithFreeFit counts those during whose wait a fitting placement was free for longer than
	// WaitTolerance in all.
	WithFreeFit int `json:"withFreeFit"`
	// ForCapacity counts those for which no fitting placement was free when they were seen.
	ForCapacity int `json:"forCapacity"`
	// AvoidableP50, AvoidableP99 and AvoidableMax are over the Waited pods' Avoidable.
	AvoidableP50 time.Duration `json:"avoidableP50"`
	AvoidableP99 time.Duration `json:"avoidableP99"`
	AvoidableMax time.Duration `json:"avoidableMax"`
	// LatencyP99NoCapacityWait is the latency p99 over the bound pods outside ForCapacity:
	// those that a placement was free for when they came, to compare with a scheduler that
	// placed everything at once.
	LatencyP99NoCapacityWait time.Duration `json:"latencyP99NoCapacityWait"`
	// Avoidable lists the WithFreeFit pods, longest Avoidable first (at most maxListedWaits).
	Avoidable []Wait `json:"avoidable,omitempty"`
}

// seenAt is when a scheduler could first have seen p.
func (p *Pod) seenAt() time.Duration {
	t := p.Created
	if p.SeenOK {
		t = max(t, p.Seen)
	}
	if p.BoundOK {
		t = min(t, p.Bound)
	}
	return t
}

// waited reports whether a bound pod was not bound at once (see WaitFigures.Waited).
func (p *Pod) waited(median time.Duration) bool {
	if !p.BoundOK {
		return false
	}
	if p.UnschedulableOK && p.Unschedulable <= p.Bound {
		return true
	}
	return p.Bound-p.Created > median+WaitTolerance
}

// waitedPods are the indexes of in.Pods that waited, given the run's median latency.
func waitedPods(in Input, median time.Duration) []int {
	var out []int
	for i := range in.Pods {
		if in.Pods[i].waited(median) {
			out = append(out, i)
		}
	}
	return out
}

// waiter follows one pod from its evSeen to its evBind.
type waiter struct {
	since time.Duration // when its shape last gained a fit, while it waited
	w     Wait
}

// shape is what decides where a claim fits (fitsKey); pods of one shape fit on the same nodes,
// so the replay judges a changed node once per shape, not once per waiting pod.
type shape struct {
	pod     *Pod // one pod of the shape, to judge nodes with
	fits    []bool
	nfit    int
	waiters map[int]*waiter // by pod index
}

type waitTracker struct {
	shapes map[string]*shape
	// of is the shape of each pod being followed, by pod index.
	of   map[int]*shape
	done []Wait
	// capacity marks the pods (indexes into Input.Pods) that found no fit free when seen.
	capacity map[int]bool
}

func newWaitTracker() *waitTracker {
	return &waitTracker{shapes: map[string]*shape{}, of: map[int]*shape{}, capacity: map[int]bool{}}
}

// fitsKey is what of p fits reads.
func (rp *replay) fitsKey(p *Pod) string {
	keys := slices.Sorted(maps.Keys(p.Selector))
	sel := make([]string, 0, len(keys))
	for _, k := range keys {
		sel = append(sel, k+"="+p.Selector[k])
	}
	shared := p.Shared && !rp.in.AnyN
	required := p.Topology == "Required" && !rp.in.AnyN
	return fmt.Sprintf("%d/%t/%t/%d/%s", p.GPUs, shared, required, p.MinBandwidthGBps, strings.Join(sel, ","))
}

// fits reports whether ns, as it is now, has free a placement that satisfies p's claim: its
// selector matches the node, and enough healthy GPUs are free to it (not held at all, or for a
// Shared claim not held by an Exclusive pod), in one island and each at the bandwidth floor
// when its topology is Required. Preferred and Ignore make islands and bandwidth a wish the
// scheduler may give up, so any GPUs of the node do. The stock scheduler's nvidia.com/gpu
// (AnyN) can express neither topology nor sharing: any whole GPUs do.
func (rp *replay) fits(ns *nodeState, p *Pod) bool {
	for k, v := range p.Selector {
		if got, ok := ns.node.Labels[k]; !ok || got != v {
			return false
		}
	}
	shared := p.Shared && !rp.in.AnyN
	usable := func(id int) bool {
		g := &ns.gpus[id]
		switch {
		case g.unhealthy:
			return false
		case shared:
			return !g.exclusive
		default:
			return len(g.holders) == 0
		}
	}
	if p.Topology == "Required" && !rp.in.AnyN {
		for _, ids := range ns.islands {
			n := 0
			for _, id := range ids {
				if usable(id) && ns.bandwidth(id) >= p.MinBandwidthGBps {
					n++
				}
			}
			if n >= p.GPUs {
				return true
			}
		}
		return false
	}
	n := 0
	for id := range ns.gpus {
		if usable(id) {
			n++
		}
	}
	return n >= p.GPUs
}

func (ns *nodeState) bandwidth(id int) int {
	if id < len(ns.node.BandwidthGBps) {
		return ns.node.BandwidthGBps[id]
	}
	return 0
}

// startWait begins following a pod that waited, from the cluster as it is now.
func (rp *replay) startWait(pod int) {
	if rp.waits == nil {
		return
	}
	p := &rp.in.Pods[pod]
	key := rp.fitsKey(p)
	sh := rp.waits.shapes[key]
	if sh == nil {
		sh = &shape{pod: p, fits: make([]bool, len(rp.order)), waiters: map[int]*waiter{}}
		for i, name := range rp.order {
			if rp.fits(rp.nodes[name], p) {
				sh.fits[i] = true
				sh.nfit++
			}
		}
		rp.waits.shapes[key] = sh
	}
	w := &waiter{w: Wait{Pod: p.Name, Seen: rp.now, Bound: p.Bound}}
	if sh.nfit > 0 {
		w.since, w.w.FirstFit, w.w.FitOK = rp.now, rp.now, true
		w.w.FitNode = rp.order[slices.Index(sh.fits, true)]
	} else {
		rp.waits.capacity[pod] = true
	}
	sh.waiters[pod] = w
	rp.waits.of[pod] = sh
}

// updateWaits judges ns anew for every shape followed, after a change to it, and notes on
// the pods waiting with that shape when it gained its first fit or lost its last.
func (rp *replay) updateWaits(ns *nodeState) {
	if rp.waits == nil || ns == nil {
		return
	}
	for _, sh := range rp.waits.shapes {
		f := rp.fits(ns, sh.pod)
		if f == sh.fits[ns.idx] {
			continue
		}
		sh.fits[ns.idx] = f
		if f {
			sh.nfit++
			if sh.nfit == 1 {
				for _, w := range sh.waiters {
					w.since = rp.now
					if !w.w.FitOK {
						w.w.FirstFit, w.w.FitOK, w.w.FitNode = rp.now, true, ns.node.Name
					}
				}
			}
			continue
		}
		sh.nfit--
		if sh.nfit == 0 {
			for _, w := range sh.waiters {
				w.w.FitFree += rp.now - w.since
			}
		}
	}
}

// endWait stops following a pod at its binding.
func (rp *replay) endWait(pod int) {
	if rp.waits == nil {
		return
	}
	sh, ok := rp.waits.of[pod]
	if !ok {
		return
	}
	w := sh.waiters[pod]
	delete(sh.waiters, pod)
	delete(rp.waits.of, pod)
	if sh.nfit > 0 {
		w.w.FitFree += rp.now - w.since
	}
	if w.w.FitOK {
		w.w.Avoidable = max(w.w.Bound-w.w.FirstFit, 0)
	}
	rp.waits.done = append(rp.waits.done, w.w)
}

// waitFigures sums up what t followed; t is nil when no pod waited.
func waitFigures(in Input, t *waitTracker) WaitFigures {
	var f WaitFigures
	var lat []time.Duration
	for i, p := range in.Pods {
		if p.BoundOK && (t == nil || !t.capacity[i]) {
			lat = append(lat, max(p.Bound-p.Created, 0))
		}
	}
	slices.Sort(lat)
	f.LatencyP99NoCapacityWait = percentile(lat, 0.99)
	if t == nil {
		return f
	}
	f.Waited, f.ForCapacity = len(t.done), len(t.capacity)
	var avoidable []time.Duration
	for _, w := range t.done {
		avoidable = append(avoidable, w.Avoidable)
		if w.FitFree > WaitTolerance {
			f.WithFreeFit++
			f.Avoidable = append(f.Avoidable, w)
		}
	}
	slices.Sort(avoidable)
	if len(avoidable) > 0 {
		f.AvoidableP50, f.AvoidableP99, f.AvoidableMax = percentile(avoidable, 0.50), percentile(avoidable, 0.99), avoidable[len(avoidable)-1]
	}
	slices.SortStableFunc(f.Avoidable, func(a, b Wait) int {
		switch {
		case a.Avoidable > b.Avoidable:
			return -1
		case a.Avoidable < b.Avoidable:
			return 1
		}
		return 0
	})
	if len(f.Avoidable) > maxListedWaits {
		f.Avoidable = f.Avoidable[:maxListedWaits]
	}
	return f
}
