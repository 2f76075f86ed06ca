// Package allocator decides which GPUs of one node serve a request, and how good that choice is.
// It is pure: no Kubernetes imports, no I/O, no clocks, so the scheduler plugin, the simulator
// and the tests share exactly one placement engine.
package allocator

import (
	"fmt"
	"sort"
)

// Health is the state of a GPU. Only Healthy GPUs are ever allocated.
type Health uint8

const (
	// Healthy GPUs may be allocated.
	Healthy Health = iota
	// Unhealthy GPUs had a critical error.
	Unhealthy
	// Unknown GPUs could not be read.
	Unknown
)

func (h Health) String() string {
	switch h {
	case Healthy:
		return "Healthy"
	case Unhealthy:
		return "Unhealthy"
	default:
		return "Unknown"
	}
}

// GPU is one device of a node, as far as placement is concerned.
type GPU struct {
	ID     int
	Health Health
	// Island names the GPUs joined by a fast interconnect. GPUs with an empty island are
	// islands of their own.
	Island string
	// BandwidthGBps is the GPU's interconnect bandwidth to its island peers.
	BandwidthGBps int
	// ExclusiveHolder is the pod UID holding the GPU exclusively, or "".
	ExclusiveHolder string
	// SharedHolders counts the Shared pods using the GPU.
	SharedHolders int
	// MIGMode is true for a GPU in MIG mode: only its MIG devices are allocated (MIG
	// requests), never the GPU whole.
	MIGMode bool
	// MIG are the MIG devices of a GPU in MIG mode, sorted by slot.
	MIG []MIGDevice
	// MemoryMiB is the GPU's memory (0 when not reported); a Shared request's memory share is
	// judged against it.
	MemoryMiB int64
	// SharedMemoryMiB and SharedComputePercent sum the shares the Shared holders reserve.
	SharedMemoryMiB      int64
	SharedComputePercent int
	// UtilizationPercent is the recent utilization, or -1 when not reported.
	UtilizationPercent int
	// MemoryUsedPercent is the share of the GPU's memory in use (0 when not reported). It
	// counts only where UtilizationPercent is reported: a GPU whose kernels idle between
	// requests but whose memory is full is busy all the same.
	MemoryUsedPercent int
}

// MIGDevice is one MIG device of a GPU in MIG mode: a hardware partition that one pod holds.
type MIGDevice struct {
	// Slot is the device's placement start on its GPU, which names it there.
	Slot    int
	Profile string
	Health  Health
	// Holder is the UID of the pod holding the device, or "".
	Holder string
}

// MIGSlot names one MIG device of a node: its GPU and its slot.
type MIGSlot struct {
	GPU, Slot int
}

// Node is the GPUs of one node, sorted by ID.
type Node struct {
	Name string
	GPUs []GPU
}

// Validate checks that IDs are non-negative, unique and sorted; builders always produce such
// nodes, and the plugin validates what it reads from the API before allocating.
func (n *Node) Validate() error {
	for i, g := range n.GPUs {
		if g.ID < 0 {
			return fmt.Errorf("node %q: GPU ID %d is negative", n.Name, g.ID)
		}
		if i > 0 && n.GPUs[i-1].ID >= g.ID {
			return fmt.Errorf("node %q: GPU IDs are not unique and sorted (%d after %d)", n.Name, g.ID, n.GPUs[i-1].ID)
		}
		if g.SharedHolders < 0 {
			return fmt.Errorf("node %q: GPU %d has a negative shared holder count", n.Name, g.ID)
		}
	}
	return nil
}

// SortGPUs sorts the node's GPUs by ID.
func (n *Node) SortGPUs() {
	sort.Slice(n.GPUs, func(i, j int) bool { return n.GPUs[i].ID < n.GPUs[j].ID })
}

// GPU returns the GPU with the given ID.
func (n *Node) GPU(id int) (*GPU, bool) {
	i := sort.Search(len(n.GPUs), func(i int) bool { return n.GPUs[i].ID >= id })
	if i < len(n.GPUs) && n.GPUs[i].ID == id {
		return &n.GPUs[i], true
	}
	return nil, false
}

// Clone returns a deep copy.
func (n *Node) Clone() *Node {
	c := &Node{Name: n.Name, GPUs: make([]GPU, len(n.GPUs))}
	copy(c.GPUs, n.GPUs)
	for i := range c.GPUs {
		if c.GPUs[i].MIG != nil {
			c.GPUs[i].MIG = append([]MIGDevice(nil), c.GPUs[i].MIG...)
		}
	}
	return c
}

// islandKey returns the island a GPU belongs to; GPUs without one form an island of their own.
func islandKey(g *GPU) string {
	if g.Island == "" {
		return fmt.Sprintf("\x00gpu-%d", g.ID)
	}
	return g.Island
}

// Policy is how GPUs are picked on a node.
type Policy uint8

const (
	// Contiguous picks adjacent IDs, inside one island when possible.
	Contiguous Policy = iota
	// Spread picks GPUs across islands.
	Spread
	// PreferIDs picks the preferred IDs when free, and falls back otherwise.
	PreferIDs
)

func (p Policy) String() string {
	switch p {
	case Contiguous:
		return "contiguous"
	case Spread:
		return "spread"
	case PreferIDs:
		return "preferIds"
	default:
		return fmt.Sprintf("Policy(%d)", p)
	}
}

// Exclusivity is whether GPUs may be shared.
type Exclusivity uint8

const (
	// Exclusive GPUs serve one pod.
	Exclusive Exclusivity = iota
	// Shared GPUs serve any number of Shared pods, never alongside an Exclusive one.
	Shared
	// MIG requests take MIG devices of one profile (Request.MIGProfile) on GPUs in MIG mode,
	// each held by one pod; islands and topology play no part.
	MIG
)

func (e Exclusivity) String() string {
	switch e {
	case Shared:
		return "Shared"
	case MIG:
		return "MIG"
	default:
		return "Exclusive"
	}
}

// TopologyMode is how strongly a request needs island-local, high-bandwidth GPUs.
type TopologyMode uint8

const (
	// Preferred tries for one island and the bandwidth minimum, and falls back.
	Preferred TopologyMode = iota
	// Required fails rather than cross islands or go below the bandwidth minimum.
	Required
	// Ignore does not consider topology.
	Ignore
)

func (m TopologyMode) String() string {
	switch m {
	case Required:
		return "Required"
	case Ignore:
		return "Ignore"
	default:
		return "Preferred"
	}
}

// Request is what a claim asks of one node.
type Request struct {
	Count            int
	Policy           Policy
	PreferIDs        []int
	Exclusivity      Exclusivity
	Topology         TopologyMode
	MinBandwidthGBps int
	// Share is a Shared request's part of each GPU it takes; the zero Share reserves nothing
	// and only counts as a sharer.
	Share Share
	// MaxSharers bounds the Shared pods of one GPU, this one included (0: no bound).
	MaxSharers int
	// MIGProfile is a MIG request's profile (1g.10gb): it takes Count MIG devices of it.
	MIGProfile string
	// Pinned, when set, are the exact GPU IDs to take (an explicit placement, the scheduling
	// map's entry): each must exist, be healthy and be free for the request's exclusivity, or
	// the node is unfit. Count must equal len(Pinned); Policy and Topology play no part.
	Pinned []int
}

// Validate reports a request that can never be served by any node.
func (r *Request) Validate() error {
	if r.Count < 1 {
		return fmt.Errorf("count must be at least 1, got %d", r.Count)
	}
	if r.Policy > PreferIDs {
		return fmt.Errorf("unknown policy %v", r.Policy)
	}
	if r.Exclusivity > MIG {
		return fmt.Errorf("unknown exclusivity %d", r.Exclusivity)
	}
	if (r.Exclusivity == MIG) != (r.MIGProfile != "") {
		return fmt.Errorf("a MIG profile is stated exactly for MIG requests")
	}
	if r.Exclusivity == MIG && (r.Policy == PreferIDs || len(r.Pinned) > 0) {
		return fmt.Errorf("a MIG request names no GPUs: preferIds and pinned GPUs are for whole GPUs")
	}
	if r.Topology > Ignore {
		return fmt.Errorf("unknown topology mode %d", r.Topology)
	}
	if r.Share != (Share{}) && r.Exclusivity != Shared {
		return fmt.Errorf("a share is only for Shared requests")
	}
	if err := r.Share.validate(); err != nil {
		return err
	}
	if r.MaxSharers < 0 {
		return fmt.Errorf("maxSharers must not be negative, got %d", r.MaxSharers)
	}
	if r.MinBandwidthGBps < 0 {
		return fmt.Errorf("minBandwidthGBps must not be negative, got %d", r.MinBandwidthGBps)
	}
	if r.Policy == PreferIDs && len(r.PreferIDs) == 0 {
		return fmt.Errorf("policy preferIds needs at least one ID in preferIds")
	}
	if r.Policy == Spread && r.Topology == Required {
		return fmt.Errorf("policy spread spreads GPUs across islands and cannot be combined with topology mode Required")
	}
	if len(r.Pinned) > 0 {
		if len(r.Pinned) != r.Count {
			return fmt.Errorf("pinned GPUs %s are %d, count is %d", FormatIDs(r.Pinned), len(r.Pinned), r.Count)
		}
		pinned := make(map[int]bool, len(r.Pinned))
		for _, id := range r.Pinned {
			if id < 0 || pinned[id] {
				return fmt.Errorf("pinned GPUs %s: each must be a non-negative ID listed once", FormatIDs(r.Pinned))
			}
			pinned[id] = true
		}
	}
	seen := make(map[int]bool, len(r.PreferIDs))
	for _, id := range r.PreferIDs {
		if id < 0 {
			return fmt.Errorf("preferIds must not be negative, got %d", id)
		}
		if seen[id] {
			return fmt.Errorf("preferIds lists GPU %d twice", id)
		}
		seen[id] = true
	}
	return nil
}

// Share is a Shared request's part of a GPU: memory in MiB or as a percentage of the GPU's
// memory (at most one of the two), and a percentage of its compute. Zero parts are not stated.
type Share struct {
	MemoryMiB      int64
	MemoryPercent  int
	ComputePercent int
}

func (s Share) validate() error {
	switch {
	case s.MemoryMiB < 0 || s.MemoryPercent < 0 || s.ComputePercent < 0:
		return fmt.Errorf("share parts must not be negative")
	case s.MemoryMiB > 0 && s.MemoryPercent > 0:
		return fmt.Errorf("share states memory twice (MiB and percent)")
	case s.MemoryPercent > 100 || s.ComputePercent > 100:
		return fmt.Errorf("share percentages must be at most 100")
	}
	return nil
}

// MemoryOn is the memory the share takes of GPU g, in MiB: a percentage is resolved against
// the GPU's memory and rounded down (at least 1 MiB), so that percentages summing to 100 always
// fit the GPU together (four 25 % shares of a 23034 MiB L4, rounded up, would not).
func (s Share) MemoryOn(g *GPU) int64 {
	if s.MemoryPercent > 0 {
		return max(1, g.MemoryMiB*int64(s.MemoryPercent)/100)
	}
	return s.MemoryMiB
}

// Resolved is a share resolved against one GPU.
type Resolved struct {
	MemoryMiB      int64
	ComputePercent int
}

// Resolve resolves the share against GPU g.
func (s Share) Resolve(g *GPU) Resolved {
	return Resolved{MemoryMiB: s.MemoryOn(g), ComputePercent: s.ComputePercent}
}

// ShareCap says why a Shared request's share does not fit GPU g, or "" when it does; the
// message names the cap with its numbers.
func ShareCap(g *GPU, s Share, maxSharers int) (cause, detail string) {
	if maxSharers > 0 && g.SharedHolders >= maxSharers {
		return CapSharers, fmt.Sprintf("GPU %d has %d sharers of at most %d", g.ID, g.SharedHolders, maxSharers)
	}
	if s.MemoryMiB > 0 || s.MemoryPercent > 0 {
		if g.MemoryMiB <= 0 {
			return CapMemory, fmt.Sprintf("GPU %d reports no memory size to judge a memory share against", g.ID)
		}
		if m := s.MemoryOn(g); g.SharedMemoryMiB+m > g.MemoryMiB {
			return CapMemory, fmt.Sprintf("GPU %d has %d of %d MiB reserved, the share needs %d", g.ID, g.SharedMemoryMiB, g.MemoryMiB, m)
		}
	}
	if s.ComputePercent > 0 && g.SharedComputePercent+s.ComputePercent > 100 {
		return CapCompute, fmt.Sprintf("GPU %d has %d %% compute reserved, the share needs %d %%", g.ID, g.SharedComputePercent, s.ComputePercent)
	}
	return "", ""
}

// Causes of ShareCap.
const (
	CapMemory  = "memory"
	CapCompute = "compute"
	CapSharers = "sharers"
)

// Result is a placement on one node.
type Result struct {
	// IDs are the chosen GPU IDs, sorted.
	IDs []int
	// Shares are a Shared request's share resolved against each chosen GPU, in the order of
	// IDs; nil for other requests.
	Shares []Resolved
	// Score is the placement quality on this node, 0..100: island locality, bandwidth, policy
	// fit and how whole the node's islands stay for later requests.
	Score int
	// Fit is the island best fit, 0..100: the share of its island's free GPUs the placement
	// takes (100 fills the island exactly); 0 when the placement spans islands, -1 under the
	// Spread policy. Binpack ranks nodes by it before their packed share (NodeScore).
	Fit int
	// IslandLocal is true when every chosen GPU sits in one island.
	IslandLocal bool
	// Islands is the number of islands the chosen GPUs span.
	Islands int
	// Note explains a fallback ("preferred GPU 3 is held; used 2,4"), or is empty.
	Note string
	// MIG are a MIG request's devices, sorted by GPU and slot; IDs are then the GPUs they
	// are on.
	MIG []MIGSlot
}

// Unfit is the reason a node cannot serve a request.
type Unfit struct {
	Reason string
}

func (u *Unfit) Error() string { return u.Reason }

func unfit(format string, args ...any) error {
	return &Unfit{Reason: fmt.Sprintf(format, args...)}
}
