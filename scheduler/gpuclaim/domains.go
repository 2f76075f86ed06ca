package gpuclaim

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Topology domains as the scheduler keeps them: which nodes share a value of each topology
// level (domainIndex, fed by the node informer, so that a gang's domain choice and the packing
// of other pods read a domain's nodes without walking the fleet), and which nodes a gang holds
// inside its domain (domainHolds).

// domainIndex groups nodes by their value of each of the scheduler's topology levels.
type domainIndex struct {
	levels []string
	mu     sync.RWMutex
	// of is a node's value per level, in the order of levels ("" where the node has no label).
	of map[string][]string
	// members is, per level, the nodes of each value.
	members []map[string]map[string]struct{}
}

func newDomainIndex(levels []string) *domainIndex {
	x := &domainIndex{levels: levels, of: map[string][]string{}, members: make([]map[string]map[string]struct{}, len(levels))}
	for i := range x.members {
		x.members[i] = map[string]map[string]struct{}{}
	}
	return x
}

// handler keeps the index from node events.
func (x *domainIndex) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.set(obj) },
		UpdateFunc: func(_, obj any) { x.set(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*v1.Node); ok {
				x.remove(n.Name)
			}
		},
	}
}

func (x *domainIndex) set(obj any) {
	n, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	values := make([]string, len(x.levels))
	labelled := false
	for i, l := range x.levels {
		values[i] = n.Labels[l]
		labelled = labelled || values[i] != ""
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.of[n.Name]; ok && slices.Equal(old, values) {
		return
	}
	x.removeLocked(n.Name)
	if !labelled {
		return
	}
	x.of[n.Name] = values
	for i, v := range values {
		if v == "" {
			continue
		}
		set := x.members[i][v]
		if set == nil {
			set = map[string]struct{}{}
			x.members[i][v] = set
		}
		set[n.Name] = struct{}{}
	}
}

func (x *domainIndex) remove(node string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(node)
}

func (x *domainIndex) removeLocked(node string) {
	values, ok := x.of[node]
	if !ok {
		return
	}
	for i, v := range values {
		if set := x.members[i][v]; set != nil {
			delete(set, node)
			if len(set) == 0 {
				delete(x.members[i], v)
			}
		}
	}
	delete(x.of, node)
}

// level is the position of a level among the scheduler's, or -1.
func (x *domainIndex) level(level string) int { return slices.Index(x.levels, level) }

// value is node's value of level; false when the node has no label for it.
func (x *domainIndex) value(node, level string) (string, bool) {
	i := x.level(level)
	if i < 0 {
		return "", false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	values, ok := x.of[node]
	if !ok || values[i] == "" {
		return "", false
	}
	return values[i], true
}

// contains tells whether node is in d; every node is in the zero domain.
func (x *domainIndex) contains(d domain, node string) bool {
	if d.level == "" {
		return true
	}
	v, ok := x.value(node, d.level)
	return ok && v == d.value
}

// domains are the domains of level, by value.
func (x *domainIndex) domains(level string) []domain {
	i := x.level(level)
	if i < 0 {
		return nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]domain, 0, len(x.members[i]))
	for v := range x.members[i] {
		out = append(out, domain{level: level, value: v})
	}
	slices.SortFunc(out, func(a, b domain) int {
		switch {
		case a.value < b.value:
			return -1
		case a.value > b.value:
			return 1
		}
		return 0
	})
	return out
}

// nodes are the nodes of d, sorted.
func (x *domainIndex) nodes(d domain) []string {
	i := x.level(d.level)
	if i < 0 {
		return nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.members[i][d.value]))
	for n := range x.members[i][d.value] {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// empty tells whether no node has any of the levels' labels: the fleet has no domains.
func (x *domainIndex) empty() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.of) == 0
}

// domainHolds are the nodes gangs hold inside their domain, which other pods keep off:
//
//   - placing: a gang whose first members are placed holds the nodes the rest are planned on
//     (ledger.GangPlan), so that the pods scheduled between its members cannot take the room
//     the domain was chosen for;
//   - draining: a Required gang that no domain has room for holds the domain nearest to
//     fitting it, so that what frees there stays free until the gang fits (otherwise a gang as
//     large as a domain waits for ever behind small pods that keep every domain partly busy).
//     One gang drains per level at a time, the first to ask: every domain held at once would
//     turn every other pod away.
//
// A hold lasts until the gang is placed, lets go or loses its claims, and at most
// domainHoldTTL after the gang last renewed it, so that a hold nobody renews does not keep
// nodes idle for ever.
type domainHolds struct {
	clock clock.PassiveClock
	// count is len(by), read without the lock: Filter and the candidate scan ask about every
	// node of every pod, and a fleet where no gang holds anything should not take a lock each.
	count atomic.Int32
	mu    sync.Mutex
	by    map[string]*domainHold // by gang key
	node  map[string]string      // node -> the gang holding it
}

// domainHoldTTL is how long a hold outlives its gang's last attempt. A waiting gang's pods
// come back whenever GPUs are freed where they fit, and at the latest when kube-scheduler
// flushes its unschedulable pods (podMaxInUnschedulablePodsDuration, 5 minutes by default).
const domainHoldTTL = 5 * time.Minute

type domainHold struct {
	d        domain
	nodes    []string
	draining bool
	renewed  time.Time
}

func newDomainHolds(clk clock.PassiveClock) *domainHolds {
	return &domainHolds{clock: clk, by: map[string]*domainHold{}, node: map[string]string{}}
}

// set makes gang hold nodes of d, replacing what it held before.
func (h *domainHolds) set(gang string, d domain, nodes []string, draining bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked(gang)
	hold := &domainHold{d: d, nodes: slices.Compact(slices.Sorted(slices.Values(nodes))), draining: draining, renewed: h.clock.Now()}
	h.by[gang] = hold
	h.count.Store(int32(len(h.by)))
	for _, n := range hold.nodes {
		h.node[n] = gang
	}
}

// release drops what gang holds.
func (h *domainHolds) release(gang string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked(gang)
}

func (h *domainHolds) releaseLocked(gang string) {
	old, ok := h.by[gang]
	if !ok {
		return
	}
	for _, n := range old.nodes {
		if h.node[n] == gang {
			delete(h.node, n)
		}
	}
	delete(h.by, gang)
	h.count.Store(int32(len(h.by)))
}

// expiredLocked drops gang's hold if it is past its ttl, and tells whether it did.
func (h *domainHolds) expiredLocked(gang string) bool {
	hold, ok := h.by[gang]
	if !ok {
		return true
	}
	if h.clock.Since(hold.renewed) > domainHoldTTL {
		h.releaseLocked(gang)
		return true
	}
	return false
}

// holder is the gang holding node other than gang (the asking pod's own, "" outside a gang),
// or "".
func (h *domainHolds) holder(node, gang string) string {
	if h.count.Load() == 0 {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.node[node]
	if !ok || g == gang || h.expiredLocked(g) {
		return ""
	}
	return g
}

// draining is the gang draining a domain of level other than gang, or "".
func (h *domainHolds) draining(level, gang string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for g, hold := range h.by {
		if g != gang && hold.draining && hold.d.level == level && !h.expiredLocked(g) {
			return g
		}
	}
	return ""
}

// any tells whether some gang holds nodes.
func (h *domainHolds) any() bool { return h.count.Load() > 0 }

// held is the domain gang holds and whether it drains it.
func (h *domainHolds) held(gang string) (domain, bool, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.expiredLocked(gang) {
		return domain{}, false, false
	}
	hold := h.by[gang]
	return hold.d, hold.draining, true
}
