package ledger

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Source says why the plugin believes a pod holds a GPU. A hold lives while any source does.
type Source uint8

const (
	// FromReservation: this scheduler reserved the GPU in the scheduling cycle.
	FromReservation Source = 1 << iota
	// FromLease: a Lease gpu-{node}-{id} names the pod (ours or another scheduler's).
	FromLease
	// FromPod: a live pod carries the allocation annotation.
	FromPod
)

type hold struct {
	sources Source
	shared  bool
	// share is what a Shared holder reserves of the GPU (zero: stated none, or not known
	// from any source yet).
	share allocator.Resolved
}

// gpuRef names what a pod holds: GPU id of node whole, or (mig > 0) its MIG device at slot
// mig-1.
type gpuRef struct {
	node string
	id   int
	mig  int
}

// migRef is the gpuRef of MIG device m of node.
func migRef(node string, m allocator.MIGSlot) gpuRef {
	return gpuRef{node: node, id: m.GPU, mig: m.Slot + 1}
}

// nodeEntry is what the plugin knows of one node's GPUs.
type nodeEntry struct {
	// base is the hardware as the agent reports it, without holders; nil until a
	// GpuNodeStatus is seen.
	base *allocator.Node
	// heartbeat is the newest sign of life of the node's agent: the later of its status's
	// LastHeartbeatTime (statusBeat) and its liveness Lease's renewTime (renewed). The agent
	// renews the lease every few minutes and rewrites an unchanged status only every 30, so
	// either alone would call live nodes stale (docs/node.md).
	heartbeat, statusBeat, renewed time.Time
	// models maps GPU ID -> product name, for the gpu_scheduler_gpus gauge only.
	models map[int]string
	// mig maps the ID of a GPU in MIG mode -> its MIG devices, for the
	// gpu_scheduler_mig_devices gauge only.
	mig map[int][]migDevice
	// holds maps GPU ID -> pod UID -> hold.
	holds map[int]map[types.UID]*hold
	// migHolds maps a MIG device -> pod UID -> the sources of its hold. A MIG device is held
	// by one pod; a second holder seen (two schedulers' leases racing) keeps it held as well.
	migHolds map[allocator.MIGSlot]map[types.UID]Source
	// sum is recomputed on every change of base or holds, so that PreFilter can scan
	// thousands of nodes without building an allocator view of each.
	sum nodeSummary
	// view is base with every hold applied, rebuilt with sum. Filter and Score read it for
	// hundreds of nodes per pod, so it is shared, never copied per call: read-only.
	view *allocator.Node
	// gen counts the changes of view. placements caches the allocator's answer per request
	// shape for view generation placementsGen: a burst of pods asks the same few shapes of
	// thousands of nodes, and between two pods only the node the first one took changes.
	// Filter calls run in parallel under the ledger's read lock, hence the cache's own lock.
	gen           uint64
	placementsMu  sync.Mutex
	placementsGen uint64
	placements    map[string]placement
	// shape is the key of the ledger's shape group this node is in (shapeKey of sum); empty
	// while it has no GpuNodeStatus.
	shape string
}

// placement is a cached answer of allocator.Allocate.
type placement struct {
	res allocator.Result
	err error
}

// maxPlacementShapes bounds the cache per node: beyond it (claims with many different
// preferIds, say) the cache starts over rather than grow.
const maxPlacementShapes = 32

// islandSummary lists the bandwidths of an island's GPUs that an Exclusive request (free) or a
// Shared request (shareable) could take, and the lowest of each list (-1 when empty), so that
// a request without a bandwidth floor above it is judged without walking the lists.
type islandSummary struct {
	free, shareable       []int
	minFree, minShareable int
	// rooms are the shareable GPUs' capacities and reserved shares, in the order of
	// shareable, so that a Shared request with a share or a sharer bound is judged by its caps
	// exactly as the allocator judges it.
	rooms []allocator.GPU
}

type nodeSummary struct {
	islands []islandSummary
	// mig counts the free, healthy MIG devices by profile (nil when none).
	mig map[string]int
}

// recompute refreshes e.sum and e.view from e.base and e.holds.
func (e *nodeEntry) recompute() {
	e.sum.islands = e.sum.islands[:0]
	e.sum.mig = nil
	e.view = nil
	e.gen++
	if e.base == nil {
		return
	}
	e.view = e.applyHolds("")
	e.sum.mig = allocator.FreeMIG(e.view)
	idx := map[string]int{}
	for i := range e.base.GPUs {
		g := &e.base.GPUs[i]
		key := g.Island
		if key == "" {
			key = "\x00" + strconv.Itoa(g.ID)
		}
		j, ok := idx[key]
		if !ok {
			j = len(e.sum.islands)
			idx[key] = j
			e.sum.islands = append(e.sum.islands, islandSummary{})
		}
		if g.Health != allocator.Healthy || g.MIGMode {
			continue
		}
		exclusive, shared := false, false
		for _, h := range e.holds[g.ID] {
			if h.shared {
				shared = true
			} else {
				exclusive = true
			}
		}
		if exclusive {
			continue
		}
		is := &e.sum.islands[j]
		is.shareable = append(is.shareable, g.BandwidthGBps)
		v, _ := e.view.GPU(g.ID)
		is.rooms = append(is.rooms, allocator.GPU{ID: g.ID, MemoryMiB: g.MemoryMiB, SharedHolders: v.SharedHolders, SharedMemoryMiB: v.SharedMemoryMiB, SharedComputePercent: v.SharedComputePercent})
		if !shared {
			is.free = append(is.free, g.BandwidthGBps)
		}
	}
	for i := range e.sum.islands {
		is := &e.sum.islands[i]
		is.minFree, is.minShareable = minOf(is.free), minOf(is.shareable)
	}
}

// underCaps is the bandwidths of the island's shareable GPUs that req's share and sharer bound
// fit (allocator.ShareCap), and the lowest of them.
func (is *islandSummary) underCaps(req *allocator.Request) ([]int, int) {
	var out []int
	for k := range is.rooms {
		if cause, _ := allocator.ShareCap(&is.rooms[k], req.Share, req.MaxSharers); cause == "" {
			out = append(out, is.shareable[k])
		}
	}
	return out, minOf(out)
}

func minOf(xs []int) int {
	if len(xs) == 0 {
		return -1
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

// applyHolds returns a copy of base with the holds of every pod but self applied.
func (e *nodeEntry) applyHolds(self types.UID) *allocator.Node {
	return e.applyHoldsExcept(func(uid types.UID) bool { return uid == self && self != "" })
}

// applyHoldsExcept returns a copy of base with the holds of every pod but those skip names.
func (e *nodeEntry) applyHoldsExcept(skip func(types.UID) bool) *allocator.Node {
	n := e.base.Clone()
	for i := range n.GPUs {
		g := &n.GPUs[i]
		for uid, h := range e.holds[g.ID] {
			if skip(uid) {
				continue
			}
			if h.shared {
				g.SharedHolders++
				g.SharedMemoryMiB += h.share.MemoryMiB
				g.SharedComputePercent += h.share.ComputePercent
			} else {
				g.ExclusiveHolder = string(uid)
			}
		}
		for k := range g.MIG {
			d := &g.MIG[k]
			for uid := range e.migHolds[allocator.MIGSlot{GPU: g.ID, Slot: d.Slot}] {
				if !skip(uid) {
					d.Holder = string(uid)
				}
			}
		}
	}
	return n
}

// Fit is how well a node can serve a request, judged from its summary alone.
type Fit uint8

const (
	FitNone Fit = iota
	// FitNode: enough eligible GPUs, but no single island holds them.
	FitNode
	// FitIsland: one island holds enough eligible GPUs.
	FitIsland
	// FitIslandBandwidth: one island holds enough eligible GPUs at the bandwidth asked for.
	FitIslandBandwidth
)

// fits judges a node for a request. It agrees with allocator.Allocate on whether the node can
// serve the request at all; the tiers above FitNode only say how well.
func (s *nodeSummary) fits(req *allocator.Request) Fit {
	f, _ := s.fitsWithFree(req)
	return f
}

// room is how much a node would have left around a request: the GPUs of the tightest island
// that can hold it (of the node when none can), and of the whole node; PreFilter offers the
// tightest fits first (PickCandidates).
type room struct {
	island, node int
}

// fitsWithFree is fits, and the node's room for the request: the GPUs it could take at all
// (free, or shareable for a Shared request, at any bandwidth) in the tightest island that holds
// the request at the fit found, and on the whole node.
func (s *nodeSummary) fitsWithFree(req *allocator.Request) (Fit, room) {
	if req.Exclusivity == allocator.MIG {
		// MIG devices have no islands: a node fits at the top tier or not at all, and its
		// room is its free devices of the profile, then of all profiles.
		free := s.mig[req.MIGProfile]
		if free < req.Count {
			return FitNone, room{}
		}
		all := 0
		for _, n := range s.mig {
			all += n
		}
		return FitIslandBandwidth, room{free, all}
	}
	total, best, bestBW, all := 0, 0, 0, 0
	tight, tightBW := -1, -1 // GPUs of the smallest island that holds the request (at the bandwidth)
	for i := range s.islands {
		bws, lowest := s.islands[i].free, s.islands[i].minFree
		if req.Exclusivity == allocator.Shared {
			bws, lowest = s.islands[i].shareable, s.islands[i].minShareable
			if req.Share != (allocator.Share{}) || req.MaxSharers > 0 {
				bws, lowest = s.islands[i].underCaps(req)
			}
		}
		n, atBW := len(bws), len(bws)
		if lowest < req.MinBandwidthGBps {
			atBW = 0
			for _, bw := range bws {
				if bw >= req.MinBandwidthGBps {
					atBW++
				}
			}
		}
		all += n
		if atBW >= req.Count && (tightBW < 0 || len(bws) < tightBW) {
			tightBW = len(bws)
		}
		if req.Topology == allocator.Required {
			n = atBW
		}
		if n >= req.Count && (tight < 0 || len(bws) < tight) {
			tight = len(bws)
		}
		total += n
		best = max(best, n)
		bestBW = max(bestBW, atBW)
	}
	switch {
	case req.Topology == allocator.Required:
		if best >= req.Count {
			return FitIslandBandwidth, room{tightBW, all}
		}
		return FitNone, room{}
	case total < req.Count:
		return FitNone, room{}
	case bestBW >= req.Count:
		return FitIslandBandwidth, room{tightBW, all}
	case best >= req.Count:
		return FitIsland, room{tight, all}
	default:
		return FitNode, room{all, all}
	}
}

// Ledger is the plugin's in-memory view: the agents' GpuNodeStatus per node plus a ledger of
// who holds which GPU. Reserve writes it without any API call, so the scheduling cycle never
// waits on the API server; leases observed from every scheduler keep it true across processes.
type Ledger struct {
	// now is the clock that signs of life are clamped to (seen).
	now   func() time.Time
	mu    sync.RWMutex
	nodes map[string]*nodeEntry
	// byPod finds a pod's holds for release.
	byPod map[types.UID]map[gpuRef]bool
	// claims maps "namespace/name" of a claim to the UID of the pod this scheduler has
	// reserved it for, until the claim's status records the holder.
	claims map[string]types.UID
	// claimOf is the reverse of claims, so that forgetting a pod does not scan every claim.
	claimOf map[types.UID]string
	// shapes groups the nodes whose summaries are alike (the same islands with the same free
	// and shareable GPUs at the same bandwidths), so that PreFilter judges each shape once per
	// pod instead of every node: 5,000 nodes of two kinds of hardware make a few dozen shapes.
	shapes map[string]*shapeGroup
}

// shapeGroup is the nodes of one summary shape, with a copy of that summary.
type shapeGroup struct {
	sum   nodeSummary
	nodes map[string]*nodeEntry
}

// shapeKey identifies a summary's shape: the islands' free and shareable bandwidths, each
// island's lists and the islands themselves in a canonical order.
func (s *nodeSummary) shapeKey() string {
	islands := make([]string, len(s.islands))
	for i, is := range s.islands {
		f, sh := slices.Clone(is.free), slices.Clone(is.shareable)
		slices.Sort(f)
		slices.Sort(sh)
		islands[i] = fmt.Sprint(f, sh)
		if len(is.rooms) > 0 {
			// Shared GPUs with different reserved shares fit different requests.
			rooms := make([]string, len(is.rooms))
			for k, r := range is.rooms {
				rooms[k] = fmt.Sprintf("%d/%d/%d/%d/%d", is.shareable[k], r.MemoryMiB, r.SharedMemoryMiB, r.SharedComputePercent, r.SharedHolders)
			}
			slices.Sort(rooms)
			islands[i] += fmt.Sprint(rooms)
		}
	}
	slices.Sort(islands)
	key := strings.Join(islands, "|")
	if len(s.mig) > 0 {
		key += "|mig" + allocator.FormatProfileCounts(s.mig)
	}
	return key
}

// clone copies a summary (recompute reuses the entry's own).
func (s *nodeSummary) clone() nodeSummary {
	out := nodeSummary{islands: make([]islandSummary, len(s.islands)), mig: maps.Clone(s.mig)}
	for i, is := range s.islands {
		out.islands[i] = islandSummary{free: slices.Clone(is.free), shareable: slices.Clone(is.shareable), minFree: is.minFree, minShareable: is.minShareable, rooms: slices.Clone(is.rooms)}
	}
	return out
}

// reshape moves node's entry to the shape group of its summary, after a recompute; an entry
// without a GpuNodeStatus is in none.
func (c *Ledger) reshape(node string, e *nodeEntry) {
	key := ""
	if e.base != nil {
		key = "\x00" + e.sum.shapeKey() // never empty, even for a node without GPUs
	}
	if key == e.shape {
		return
	}
	if g := c.shapes[e.shape]; g != nil {
		delete(g.nodes, node)
		if len(g.nodes) == 0 {
			delete(c.shapes, e.shape)
		}
	}
	e.shape = key
	if key == "" {
		return
	}
	g := c.shapes[key]
	if g == nil {
		g = &shapeGroup{sum: e.sum.clone(), nodes: map[string]*nodeEntry{}}
		c.shapes[key] = g
	}
	g.nodes[node] = e
}

func New() *Ledger {
	return &Ledger{
		now:     time.Now,
		nodes:   map[string]*nodeEntry{},
		byPod:   map[types.UID]map[gpuRef]bool{},
		claims:  map[string]types.UID{},
		claimOf: map[types.UID]string{},
		shapes:  map[string]*shapeGroup{},
	}
}

func (c *Ledger) entry(node string) *nodeEntry {
	e := c.nodes[node]
	if e == nil {
		e = &nodeEntry{holds: map[int]map[types.UID]*hold{}, migHolds: map[allocator.MIGSlot]map[types.UID]Source{}}
		c.nodes[node] = e
	}
	return e
}

// SetStatus records the hardware of a node from its GpuNodeStatus. It returns the node's
// heartbeat (nodeEntry.heartbeat) before and after. A status that does not describe the node it
// is named after (StatusNode) must not reach it: the caller checks.
func (c *Ledger) SetStatus(gns *apiv1.GpuNodeStatus) (before, after time.Time) {
	n := NodeFromStatus(gns)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(nodeNameOf(gns))
	before = e.heartbeat
	if e.base == nil {
		before = time.Time{} // a node without a status was never fresh
	}
	e.base = n
	e.statusBeat = c.seen(gns.Status.LastHeartbeatTime.Time)
	e.beat()
	e.models = make(map[int]string, len(gns.Status.Devices))
	for _, d := range gns.Status.Devices {
		if d.Product != "" {
			e.models[int(d.ID)] = d.Product
		}
	}
	e.setMIG(gns)
	e.recompute()
	c.reshape(nodeNameOf(gns), e)
	return before, e.heartbeat
}

// beat recomputes the entry's heartbeat from its two signs of life.
func (e *nodeEntry) beat() {
	e.heartbeat = e.statusBeat
	if e.renewed.After(e.heartbeat) {
		e.heartbeat = e.renewed
	}
}

// DeleteStatus forgets a node's hardware; its holds stay until their pods go, its liveness
// renewals until its lease goes.
func (c *Ledger) DeleteStatus(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.nodes[node]; e != nil {
		e.base = nil
		e.mig = nil
		e.statusBeat = time.Time{}
		e.beat()
		e.recompute()
		c.reshape(node, e)
		c.dropIfEmpty(node, e)
	}
}

// dropIfEmpty forgets an entry that holds nothing any more.
func (c *Ledger) dropIfEmpty(node string, e *nodeEntry) {
	if e.base == nil && len(e.holds) == 0 && len(e.migHolds) == 0 && e.renewed.IsZero() {
		delete(c.nodes, node)
	}
}

// SetRenewed records when node's agent last renewed its liveness Lease (zero: the lease went).
// It returns the node's heartbeat before and after; both are zero while the node has no
// GpuNodeStatus, which alone makes it schedulable.
func (c *Ledger) SetRenewed(node string, renewed time.Time) (before, after time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.nodes[node]
	if e == nil {
		if renewed.IsZero() {
			return time.Time{}, time.Time{}
		}
		e = c.entry(node)
	}
	before = e.heartbeat
	e.renewed = c.seen(renewed)
	e.beat()
	after = e.heartbeat
	c.dropIfEmpty(node, e)
	if e.base == nil {
		return time.Time{}, time.Time{}
	}
	return before, after
}

// seen clamps a sign of life to the time it is observed: a heartbeat or renewal stamped in the
// future (a skewed clock, or an agent keeping a dead node alive) counts as now, so a node whose
// updates stop is stale one freshness window later, whatever its last stamp said.
func (c *Ledger) seen(t time.Time) time.Time {
	if now := c.now(); t.After(now) {
		return now
	}
	return t
}

// nodeNameOf is the node a GpuNodeStatus describes: its own name (StatusNode checks that
// spec.nodeName, when set, agrees).
func nodeNameOf(gns *apiv1.GpuNodeStatus) string { return gns.Name }

// StatusNode checks that a GpuNodeStatus describes the node it is named after, and returns a
// reason when it does not. The agents' admission policy binds each agent to the status named
// after its own node; a status whose spec.nodeName names another node would let one node's
// agent rewrite another node's GPUs, so the scheduler ignores it.
// A node whose name cannot label its GPU leases (apiv1.CheckNodeName) is ignored too: its GPUs
// could never be locked.
func StatusNode(gns *apiv1.GpuNodeStatus) (string, error) {
	if gns.Spec.NodeName != "" && gns.Spec.NodeName != gns.Name {
		return "", fmt.Errorf("GpuNodeStatus %s has spec.nodeName %q: a status must be named after its node, so it is ignored", gns.Name, gns.Spec.NodeName)
	}
	if err := apiv1.CheckNodeName(gns.Name); err != nil {
		return "", fmt.Errorf("GpuNodeStatus of node %s is ignored: %w", gns.Name, err)
	}
	return gns.Name, nil
}

// NodeFromStatus converts the agent's report into the allocator's model. Devices with
// duplicate IDs or IDs outside 0-apiv1.MaxGPUID are dropped (the first wins) so that bad data
// (a status written before the CRD schema bounded it) cannot confuse the allocator or cost every
// placement a walk over thousands of GPUs; they are simply never offered.
func NodeFromStatus(gns *apiv1.GpuNodeStatus) *allocator.Node {
	n := &allocator.Node{Name: nodeNameOf(gns), GPUs: make([]allocator.GPU, 0, min(len(gns.Status.Devices), apiv1.MaxGPUsPerNode))}
	seen := map[int32]bool{}
	for _, d := range gns.Status.Devices {
		if d.ID < 0 || d.ID > apiv1.MaxGPUID || seen[d.ID] {
			continue
		}
		seen[d.ID] = true
		g := allocator.GPU{
			ID:                 int(d.ID),
			Island:             d.Island,
			BandwidthGBps:      int(d.BandwidthGBps),
			UtilizationPercent: -1,
			MemoryMiB:          max(0, d.MemoryMiB),
			MIGMode:            d.MIG != nil && d.MIG.Enabled,
		}
		if g.MIGMode {
			g.MIG = migDevicesOf(d.MIG)
		}
		switch d.Health {
		case apiv1.Healthy:
			g.Health = allocator.Healthy
		case apiv1.Unhealthy:
			g.Health = allocator.Unhealthy
		default:
			g.Health = allocator.Unknown
		}
		if d.UtilizationPercent != nil {
			g.UtilizationPercent = int(max(0, min(100, *d.UtilizationPercent)))
		}
		if d.MemoryUsedMiB != nil && d.MemoryMiB > 0 {
			used := float64(*d.MemoryUsedMiB) / float64(d.MemoryMiB)
			g.MemoryUsedPercent = int(max(0, min(100, 100*used)))
		}
		n.GPUs = append(n.GPUs, g)
	}
	n.SortGPUs()
	return n
}

// migDevicesOf converts a GPU's MIG devices, sorted by slot; a slot out of range or seen
// before is dropped (the first wins), as is a device without a profile: it serves no request.
func migDevicesOf(m *apiv1.DeviceMIG) []allocator.MIGDevice {
	out := make([]allocator.MIGDevice, 0, len(m.Devices))
	seen := map[int32]bool{}
	for _, d := range m.Devices {
		if d.Slot < 0 || d.Slot > apiv1.MaxMIGSlot || seen[d.Slot] || d.Profile == "" || len(out) == apiv1.MaxMIGDevicesPerGPU {
			continue
		}
		seen[d.Slot] = true
		out = append(out, allocator.MIGDevice{Slot: int(d.Slot), Profile: d.Profile, Health: healthOf(d.Health)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}

// healthOf converts a reported health; anything but Healthy or Unhealthy is Unknown.
func healthOf(h apiv1.Health) allocator.Health {
	switch h {
	case apiv1.Healthy:
		return allocator.Healthy
	case apiv1.Unhealthy:
		return allocator.Unhealthy
	default:
		return allocator.Unknown
	}
}

// snapshot returns the allocator's view of a node with every hold applied, or nil when no
// GpuNodeStatus has been seen for it. The view is shared: callers must not change it.
func (c *Ledger) NodeView(node string) (*allocator.Node, time.Time) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.snapshotLocked(node)
}

func (c *Ledger) snapshotLocked(node string) (*allocator.Node, time.Time) {
	return c.snapshotExcept(node, "")
}

func (c *Ledger) snapshotExcept(node string, self types.UID) (*allocator.Node, time.Time) {
	e := c.nodes[node]
	if e == nil || e.base == nil {
		return nil, time.Time{}
	}
	if self != "" && e.holdsPod(self) {
		return e.applyHolds(self), e.heartbeat // rare: the pod's own leftover holds
	}
	return e.view, e.heartbeat
}

// NodeViewWithout is the node as if the pods in skip held none of its GPUs.
func (c *Ledger) NodeViewWithout(node string, skip []types.UID) (*allocator.Node, time.Time) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.nodes[node]
	if e == nil || e.base == nil {
		return nil, time.Time{}
	}
	return e.applyHoldsExcept(func(uid types.UID) bool { return slices.Contains(skip, uid) }), e.heartbeat
}

// Place returns where req would land on node for pod self, from the cache when the node has
// not changed since the same request shape (key, see RequestKey) was last placed there. ok is
// false when no GpuNodeStatus has been seen for the node.
func (c *Ledger) Place(node string, self types.UID, key string, req allocator.Request) (res allocator.Result, heartbeat time.Time, err error, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.nodes[node]
	if e == nil || e.base == nil {
		return allocator.Result{}, time.Time{}, nil, false
	}
	if self != "" && e.holdsPod(self) {
		// Rare: the pod's own leftover holds are offered to it again; not cached.
		res, err = allocator.Allocate(e.applyHolds(self), req)
		return res, e.heartbeat, err, true
	}
	e.placementsMu.Lock()
	defer e.placementsMu.Unlock()
	if e.placementsGen != e.gen || e.placements == nil || len(e.placements) >= maxPlacementShapes {
		e.placements, e.placementsGen = make(map[string]placement, 4), e.gen
	}
	if p, hit := e.placements[key]; hit {
		return p.res, e.heartbeat, p.err, true
	}
	res, err = allocator.Allocate(e.view, req)
	e.placements[key] = placement{res, err}
	return res, e.heartbeat, err, true
}

// holdsPod tells whether pod uid holds any GPU of the node.
func (e *nodeEntry) holdsPod(uid types.UID) bool {
	for _, holders := range e.holds {
		if _, ok := holders[uid]; ok {
			return true
		}
	}
	for _, holders := range e.migHolds {
		if _, ok := holders[uid]; ok {
			return true
		}
	}
	return false
}

// RequestKey identifies a request's shape: requests with the same key get the same placement
// on the same node view.
func RequestKey(r *allocator.Request) string {
	return fmt.Sprintf("%d/%d/%d/%d/%d/%v/%v/%v/%d/%s", r.Count, r.Policy, r.Exclusivity, r.Topology, r.MinBandwidthGBps, r.PreferIDs, r.Pinned, r.Share, r.MaxSharers, r.MIGProfile)
}

// Candidate is a node that can serve a request, and its room for it.
type Candidate struct {
	Name string
	room room
}

// CandidatesByFit are candidates by fit tier.
type CandidatesByFit = [FitIslandBandwidth + 1][]Candidate

// candidateBufs recycles candidates' lists: a burst scans thousands of nodes for every pod, and
// growing fresh lists each time made ~600 KB of garbage per pod at 5,000 nodes.
var candidateBufs = sync.Pool{New: func() any { return new(CandidatesByFit) }}

// Candidates groups the nodes with a GpuNodeStatus fresher than oldest by how well they fit
// req; keep filters nodes (selector). It judges each shape group's summary once, and counts as
// stale the nodes that would fit but whose status is older than oldest. The lists are
// recycled: the caller hands them back with ReleaseCandidates once it is done with them.
func (c *Ledger) Candidates(req *allocator.Request, oldest time.Time, keep func(node string) bool) (byFit *CandidatesByFit, stale int) {
	byFit = candidateBufs.Get().(*CandidatesByFit)
	for i := range byFit {
		byFit[i] = byFit[i][:0]
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, g := range c.shapes {
		f, r := g.sum.fitsWithFree(req)
		if f == FitNone {
			continue
		}
		for name, e := range g.nodes {
			if e.heartbeat.Before(oldest) {
				stale++
				continue
			}
			if keep(name) {
				byFit[f] = append(byFit[f], Candidate{Name: name, room: r})
			}
		}
	}
	return byFit, stale
}

// ReleaseCandidates hands candidates' lists back for reuse.
func ReleaseCandidates(byFit *CandidatesByFit) { candidateBufs.Put(byFit) }

// FitsOn tells whether node, fresh since oldest, can serve req now (summary only).
func (c *Ledger) FitsOn(node string, req *allocator.Request, oldest time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.nodes[node]
	return e != nil && e.base != nil && !e.heartbeat.Before(oldest) && e.sum.fits(req) != FitNone
}

// AddMIG records that pod uid holds the MIG devices refs of node, for the given source.
func (c *Ledger) AddMIG(uid types.UID, node string, refs []allocator.MIGSlot, src Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addMIGLocked(uid, node, refs, src)
}

func (c *Ledger) addMIGLocked(uid types.UID, node string, refs []allocator.MIGSlot, src Source) {
	e := c.entry(node)
	mine := c.byPod[uid]
	if mine == nil {
		mine = map[gpuRef]bool{}
		c.byPod[uid] = mine
	}
	for _, m := range refs {
		holders := e.migHolds[m]
		if holders == nil {
			holders = map[types.UID]Source{}
			e.migHolds[m] = holders
		}
		holders[uid] |= src
		mine[migRef(node, m)] = true
	}
	e.recompute()
	c.reshape(node, e)
}

// RemoveMIG drops the given source of pod uid's holds on the MIG devices refs of node; holds
// left with no source are released.
func (c *Ledger) RemoveMIG(uid types.UID, node string, refs []allocator.MIGSlot, src Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mine := c.byPod[uid]
	e := c.nodes[node]
	for _, m := range refs {
		ref := migRef(node, m)
		if !mine[ref] {
			continue
		}
		if e != nil && !c.dropMIG(e, uid, m, src) {
			continue
		}
		delete(mine, ref)
	}
	if e != nil {
		e.recompute()
		c.reshape(node, e)
		c.dropIfEmpty(node, e)
	}
	if len(mine) == 0 {
		delete(c.byPod, uid)
	}
}

// dropMIG drops src from uid's hold on MIG device m of e, and reports whether the hold is
// gone.
func (c *Ledger) dropMIG(e *nodeEntry, uid types.UID, m allocator.MIGSlot, src Source) bool {
	holders := e.migHolds[m]
	if left := holders[uid] &^ src; left != 0 {
		holders[uid] = left
		return false
	}
	delete(holders, uid)
	if len(holders) == 0 {
		delete(e.migHolds, m)
	}
	return true
}

// Add records that pod uid holds GPUs ids on node, for the given source.
func (c *Ledger) Add(uid types.UID, node string, ids []int, shared bool, src Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(uid, node, ids, shared, src)
}

// AddShare records that Shared pod uid holds GPUs ids on node with share (resolved against
// each GPU), for the given source. A zero share leaves a share another source recorded.
func (c *Ledger) AddShare(uid types.UID, node string, ids []int, share allocator.Resolved, src Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	shares := make([]allocator.Resolved, len(ids))
	for i := range shares {
		shares[i] = share
	}
	c.addSharesLocked(uid, node, ids, true, shares, src)
}

func (c *Ledger) addLocked(uid types.UID, node string, ids []int, shared bool, src Source) {
	c.addSharesLocked(uid, node, ids, shared, nil, src)
}

// addSharesLocked is addLocked with each GPU's share (shares[i] for ids[i]; nil: none known).
func (c *Ledger) addSharesLocked(uid types.UID, node string, ids []int, shared bool, shares []allocator.Resolved, src Source) {
	e := c.entry(node)
	refs := c.byPod[uid]
	if refs == nil {
		refs = map[gpuRef]bool{}
		c.byPod[uid] = refs
	}
	for i, id := range ids {
		m := e.holds[id]
		if m == nil {
			m = map[types.UID]*hold{}
			e.holds[id] = m
		}
		h := m[uid]
		if h == nil {
			h = &hold{shared: shared}
			m[uid] = h
		}
		h.sources |= src
		if i < len(shares) && shares[i] != (allocator.Resolved{}) {
			h.share = shares[i]
		}
		refs[gpuRef{node: node, id: id}] = true
	}
	e.recompute()
	c.reshape(node, e)
}

// Remove drops the given source of pod uid's holds on the GPUs ids of node (all of the pod's
// GPUs when ids is nil); holds left with no source are released.
func (c *Ledger) Remove(uid types.UID, node string, ids []int, src Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(uid, node, ids, src)
}

func (c *Ledger) removeLocked(uid types.UID, node string, ids []int, src Source) {
	refs := c.byPod[uid]
	for ref := range refs {
		if node != "" && ref.node != node {
			continue
		}
		if ids != nil && (ref.mig > 0 || !slices.Contains(ids, ref.id)) {
			continue // GPUs named by ID are whole GPUs; RemoveMIG drops MIG devices
		}
		e := c.nodes[ref.node]
		if e == nil {
			delete(refs, ref)
			continue
		}
		if ref.mig > 0 {
			if c.dropMIG(e, uid, allocator.MIGSlot{GPU: ref.id, Slot: ref.mig - 1}, src) {
				delete(refs, ref)
				e.recompute()
				c.reshape(ref.node, e)
				c.dropIfEmpty(ref.node, e)
			}
			continue
		}
		h := e.holds[ref.id][uid]
		if h != nil {
			h.sources &^= src
			if h.sources != 0 {
				continue
			}
			delete(e.holds[ref.id], uid)
			if len(e.holds[ref.id]) == 0 {
				delete(e.holds, ref.id)
			}
		}
		delete(refs, ref)
		e.recompute()
		c.reshape(ref.node, e)
		c.dropIfEmpty(ref.node, e)
	}
	if len(refs) == 0 {
		delete(c.byPod, uid)
	}
}

// Forget releases every hold of a pod, whatever its source: the pod is gone or finished.
func (c *Ledger) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(uid, "", nil, FromReservation|FromLease|FromPod)
	if k, ok := c.claimOf[uid]; ok {
		if c.claims[k] == uid {
			delete(c.claims, k)
		}
		delete(c.claimOf, uid)
	}
}

// HoldsOf returns the node and GPU IDs a pod holds (sorted), if any; for the MIG devices it
// holds, the GPUs they are on.
func (c *Ledger) HoldsOf(uid types.UID) (string, []int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	node := ""
	var ids []int
	for ref := range c.byPod[uid] {
		node = ref.node
		if !slices.Contains(ids, ref.id) {
			ids = append(ids, ref.id)
		}
	}
	sort.Ints(ids)
	return node, ids
}

// MIGHoldsOf returns the MIG devices a pod holds on node, sorted by GPU and slot.
func (c *Ledger) MIGHoldsOf(uid types.UID, node string) []allocator.MIGSlot {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []allocator.MIGSlot
	for ref := range c.byPod[uid] {
		if ref.mig > 0 && ref.node == node {
			out = append(out, allocator.MIGSlot{GPU: ref.id, Slot: ref.mig - 1})
		}
	}
	sortMIG(out)
	return out
}

// sortMIG sorts MIG devices by GPU, then slot.
func sortMIG(ms []allocator.MIGSlot) {
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].GPU != ms[j].GPU {
			return ms[i].GPU < ms[j].GPU
		}
		return ms[i].Slot < ms[j].Slot
	})
}

// Reserve atomically re-checks a placement against the current ledger and records it. It
// returns the IDs actually reserved (recomputed when the ledger changed since Filter).
func (c *Ledger) Reserve(uid types.UID, claimKey, node string, req allocator.Request) (allocator.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, _ := c.snapshotExcept(node, uid)
	if n == nil {
		return allocator.Result{}, &allocator.Unfit{Reason: "no GpuNodeStatus for node " + node}
	}
	res, err := allocator.Allocate(n, req)
	if err != nil {
		return allocator.Result{}, err
	}
	if req.Exclusivity == allocator.MIG {
		c.addMIGLocked(uid, node, res.MIG, FromReservation)
	} else {
		c.addSharesLocked(uid, node, res.IDs, req.Exclusivity == allocator.Shared, res.Shares, FromReservation)
	}
	if old, ok := c.claims[claimKey]; ok && old != uid {
		delete(c.claimOf, old)
	}
	if prev, ok := c.claimOf[uid]; ok && prev != claimKey && c.claims[prev] == uid {
		delete(c.claims, prev) // a pod serves one claim; its newest reservation wins
	}
	c.claims[claimKey] = uid
	c.claimOf[uid] = claimKey
	return res, nil
}

// Unreserve reverts reserve; it is idempotent.
func (c *Ledger) Unreserve(uid types.UID, claimKey string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(uid, "", nil, FromReservation|FromLease)
	if c.claims[claimKey] == uid {
		delete(c.claims, claimKey)
		delete(c.claimOf, uid)
	}
}

// ClaimReservedFor returns the pod this scheduler reserved a claim for.
func (c *Ledger) ClaimReservedFor(claimKey string) (types.UID, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	uid, ok := c.claims[claimKey]
	return uid, ok
}

// GPUCount is how many GPUs of one model are in one state (StateFree, StateAllocated,
// StateUnhealthy): one sample of the scheduler's gpu_scheduler_gpus gauge.
type GPUCount struct {
	Model, State string
	Count        int
}

// GPU states of GPUCount.
const (
	StateFree      = "free"
	StateAllocated = "allocated"
	StateUnhealthy = "unhealthy"
)

// GPUCounts counts the GPUs of every node with a status by model and state (free, allocated,
// unhealthy), for the gpu_scheduler_gpus gauge. A GPU that is not Healthy counts as unhealthy
// whether or not a pod still holds it.
func (c *Ledger) GPUCounts() []GPUCount {
	type key struct{ model, state string }
	counts := map[key]int{}
	c.mu.RLock()
	for _, e := range c.nodes {
		if e.view == nil {
			continue
		}
		for _, g := range e.view.GPUs {
			k := key{model: e.models[g.ID], state: StateFree}
			if k.model == "" {
				k.model = "unknown"
			}
			switch {
			case g.Health != allocator.Healthy:
				k.state = StateUnhealthy
			case g.ExclusiveHolder != "" || g.SharedHolders > 0:
				k.state = StateAllocated
			}
			counts[k]++
		}
	}
	c.mu.RUnlock()
	out := make([]GPUCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, GPUCount{Model: k.model, State: k.state, Count: n})
	}
	return out
}

// PickCandidates chooses the nodes PreFilter offers out of tiers (best fit tier first, each the
// candidates of one tier). Up to limit nodes, better tiers before worse; within the tier where
// the limit falls, binpack takes the tightest fits first: the fewest GPUs left in the island the
// request would use, then on the node (a best fit that keeps large free islands and empty nodes
// whole for large claims, in the order allocator.NodeScore's binpack ranks them: island fit
// before the node's packed share), and spread the emptiest nodes. The other strategies rank nodes by something the ledger does not hold (utilisation,
// names, costs, a draw per pod), and limit 0 means no cap: then every node is offered. capped
// reports whether some were left out. Ties keep the ledger's map order, which Go varies from
// scan to scan, so that a node another plugin keeps refusing is not offered first every time.
func PickCandidates(tiers [][]Candidate, s allocator.Strategy, limit int) (names []string, capped bool) {
	total := 0
	for _, t := range tiers {
		total += len(t)
	}
	if limit <= 0 || total <= limit || (s != allocator.Binpack && s != allocator.SpreadNodes) {
		names = make([]string, 0, total)
		for _, t := range tiers {
			for _, c := range t {
				names = append(names, c.Name)
			}
		}
		return names, false
	}
	names = make([]string, 0, limit)
	for _, t := range tiers {
		need := limit - len(names)
		if need == 0 {
			break
		}
		if len(t) <= need {
			for _, c := range t {
				names = append(names, c.Name)
			}
			continue
		}
		names = appendBest(names, t, need, s == allocator.SpreadNodes)
	}
	return names, true
}

// appendBest appends the need best candidates of t (tightest, or emptiest), by a counting pass
// over t rather than a sort: a burst asks this for every pod, over thousands of nodes.
func appendBest(names []string, t []Candidate, need int, emptiest bool) []string {
	most := 0
	for _, c := range t {
		most = max(most, c.room.node, c.room.island)
	}
	key := func(c Candidate) int {
		if emptiest {
			return most - c.room.node
		}
		return c.room.island*(most+1) + c.room.node
	}
	counts := make([]int, (most+1)*(most+1))
	for _, c := range t {
		counts[key(c)]++
	}
	// Every candidate with a key below cut is taken, and the first rest of those with key cut.
	cut, rest := 0, need
	for ; cut < len(counts) && counts[cut] < rest; cut++ {
		rest -= counts[cut]
	}
	for _, c := range t {
		switch k := key(c); {
		case k < cut:
			names = append(names, c.Name)
		case k == cut && rest > 0:
			names = append(names, c.Name)
			rest--
		}
	}
	return names
}

// SetClock sets the clock that signs of life are clamped to (time.Now by default); tests and
// the plugin's injected clock use it.
func (c *Ledger) SetClock(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// Nodes is how many nodes the ledger keeps an entry for: a status, a hold or a renewal.
func (c *Ledger) Nodes() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.nodes)
}

// HeldGPUs is how many of node's GPUs someone holds, whatever the source.
func (c *Ledger) HeldGPUs(node string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e := c.nodes[node]; e != nil {
		return len(e.holds)
	}
	return 0
}

// AddHold is Add for a hold whose share is known from a lease or a pod's annotation: a Shared
// hold records it (AddShare), an Exclusive one has none.
func (c *Ledger) AddHold(uid types.UID, node string, ids []int, shared bool, share apiv1.ResolvedShare, src Source) {
	if !shared {
		c.Add(uid, node, ids, false, src)
		return
	}
	c.AddShare(uid, node, ids, allocator.Resolved{MemoryMiB: share.MemoryMiB, ComputePercent: int(share.ComputePercent)}, src)
}

// PodShare is the share the scheduler wrote on a bound Shared pod (apiv1.AnnotationShare); an
// unreadable annotation counts as none.
func PodShare(pod *v1.Pod) apiv1.ResolvedShare {
	s, _ := apiv1.ParseShare(pod.Annotations[apiv1.AnnotationShare])
	return s
}

// SharerCount is how many GPUs of one model have Sharers Shared holders: one sample of the
// scheduler's gpu_scheduler_shared_gpus gauge.
type SharerCount struct {
	Model          string
	Sharers, Count int
}

// MIGCount is how many MIG devices of one model and profile are in one state (StateFree,
// StateAllocated, StateUnhealthy), as the agents publish them: one sample of the scheduler's
// gpu_scheduler_mig_devices gauge.
type MIGCount struct {
	Model, Profile, State string
	Count                 int
}

// migDevice is a MIG device as a GpuNodeStatus reports it, for MIGCounts.
type migDevice struct {
	profile, state string
}

// setMIG records the MIG devices of a node's status (nil when it has none).
func (e *nodeEntry) setMIG(gns *apiv1.GpuNodeStatus) {
	e.mig = nil
	for _, d := range gns.Status.Devices {
		if d.MIG == nil || !d.MIG.Enabled {
			continue
		}
		if e.mig == nil {
			e.mig = map[int][]migDevice{}
		}
		for _, m := range d.MIG.Devices {
			state := StateFree
			switch {
			case m.Health != apiv1.Healthy || d.Health != apiv1.Healthy:
				state = StateUnhealthy
			case len(m.InUseBy) > 0:
				state = StateAllocated
			}
			e.mig[int(d.ID)] = append(e.mig[int(d.ID)], migDevice{profile: m.Profile, state: state})
		}
	}
}

// PartCounts counts the Shared GPUs of every node by model and number of sharers, and the MIG
// devices by model, profile and state, for the gpu_scheduler_shared_gpus and
// gpu_scheduler_mig_devices gauges.
func (c *Ledger) PartCounts() ([]SharerCount, []MIGCount) {
	type sk struct {
		model   string
		sharers int
	}
	type mk struct{ model, profile, state string }
	sharers, migs := map[sk]int{}, map[mk]int{}
	model := func(e *nodeEntry, id int) string {
		if m := e.models[id]; m != "" {
			return m
		}
		return "unknown"
	}
	c.mu.RLock()
	for _, e := range c.nodes {
		if e.view == nil {
			continue
		}
		for _, g := range e.view.GPUs {
			if g.SharedHolders > 0 {
				sharers[sk{model(e, g.ID), g.SharedHolders}]++
			}
		}
		for id, devs := range e.mig {
			for _, d := range devs {
				migs[mk{model(e, id), d.profile, d.state}]++
			}
		}
	}
	c.mu.RUnlock()
	var so []SharerCount
	for k, n := range sharers {
		so = append(so, SharerCount{Model: k.model, Sharers: k.sharers, Count: n})
	}
	var mo []MIGCount
	for k, n := range migs {
		mo = append(mo, MIGCount{Model: k.model, Profile: k.profile, State: k.state, Count: n})
	}
	return so, mo
}
