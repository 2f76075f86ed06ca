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
	order := slices.Clone(members)
	slices.SortStableFunc(order, func(a, b GangMember) int { return b.Req.Count - a.Req.Count })
	c.mu.RLock()
	defer c.mu.RUnlock()
	trial := map[string]*allocator.Node{} // nodes with members of this check placed on them
	placed := 0
	for _, m := range order {
		best, bestFree := "", 0
		for name, e := range c.nodes {
			if e.base == nil || e.heartbeat.Before(oldest) || !selected(m.Claim, name) {
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
			if slices.Contains(res.IDs, n.GPUs[i].ID) {
				if m.Req.Exclusivity == allocator.Shared {
					n.GPUs[i].SharedHolders++
				} else {
					n.GPUs[i].ExclusiveHolder = "gang"
				}
			}
		}
		trial[best] = n
		placed++
	}
	return placed
}

// FreeGPUs counts a node's healthy GPUs nobody holds.
func FreeGPUs(n *allocator.Node) int {
	free := 0
	for _, g := range n.GPUs {
		if g.Health == allocator.Healthy && g.ExclusiveHolder == "" && g.SharedHolders == 0 {
			free++
		}
	}
	return free
}
