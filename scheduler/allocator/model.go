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
	// UtilizationPercent is the recent utilization, or -1 when not reported.
	UtilizationPercent int
	// MemoryUsedPercent is the share of the GPU's memory in use (0 when not reported). It
	// counts only where UtilizationPercent is reported: a GPU whose kernels idle between
	// requests but whose memory is full is busy all the same.
	MemoryUsedPercent int
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
)

func (e Exclusivity) String() string {
	if e == Shared {
		return "Shared"
	}
	return "Exclusive"
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
	if r.Exclusivity > Shared {
		return fmt.Errorf("unknown exclusivity %d", r.Exclusivity)
	}
	if r.Topology > Ignore {
		return fmt.Errorf("unknown topology mode %d", r.Topology)
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

// Result is a placement on one node.
type Result struct {
	// IDs are the chosen GPU IDs, sorted.
	IDs []int
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
}

// Unfit is the reason a node cannot serve a request.
type Unfit struct {
	Reason string
}

func (u *Unfit) Error() string { return u.Reason }

func unfit(format string, args ...any) error {
	return &Unfit{Reason: fmt.Sprintf(format, args...)}
}
