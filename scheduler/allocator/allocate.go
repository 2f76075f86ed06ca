package allocator

import (
	"fmt"
	"sort"
	"strings"
)

// island is the eligible part of one island of a node.
type island struct {
	key  string
	name string
	size int   // every GPU of the island, eligible or not
	free []int // eligible IDs, sorted
	// minBW is the lowest bandwidth among the eligible GPUs.
	minBW int
}

// view is a node seen through one request: which GPUs are eligible, grouped by island.
type view struct {
	node     *Node
	req      *Request
	islands  []island
	eligible int
	// counts of GPUs that are not eligible, by cause, for Unfit messages.
	unhealthy, held, lowBW, mig int
	// capped counts the GPUs a Shared request's caps refused, by cause (ShareCap); capDetail
	// is one such refusal's numbers.
	capped    map[string]int
	capDetail string
}

func (v *view) eligibleGPU(g *GPU) bool {
	if g.Health != Healthy {
		v.unhealthy++
		return false
	}
	if g.MIGMode {
		v.mig++
		return false
	}
	if g.ExclusiveHolder != "" || (v.req.Exclusivity == Exclusive && g.SharedHolders > 0) {
		v.held++
		return false
	}
	if v.req.Exclusivity == Shared {
		if cause, detail := ShareCap(g, v.req.Share, v.req.MaxSharers); cause != "" {
			if v.capped == nil {
				v.capped = map[string]int{}
			}
			v.capped[cause]++
			if v.capDetail == "" {
				v.capDetail = detail
			}
			return false
		}
	}
	if v.req.Topology == Required && g.BandwidthGBps < v.req.MinBandwidthGBps {
		v.lowBW++
		return false
	}
	return true
}

func newView(n *Node, req *Request) *view {
	v := &view{node: n, req: req}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		key := islandKey(g)
		idx := -1
		for j := range v.islands {
			if v.islands[j].key == key {
				idx = j
				break
			}
		}
		if idx < 0 {
			v.islands = append(v.islands, island{key: key, name: g.Island, minBW: -1})
			idx = len(v.islands) - 1
		}
		is := &v.islands[idx]
		is.size++
		if v.eligibleGPU(g) {
			is.free = append(is.free, g.ID)
			if is.minBW < 0 || g.BandwidthGBps < is.minBW {
				is.minBW = g.BandwidthGBps
			}
			v.eligible++
		}
	}
	return v
}

// islandOf returns the index of the island holding GPU id.
func (v *view) islandOf(id int) int {
	g, ok := v.node.GPU(id)
	if !ok {
		return -1
	}
	key := islandKey(g)
	for i := range v.islands {
		if v.islands[i].key == key {
			return i
		}
	}
	return -1
}

func (v *view) isEligible(id int) bool {
	i := v.islandOf(id)
	if i < 0 {
		return false
	}
	for _, f := range v.islands[i].free {
		if f == id {
			return true
		}
	}
	return false
}

// Allocate chooses req.Count GPUs of n. It returns an error for a request that is invalid on
// any node, and an *Unfit error that explains why this node cannot serve a valid request.
func Allocate(n *Node, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, fmt.Errorf("invalid request: %w", err)
	}
	if req.Exclusivity == MIG {
		return allocateMIG(n, &req)
	}
	if len(req.Pinned) > 0 {
		return pinned(n, &req)
	}
	if req.Count > len(n.GPUs) {
		return Result{}, unfit("node has %d GPUs; claim needs %d", len(n.GPUs), req.Count)
	}
	v := newView(n, &req)
	if v.eligible < req.Count {
		return Result{}, v.notEnough()
	}

	var ids []int
	var note string
	var err error
	switch req.Policy {
	case Spread:
		ids = v.spread()
	case PreferIDs:
		ids, note, err = v.preferred()
	default:
		ids, err = v.contiguous()
	}
	if err != nil {
		return Result{}, err
	}
	sort.Ints(ids)
	res := Result{IDs: ids, Note: note, Shares: resolveShares(n, &req, ids)}
	v.score(&res)
	return res, nil
}

// pinned takes exactly req.Pinned, or explains which of them cannot be taken. Unlike the
// other policies it never substitutes a GPU: the user named these.
func pinned(n *Node, req *Request) (Result, error) {
	for _, id := range req.Pinned {
		g, ok := n.GPU(id)
		switch {
		case !ok:
			return Result{}, unfit("GPU %d does not exist on node %s (it has %d GPUs)", id, n.Name, len(n.GPUs))
		case g.Health != Healthy:
			return Result{}, unfit("GPU %d is %s", id, g.Health)
		case g.MIGMode:
			return Result{}, unfit("GPU %d is in MIG mode: only its MIG devices are allocated", id)
		case g.ExclusiveHolder != "":
			return Result{}, unfit("GPU %d is held by another pod", id)
		case req.Exclusivity == Exclusive && g.SharedHolders > 0:
			return Result{}, unfit("GPU %d is shared by %d pods; an Exclusive claim cannot take it", id, g.SharedHolders)
		case req.Exclusivity == Shared:
			if cause, detail := ShareCap(g, req.Share, req.MaxSharers); cause != "" {
				return Result{}, unfit("%s cap: %s", cause, detail)
			}
		}
	}
	ids := append([]int(nil), req.Pinned...)
	sort.Ints(ids)
	res := Result{IDs: ids}
	res.Shares = resolveShares(n, req, ids)
	// Scored as topology-blind: the user chose these GPUs, islands and bandwidth did not.
	scored := *req
	scored.Topology, scored.MinBandwidthGBps = Ignore, 0
	newView(n, &scored).score(&res)
	return res, nil
}

// resolveShares resolves a Shared request's share against each chosen GPU; nil for other
// requests.
func resolveShares(n *Node, req *Request, ids []int) []Resolved {
	if req.Exclusivity != Shared {
		return nil
	}
	out := make([]Resolved, len(ids))
	for i, id := range ids {
		if g, ok := n.GPU(id); ok {
			out[i] = req.Share.Resolve(g)
		}
	}
	return out
}

// notEnough explains why the node has fewer eligible GPUs than the request needs.
func (v *view) notEnough() error {
	var causes []string
	if v.unhealthy > 0 {
		causes = append(causes, fmt.Sprintf("%d not healthy", v.unhealthy))
	}
	if v.held > 0 {
		causes = append(causes, fmt.Sprintf("%d held", v.held))
	}
	if v.mig > 0 {
		causes = append(causes, fmt.Sprintf("%d in MIG mode", v.mig))
	}
	if v.lowBW > 0 {
		causes = append(causes, fmt.Sprintf("%d below %d GB/s", v.lowBW, v.req.MinBandwidthGBps))
	}
	for _, cause := range []string{CapMemory, CapCompute, CapSharers} {
		if n := v.capped[cause]; n > 0 {
			causes = append(causes, fmt.Sprintf("%d at the %s cap", n, cause))
		}
	}
	what := "healthy free"
	if v.req.Exclusivity == Shared {
		what = "healthy shareable"
	}
	msg := fmt.Sprintf("needs %d %s GPUs; node has %d", v.req.Count, what, v.eligible)
	if len(causes) > 0 {
		msg += " (" + strings.Join(causes, ", ") + ")"
	}
	if v.capDetail != "" {
		msg += ": " + v.capDetail
	}
	return &Unfit{Reason: msg}
}

// contiguous picks adjacent IDs, preferring one island chosen best-fit so that larger islands
// stay whole for larger requests.
func (v *view) contiguous() ([]int, error) {
	k := v.req.Count
	if v.req.Topology != Ignore {
		best := -1
		for i := range v.islands {
			is := &v.islands[i]
			if len(is.free) < k {
				continue
			}
			if best < 0 || v.betterIsland(is, &v.islands[best]) {
				best = i
			}
		}
		if best >= 0 {
			return window(v.islands[best].free, k), nil
		}
		if v.req.Topology == Required {
			return nil, v.noIsland()
		}
	}
	// No island fits (or topology is ignored): the tightest window over every eligible GPU.
	all := make([]int, 0, v.eligible)
	for i := range v.islands {
		all = append(all, v.islands[i].free...)
	}
	sort.Ints(all)
	if v.req.Topology == Ignore {
		return window(all, k), nil
	}
	return v.fewestIslands(k), nil
}

// betterIsland orders islands for a request that fits in either: meeting the bandwidth
// minimum first, then best fit (fewest free GPUs left over), then higher bandwidth, then lower IDs.
func (v *view) betterIsland(a, b *island) bool {
	if min := v.req.MinBandwidthGBps; min > 0 {
		am, bm := a.minBW >= min, b.minBW >= min
		if am != bm {
			return am
		}
	}
	if len(a.free) != len(b.free) {
		return len(a.free) < len(b.free)
	}
	if a.minBW != b.minBW {
		return a.minBW > b.minBW
	}
	return a.free[0] < b.free[0]
}

// noIsland explains why no single island can serve a Required request.
func (v *view) noIsland() error {
	bestFree := 0
	for i := range v.islands {
		if len(v.islands[i].free) > bestFree {
			bestFree = len(v.islands[i].free)
		}
	}
	bw := ""
	if v.req.MinBandwidthGBps > 0 {
		bw = fmt.Sprintf(" with ≥ %d GB/s", v.req.MinBandwidthGBps)
	}
	return unfit("needs %d healthy free GPUs in one island%s; best island has %d free", v.req.Count, bw, bestFree)
}

// fewestIslands spans as few islands as possible: the largest free islands first.
func (v *view) fewestIslands(k int) []int {
	order := make([]int, len(v.islands))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ia, ib := &v.islands[order[a]], &v.islands[order[b]]
		if len(ia.free) != len(ib.free) {
			return len(ia.free) > len(ib.free)
		}
		return ia.minBW > ib.minBW
	})
	ids := make([]int, 0, k)
	for _, i := range order {
		need := k - len(ids)
		if need == 0 {
			break
		}
		free := v.islands[i].free
		if len(free) <= need {
			ids = append(ids, free...)
		} else {
			ids = append(ids, window(free, need)...)
		}
	}
	return ids
}

// window picks k of the sorted IDs with the smallest span. Among equally tight windows it
// prefers one inside the smallest run of consecutive IDs that holds it (best fit again, so
// long runs survive), then the leftmost.
func window(free []int, k int) []int {
	if k >= len(free) {
		return append([]int(nil), free...)
	}
	// runLen[i] is the length of the run of consecutive IDs that free[i] belongs to.
	runLen := make([]int, len(free))
	for start := 0; start < len(free); {
		end := start + 1
		for end < len(free) && free[end] == free[end-1]+1 {
			end++
		}
		for i := start; i < end; i++ {
			runLen[i] = end - start
		}
		start = end
	}
	best, bestSpan, bestRun := -1, 0, 0
	for i := 0; i+k <= len(free); i++ {
		span := free[i+k-1] - free[i]
		run := runLen[i]
		if span != k-1 {
			run = len(free) + 1 // not inside one run: rank after every in-run window
		}
		if best < 0 || span < bestSpan || (span == bestSpan && run < bestRun) {
			best, bestSpan, bestRun = i, span, run
		}
	}
	return append([]int(nil), free[best:best+k]...)
}

// spread deals GPUs round-robin across islands, the islands with most free GPUs first.
func (v *view) spread() []int {
	order := make([]int, 0, len(v.islands))
	for i := range v.islands {
		if len(v.islands[i].free) > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return len(v.islands[order[a]].free) > len(v.islands[order[b]].free)
	})
	next := make([]int, len(v.islands))
	ids := make([]int, 0, v.req.Count)
	for len(ids) < v.req.Count {
		for _, i := range order {
			if len(ids) == v.req.Count {
				break
			}
			if next[i] < len(v.islands[i].free) {
				ids = append(ids, v.islands[i].free[next[i]])
				next[i]++
			}
		}
	}
	return ids
}

// preferred takes the preferred IDs that are eligible, in the order listed, and fills the rest
// with the GPUs closest to them. When the preferred IDs cannot be used (Required topology
// across islands) it falls back to contiguous placement, and the note says so.
func (v *view) preferred() ([]int, string, error) {
	k := v.req.Count
	var chosen, skipped []int
	for _, id := range v.req.PreferIDs {
		if len(chosen) == k {
			break
		}
		if v.isEligible(id) {
			chosen = append(chosen, id)
		} else {
			skipped = append(skipped, id)
		}
	}
	if v.req.Topology == Required && len(chosen) > 0 {
		chosen = v.keepOneIsland(chosen)
	}
	if len(chosen) < k {
		// Fill around what was kept; when nothing preferred is usable, around the preferred IDs.
		anchors := chosen
		if len(anchors) == 0 {
			anchors = v.req.PreferIDs
		}
		filled, ok := v.fill(chosen, anchors, k)
		if !ok {
			ids, err := v.contiguous()
			if err != nil {
				return nil, "", err
			}
			return ids, fmt.Sprintf("preferred GPUs %s cannot be used in one island; placed contiguously instead", FormatIDs(v.req.PreferIDs)), nil
		}
		chosen = filled
	}
	note := ""
	if len(skipped) > 0 || !subset(chosen, v.req.PreferIDs) {
		var why string
		if len(skipped) > 0 {
			why = fmt.Sprintf("preferred GPU(s) %s not available", FormatIDs(skipped))
		} else {
			why = "preferred GPUs are not in one island with the rest"
		}
		sorted := append([]int(nil), chosen...)
		sort.Ints(sorted)
		note = fmt.Sprintf("%s; used %s", why, FormatIDs(sorted))
	}
	return chosen, note, nil
}

// keepOneIsland keeps the chosen IDs of the island that holds most of them (first listed wins a tie).
func (v *view) keepOneIsland(chosen []int) []int {
	counts := make(map[int]int, len(chosen))
	bestIsland, bestCount := -1, 0
	for _, id := range chosen {
		i := v.islandOf(id)
		counts[i]++
		if counts[i] > bestCount {
			bestIsland, bestCount = i, counts[i]
		}
	}
	kept := chosen[:0:0]
	for _, id := range chosen {
		if v.islandOf(id) == bestIsland {
			kept = append(kept, id)
		}
	}
	return kept
}

// fill completes chosen up to k GPUs: the anchors' island first, then nearest to an anchor by
// ID. Under Required topology only the anchors' island may be used; ok is false when it has
// too few (or the anchors name no GPU of this node).
func (v *view) fill(chosen, anchors []int, k int) ([]int, bool) {
	home := -1
	for _, a := range anchors {
		if home = v.islandOf(a); home >= 0 {
			break
		}
	}
	if home < 0 && v.req.Topology == Required {
		return nil, false
	}
	in := make(map[int]bool, len(chosen))
	for _, id := range chosen {
		in[id] = true
	}
	type cand struct{ id, sameIsland, dist int }
	var cands []cand
	for i := range v.islands {
		if v.req.Topology == Required && i != home {
			continue
		}
		for _, id := range v.islands[i].free {
			if in[id] {
				continue
			}
			d := -1
			for _, c := range anchors {
				if x := abs(id - c); d < 0 || x < d {
					d = x
				}
			}
			same := 1
			if i == home {
				same = 0
			}
			cands = append(cands, cand{id, same, d})
		}
	}
	if len(chosen)+len(cands) < k {
		return nil, false
	}
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].sameIsland != cands[b].sameIsland {
			return cands[a].sameIsland < cands[b].sameIsland
		}
		if cands[a].dist != cands[b].dist {
			return cands[a].dist < cands[b].dist
		}
		return cands[a].id < cands[b].id
	})
	out := append([]int(nil), chosen...)
	for _, c := range cands[:k-len(chosen)] {
		out = append(out, c.id)
	}
	return out, true
}

func subset(ids, of []int) bool {
	for _, id := range ids {
		found := false
		for _, o := range of {
			if o == id {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// FormatIDs writes IDs as "0,1,2".
func FormatIDs(ids []int) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", id)
	}
	return b.String()
}
