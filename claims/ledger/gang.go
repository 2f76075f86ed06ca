package ledger

import (
	"slices"
	"time"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// GangKey is "namespace/gangRef"; empty for a claim outside a gang.
func GangKey(c *apiv1.GpuClaim) string {
	if c == nil || c.Spec.GangRef == "" {
		return ""
	}
	return c.Namespace + "/" + c.Spec.GangRef
}

// GangMember is a member claim not yet placed, with its request.
type GangMember struct {
	Claim *apiv1.GpuClaim
	Req   allocator.Request
}

// GangFits counts how many of members can have GPUs at the same time on the fresh nodes their
// selectors allow, placing the largest requests first, each on the node that fits it with
// the fewest free GPUs (best fit). It is a necessary condition, cheap enough for thousands of
// nodes: summaries rule nodes out, and the allocator is run only on the node chosen.
func (c *Ledger) GangFits(members []GangMember, oldest time.Time, selected func(*apiv1.GpuClaim, string) bool) int {
	placed, _ := c.GangPlan(members, oldest, selected)
	return placed
}

// GangPlan is GangFits that also names the node it placed each counted member on (a node
// appears once per member placed there): the nodes a gang still to place is expected to use.
func (c *Ledger) GangPlan(members []GangMember, oldest time.Time, selected func(*apiv1.GpuClaim, string) bool) (placed int, nodes []string) {
	return c.GangPlanOn(members, oldest, nil, selected)
}

// GangPlanOn is GangPlan over the named nodes only (all nodes when on is nil): a domain's
// nodes, without a walk over the fleet for each domain.
func (c *Ledger) GangPlanOn(members []GangMember, oldest time.Time, on []string, selected func(*apiv1.GpuClaim, string) bool) (placed int, nodes []string) {
	order := slices.Clone(members)
	slices.SortStableFunc(order, func(a, b GangMember) int { return b.Req.Count - a.Req.Count })
	c.mu.RLock()
	defer c.mu.RUnlock()
	names := on
	if names == nil {
		names = make([]string, 0, len(c.nodes))
		for name := range c.nodes {
			names = append(names, name)
		}
	}
	trial := map[string]*allocator.Node{} // nodes with members of this check placed on them
	for _, m := range order {
		best, bestFree := "", 0
		for _, name := range names {
			e := c.nodes[name]
			if e == nil || e.base == nil || e.heartbeat.Before(oldest) || !selected(m.Claim, name) {
				continue
			}
			free := 0
			if n, ok := trial[name]; ok {
				if _, err := allocator.Allocate(n, m.Req); err != nil {
					continue
				}
				free = FreeGPUs(n)
			} else {
				if e.sum.fits(&m.Req) == FitNone {
					continue
				}
				for _, is := range e.sum.islands {
					free += len(is.free)
				}
			}
			if best == "" || free < bestFree || free == bestFree && name < best {
				best, bestFree = name, free
			}
		}
		if best == "" {
			continue
		}
		n, ok := trial[best]
		if !ok {
			n = c.nodes[best].view.Clone()
		}
		res, err := allocator.Allocate(n, m.Req)
		if err != nil {
			continue // the summary and the allocator disagree: count the member as not fitting
		}
		for i := range n.GPUs {
			if j := slices.Index(res.IDs, n.GPUs[i].ID); j >= 0 {
				if m.Req.Exclusivity == allocator.Shared {
					n.GPUs[i].SharedHolders++
					if j < len(res.Shares) {
						n.GPUs[i].SharedMemoryMiB += res.Shares[j].MemoryMiB
						n.GPUs[i].SharedComputePercent += res.Shares[j].ComputePercent
					}
				} else {
					n.GPUs[i].ExclusiveHolder = "gang"
				}
			}
		}
		trial[best] = n
		placed++
		nodes = append(nodes, best)
	}
	return placed, nodes
}

// FreeGPUs counts a node's healthy GPUs nobody holds.
func FreeGPUs(n *allocator.Node) int {
	free := 0
	for _, g := range n.GPUs {
		if g.Health == allocator.Healthy && !g.MIGMode && g.ExclusiveHolder == "" && g.SharedHolders == 0 {
			free++
		}
	}
	return free
}
