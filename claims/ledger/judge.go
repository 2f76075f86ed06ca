package ledger

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Filter reasons are short and shared across nodes, so the scheduler's summary of a pending
// pod reads "3 node(s) had not enough healthy free GPUs" instead of one line per node.
const (
	ReasonSelector  = "node does not match the GpuClaim's selector"
	ReasonNoStatus  = "node has no GpuNodeStatus"
	ReasonStale     = "node's agent is silent: its GpuNodeStatus and liveness lease are stale"
	ReasonNoFit     = "not enough healthy free GPUs for the GpuClaim"
	ReasonNotPinned = "node is not the one the pod's gpu-scheduling-map entry names"
	ReasonNodeName  = "node name is longer than 63 characters: its GPU leases cannot be labelled with it"
	ReasonCapped    = "GPU candidates were capped (maxCandidateNodes); the pod is retried with every node before anything is preempted"
)

// DefaultFreshness is the scheduler's default statusFreshnessSeconds: how old a node's newest
// sign of life (its GpuNodeStatus heartbeat or liveness Lease renewal) may be before the node
// counts as silent. Clients that cannot read the scheduler's configuration (kubectl gpu) judge
// with it.
const DefaultFreshness = 10 * time.Minute

// Verdict is why a node cannot serve a claim.
type Verdict struct {
	// Reason is one of the Reason constants, or the error's text for Err.
	Reason string
	// Resolvable is true when freeing GPUs on the node (preemption) could change the answer;
	// false for a node that no eviction would help (no status, a silent agent).
	Resolvable bool
	// Unfit is the allocator's explanation when it turned the node down.
	Unfit *allocator.Unfit
	// Err is an unexpected error from the allocator; Reason is its text.
	Err error
}

// Judge is Filter's verdict on one node that matches the claim's selector: the placement, or
// why the node is refused. kubectl gpu explain runs it too (DryRun), so both give the same
// reasons.
func Judge(l *Ledger, node string, self types.UID, reqKey string, req allocator.Request, oldest time.Time) (allocator.Result, *Verdict) {
	res, heartbeat, err, ok := l.Place(node, self, reqKey, req)
	if !ok {
		return res, &Verdict{Reason: ReasonNoStatus}
	}
	if heartbeat.Before(oldest) {
		return res, &Verdict{Reason: ReasonStale}
	}
	var unfit *allocator.Unfit
	if errors.As(err, &unfit) {
		return res, &Verdict{Reason: ReasonNoFit, Resolvable: true, Unfit: unfit}
	}
	if err != nil {
		return res, &Verdict{Reason: err.Error(), Err: err}
	}
	return res, nil
}

// CapsRuledOut names the caps of a Shared request's share (memory, compute, sharers) that keep
// it off the nodes fresh since oldest (and kept by keep) that would take it without them: how
// many nodes, how many of their GPUs each cap refused, and one refusal's numbers. Empty when
// the request states no share and no sharer bound, or no node was refused for them alone.
func (c *Ledger) CapsRuledOut(req *allocator.Request, oldest time.Time, keep func(node string) bool) string {
	if req.Exclusivity != allocator.Shared || (req.Share == (allocator.Share{}) && req.MaxSharers == 0) {
		return ""
	}
	uncapped := *req
	uncapped.Share, uncapped.MaxSharers = allocator.Share{}, 0
	c.mu.RLock()
	defer c.mu.RUnlock()
	nodes := 0
	gpus := map[string]int{}
	detail := ""
	for _, g := range c.shapes {
		if g.sum.fits(&uncapped) == FitNone || g.sum.fits(req) != FitNone {
			continue
		}
		for name, e := range g.nodes {
			if e.heartbeat.Before(oldest) || !keep(name) {
				continue
			}
			nodes++
			for i := range e.view.GPUs {
				gpu := &e.view.GPUs[i]
				if gpu.Health != allocator.Healthy || gpu.ExclusiveHolder != "" {
					continue
				}
				if cause, why := allocator.ShareCap(gpu, req.Share, req.MaxSharers); cause != "" {
					gpus[cause]++
					if detail == "" {
						detail = "node " + name + ": " + why
					}
				}
			}
		}
	}
	if nodes == 0 {
		return ""
	}
	var causes []string
	for _, cause := range []string{allocator.CapMemory, allocator.CapCompute, allocator.CapSharers} {
		if n := gpus[cause]; n > 0 {
			causes = append(causes, fmt.Sprintf("%d GPUs at the %s cap", n, cause))
		}
	}
	return fmt.Sprintf("; %d nodes have shareable GPUs but none with room for its share (%s; %s)", nodes, strings.Join(causes, ", "), detail)
}

// MIGElsewhere names what the nodes fresh since oldest (and kept by keep) have free instead,
// for a MIG request that no node can serve: how many nodes have free MIG devices of each
// profile, the asked one included where too few. It starts with "; ". Empty for other
// requests.
func (c *Ledger) MIGElsewhere(req *allocator.Request, oldest time.Time, keep func(node string) bool) string {
	if req.Exclusivity != allocator.MIG {
		return ""
	}
	nodes := map[string]int{}
	c.mu.RLock()
	for _, g := range c.shapes {
		if len(g.sum.mig) == 0 {
			continue
		}
		for name, e := range g.nodes {
			if e.heartbeat.Before(oldest) || !keep(name) {
				continue
			}
			for profile := range g.sum.mig {
				nodes[profile]++
			}
		}
	}
	c.mu.RUnlock()
	const layout = " (the MIG layout is set by the operator: docs/sharing.md)"
	if len(nodes) == 0 {
		return "; no node has a free MIG device of any profile" + layout
	}
	profiles := slices.Sorted(maps.Keys(nodes))
	parts := make([]string, len(profiles))
	for i, p := range profiles {
		n := nodes[p]
		parts[i] = fmt.Sprintf("%d %s %s free", n, plural(n, "node has", "nodes have"), p)
		if p == req.MIGProfile {
			parts[i] += fmt.Sprintf(" (fewer than %d)", req.Count)
		}
	}
	return "; " + strings.Join(parts, ", ") + layout
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
