package metrics

import (
	"sort"
	"time"
)

// Domain figures: for the gangs whose claims state gangTopology, whether each was placed inside
// one domain of its level (the nodes sharing one value of that node label, e.g.
// nvidia.com/gpu.clique: one NVLink domain), whether it could have been, how long it took, and
// how many whole free nodes ("trays") sat in domains that no waiting gang could use.
//
// The replay here counts GPUs, not IDs: a node's free GPUs are its GPUs less those of the pods
// bound to it and not yet ended, as the recorder saw the bindings and ends.

// DomainFigures are the gang-topology figures of one run; nil without such gangs.
type DomainFigures struct {
	// Level is the gangs' topology level (the first one stated, when they differ).
	Level string `json:"level"`
	// Gangs states gangTopology; Placed had every member bound; InOneDomain of those had every
	// member on a node of one domain of the level (a node without the label is in none).
	Gangs       int     `json:"gangs"`
	Placed      int     `json:"placed"`
	InOneDomain int     `json:"inOneDomain"`
	InOneRatio  float64 `json:"inOneDomainRatio"`
	// FitOnArrival: placed gangs for which, when their first member was created, one domain
	// had room for every member at once (by the replay); FitInOne of them were placed inside
	// one domain, FitSplit across domains.
	FitOnArrival int     `json:"fitOnArrival"`
	FitInOne     int     `json:"fitInOne"`
	FitSplit     int     `json:"fitSplit"`
	FitInOneRate float64 `json:"fitInOneRatio"`
	// RequiredSplit: placed gangs with mode Required whose members span domains.
	RequiredSplit int `json:"requiredSplit"`
	// PlaceP50 and PlaceP99: over placed gangs, the first member's creation to the last
	// member's binding.
	PlaceP50 time.Duration `json:"placeP50"`
	PlaceP99 time.Duration `json:"placeP99"`
	// Stranded trays, sampled every StrandedEvery: a tray is a node of some domain with all its
	// GPUs free; it is stranded at a moment when some gang waits (arrived, not every member
	// bound) and no waiting gang's unbound members fit at once in the tray's domain.
	// StrandedMean is the mean over the samples at which some gang waited, StrandedMax the
	// most at one sample, WaitingSamples how many samples had a waiting gang.
	StrandedMean   float64 `json:"strandedTraysMean"`
	StrandedMax    int     `json:"strandedTraysMax"`
	WaitingSamples int     `json:"waitingSamples"`
}

// StrandedEvery spaces the stranded-tray samples.
const StrandedEvery = time.Second

type domainGang struct {
	members []int // pod indexes
	arrival time.Duration
	placed  bool
	placeAt time.Duration
}

// ComputeDomains derives the domain figures of in, or nil when no gang states gangTopology.
func ComputeDomains(in Input) *DomainFigures {
	var level string
	gangs := map[string]*domainGang{}
	var names []string
	for i, p := range in.Pods {
		if p.Gang == "" || p.GangLevel == "" {
			continue
		}
		if level == "" {
			level = p.GangLevel
		}
		g := gangs[p.Gang]
		if g == nil {
			g = &domainGang{arrival: p.Created, placed: true}
			gangs[p.Gang] = g
			names = append(names, p.Gang)
		}
		g.members = append(g.members, i)
		g.arrival = min(g.arrival, p.Created)
		if !p.BoundOK {
			g.placed = false
		} else {
			g.placeAt = max(g.placeAt, p.Bound)
		}
	}
	if level == "" {
		return nil
	}
	f := &DomainFigures{Level: level, Gangs: len(gangs)}
	nodes := map[string]*Node{}
	for i := range in.Nodes {
		nodes[in.Nodes[i].Name] = &in.Nodes[i]
	}
	st := newGPUCount(in)
	var places []time.Duration
	// Arrival order, so that the replay only moves forward.
	sort.Slice(names, func(i, j int) bool {
		a, b := gangs[names[i]], gangs[names[j]]
		return a.arrival < b.arrival || a.arrival == b.arrival && names[i] < names[j]
	})
	for _, name := range names {
		g := gangs[name]
		if !g.placed {
			continue
		}
		f.Placed++
		places = append(places, g.placeAt-g.arrival)
		values := map[string]bool{}
		inOne := true
		for _, i := range g.members {
			n := nodes[in.Pods[i].Node]
			v, ok := "", false
			if n != nil {
				v, ok = n.Labels[level]
			}
			if !ok {
				inOne = false
			}
			values[v] = true
		}
		inOne = inOne && len(values) == 1
		if inOne {
			f.InOneDomain++
		} else if in.Pods[g.members[0]].GangMode == "Required" {
			f.RequiredSplit++
		}
		st.advance(g.arrival)
		if st.fitsSomeDomain(level, g.members) {
			f.FitOnArrival++
			if inOne {
				f.FitInOne++
			} else {
				f.FitSplit++
			}
		}
	}
	if f.Placed > 0 {
		f.InOneRatio = float64(f.InOneDomain) / float64(f.Placed)
		sort.Slice(places, func(i, j int) bool { return places[i] < places[j] })
		f.PlaceP50, f.PlaceP99 = percentile(places, 0.50), percentile(places, 0.99)
	}
	if f.FitOnArrival > 0 {
		f.FitInOneRate = float64(f.FitInOne) / float64(f.FitOnArrival)
	}
	strandedFigures(in, level, gangs, f)
	return f
}

// strandedFigures samples the stranded trays every StrandedEvery up to in.End.
func strandedFigures(in Input, level string, gangs map[string]*domainGang, f *DomainFigures) {
	st := newGPUCount(in)
	sum := 0
	for t := time.Duration(0); t <= in.End; t += StrandedEvery {
		st.advance(t)
		var waiting [][]int
		for _, g := range gangs {
			if g.arrival > t {
				continue
			}
			var unbound []int
			for _, i := range g.members {
				if p := in.Pods[i]; !p.BoundOK || p.Bound > t {
					unbound = append(unbound, i)
				}
			}
			if len(unbound) > 0 {
				waiting = append(waiting, unbound)
			}
		}
		if len(waiting) == 0 {
			continue
		}
		f.WaitingSamples++
		stranded := 0
		for _, d := range st.domains(level) {
			free := 0
			for _, n := range d {
				if st.free[n.Name] == len(n.Islands) {
					free++
				}
			}
			if free == 0 {
				continue
			}
			usable := false
			for _, w := range waiting {
				if st.fits(d, w) {
					usable = true
					break
				}
			}
			if !usable {
				stranded += free
			}
		}
		sum += stranded
		f.StrandedMax = max(f.StrandedMax, stranded)
	}
	if f.WaitingSamples > 0 {
		f.StrandedMean = float64(sum) / float64(f.WaitingSamples)
	}
}

// gpuCount replays the bindings and ends of in as free GPUs per node, forward in time.
type gpuCount struct {
	in     Input
	free   map[string]int
	events []gpuEvent
	next   int
}

type gpuEvent struct {
	at    time.Duration
	node  string
	delta int
}

func newGPUCount(in Input) *gpuCount {
	c := &gpuCount{in: in, free: map[string]int{}}
	for _, n := range in.Nodes {
		c.free[n.Name] = len(n.Islands)
	}
	for _, p := range in.Pods {
		if !p.BoundOK || p.Node == "" {
			continue
		}
		c.events = append(c.events, gpuEvent{at: p.Bound, node: p.Node, delta: -p.GPUs})
		if p.EndedOK {
			c.events = append(c.events, gpuEvent{at: max(p.Ended, p.Bound), node: p.Node, delta: p.GPUs})
		}
	}
	// Releases before bindings at the same moment.
	sort.SliceStable(c.events, func(i, j int) bool {
		a, b := c.events[i], c.events[j]
		return a.at < b.at || a.at == b.at && a.delta > b.delta
	})
	return c
}

// advance applies every event at or before t.
func (c *gpuCount) advance(t time.Duration) {
	for c.next < len(c.events) && c.events[c.next].at <= t {
		e := c.events[c.next]
		c.free[e.node] += e.delta
		c.next++
	}
}

// domains groups the nodes that carry level by its value, in a stable order.
func (c *gpuCount) domains(level string) [][]*Node {
	by := map[string][]*Node{}
	var values []string
	for i := range c.in.Nodes {
		n := &c.in.Nodes[i]
		v, ok := n.Labels[level]
		if !ok {
			continue
		}
		if by[v] == nil {
			values = append(values, v)
		}
		by[v] = append(by[v], n)
	}
	sort.Strings(values)
	out := make([][]*Node, len(values))
	for i, v := range values {
		out[i] = by[v]
	}
	return out
}

// fitsSomeDomain tells whether the pods (indexes) fit at once in one domain of level now.
func (c *gpuCount) fitsSomeDomain(level string, pods []int) bool {
	for _, d := range c.domains(level) {
		if c.fits(d, pods) {
			return true
		}
	}
	return false
}

// fits tells whether the pods fit at once on the free GPUs of the nodes d, each pod on one node
// its selector matches: first fit, largest pod first, which is exact when the pods are alike
// (a gang's members are).
func (c *gpuCount) fits(d []*Node, pods []int) bool {
	free := make([]int, len(d))
	for i, n := range d {
		free[i] = c.free[n.Name]
	}
	order := append([]int(nil), pods...)
	sort.SliceStable(order, func(i, j int) bool { return c.in.Pods[order[i]].GPUs > c.in.Pods[order[j]].GPUs })
	for _, pi := range order {
		p := c.in.Pods[pi]
		placed := false
		for i, n := range d {
			if free[i] >= p.GPUs && matches(p.Selector, n.Labels) {
				free[i] -= p.GPUs
				placed = true
				break
			}
		}
		if !placed {
			return false
		}
	}
	return true
}

// matches tells whether labels satisfy selector.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
