package gpuclaim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Gang topology: a gang whose claims state spec.gangTopology has all its nodes inside one
// domain of a topology level, the nodes sharing one value of a node label (Args.TopologyLevels,
// for example nvidia.com/gpu.clique: one NVLink domain). The domain is chosen in the same
// decision as the gang's fit: PreFilter of the first member looks for the domains where every
// member not yet placed fits at once (ledger.GangFits on that domain's nodes alone) and takes
// the one with the fewest free GPUs left over, so that partly used domains fill before whole
// ones are broken into; the members after it follow the domain of those already placed. Every
// member is offered, and Filter accepts, only nodes of that domain. Required waits, with the
// level and the largest free block named, when no domain has room; Preferred tries the next
// broader level, then any node.

// reasonOutsideDomain is Filter's reason for a node outside the gang's domain.
const reasonOutsideDomain = "node is outside the topology domain its gang is placed in (spec.gangTopology)"

// reasonHeldForGang is Filter's reason for a node another gang holds in its domain.
const reasonHeldForGang = "node is held for the pods still to place of a gang placed in its topology domain (spec.gangTopology)"

// domain is one value of a topology level; the zero domain is every node.
type domain struct {
	level, value string
}

func (d domain) String() string { return d.level + "=" + d.value }

// holds reports whether a node with these labels is in the domain.
func (d domain) holds(labels map[string]string) bool {
	if d.level == "" {
		return true
	}
	v, ok := labels[d.level]
	return ok && v == d.value
}

// gangDomain is the domain the gang's members not yet placed (unplaced, need of them) go to, or
// why they wait. The zero domain, with no status, means anywhere. The nodes the chosen domain
// is to give the members still to place are held for them (domains.go); a Required gang that
// no domain has room for drains the one nearest to fitting it.
func (p *Plugin) gangDomain(g gang, claim *apiv1.GpuClaim, unplaced []ledger.GangMember, need int, oldest time.Time) (domain, *fwk.Status) {
	topo := claim.Spec.GangTopology
	if topo == nil {
		p.holds.release(g.key)
		return domain{}, nil
	}
	levels := p.args.TopologyLevels
	i := slices.Index(levels, topo.Level)
	if i < 0 {
		p.holds.release(g.key)
		return domain{}, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"gang %s: spec.gangTopology.level %q is not one of the scheduler's topologyLevels [%s]", g.key, topo.Level, strings.Join(levels, ", ")))
	}
	required := topo.Mode == apiv1.TopologyRequired
	try := levels[i:]
	if required {
		try = levels[i : i+1]
	}
	placed := p.gangNodes(g)
	for _, level := range try {
		c := domainChoice{g: g, claim: claim, level: level, placed: placed, unplaced: unplaced, need: need, oldest: oldest}
		d, plan, fits, why := p.domainAt(c)
		if fits {
			if need == 0 {
				p.holds.release(g.key)
			} else {
				p.holds.set(g.key, d, plan, false)
			}
			return d, nil
		}
		if required {
			if len(placed) == 0 {
				why += p.drain(c)
			} else {
				p.holds.release(g.key)
			}
			return domain{}, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s (gangTopology %s, Required): %s", g.key, level, why))
		}
	}
	p.holds.release(g.key)
	return domain{}, nil
}

// domainChoice is what the choice of a gang's domain at one level reads.
type domainChoice struct {
	g        gang
	claim    *apiv1.GpuClaim
	level    string
	placed   []string // the nodes of the members already placed
	unplaced []ledger.GangMember
	need     int
	oldest   time.Time
}

// in is whether a member may use node inside d: the member's selector allows it and no other
// gang holds it.
func (p *Plugin) in(c domainChoice, d domain) func(*apiv1.GpuClaim, string) bool {
	return func(m *apiv1.GpuClaim, node string) bool {
		return p.domains.contains(d, node) && p.nodeSelected(m, node) && p.holds.holder(node, c.g.key) == ""
	}
}

// domainAt chooses the domain of c.level for the gang: the one its placed members are in, or
// the best-fitting one with room for all members still to place. plan names the nodes those
// members would use there. fits is false, with why, when there is none. Domains are counted on
// the nodes the claim's selector allows.
func (p *Plugin) domainAt(c domainChoice) (d domain, plan []string, fits bool, why string) {
	if len(c.placed) > 0 {
		var values []string
		for _, n := range c.placed {
			v, ok := p.domains.value(n, c.level)
			if !ok {
				return domain{}, nil, false, fmt.Sprintf("member node %s has no label %s", n, c.level)
			}
			if !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
		if len(values) > 1 {
			return domain{}, nil, false, fmt.Sprintf("members already placed span %d domains of %s", len(values), c.level)
		}
		d := domain{level: c.level, value: values[0]}
		if c.need == 0 {
			return d, nil, true, ""
		}
		if n, plan := p.ledger.GangPlanOn(c.unplaced, c.oldest, p.domains.nodes(d), p.in(c, d)); n >= c.need {
			return d, plan, true, ""
		}
		return domain{}, nil, false, fmt.Sprintf("its domain %s, where members are placed, has no room for the %d still to place", d, c.need)
	}
	var best, largest *block
	for _, dom := range p.domains.domains(c.level) {
		b := p.blockOf(c, dom)
		if b.size == 0 {
			continue
		}
		if largest == nil || b.free > largest.free {
			largest = b
		}
		if best != nil && b.free >= best.free {
			continue // a fuller domain that fits is chosen already
		}
		if n, plan := p.ledger.GangPlanOn(c.unplaced, c.oldest, b.nodes, p.in(c, dom)); n >= c.need {
			best, b.plan = b, plan
		}
	}
	switch {
	case best != nil:
		return best.d, best.plan, true, ""
	case largest == nil:
		return domain{}, nil, false, fmt.Sprintf("no node the claim may use has the label %s", c.level)
	default:
		return domain{}, nil, false, fmt.Sprintf("no domain of %s has room for all %d pods at once; the largest free block is %d GPUs on %d nodes in %s",
			c.level, c.need, largest.free, largest.size, largest.d)
	}
}

// block is a domain as the gang may use it: its nodes the claim's selector allows (fresh ones
// only count), their free and healthy GPUs.
type block struct {
	d                   domain
	nodes               []string
	free, healthy, size int
	heldByOther         bool
	plan                []string
}

func (p *Plugin) blockOf(c domainChoice, d domain) *block {
	b := &block{d: d}
	for _, node := range p.domains.nodes(d) {
		if !p.nodeSelected(c.claim, node) {
			continue
		}
		b.nodes = append(b.nodes, node)
		if p.holds.holder(node, c.g.key) != "" {
			b.heldByOther = true
			continue
		}
		if n, heartbeat := p.ledger.NodeView(node); n != nil && !heartbeat.Before(c.oldest) {
			b.free += ledger.FreeGPUs(n)
			b.healthy += healthyGPUs(n)
			b.size++
		}
	}
	return b
}

// drain makes the gang, which no domain of c.level has room for, hold the domain nearest to
// fitting it (the most free GPUs among those with enough healthy GPUs for all its pods, and no
// node held by another gang), so that GPUs freed there stay free until it fits. It keeps the
// domain it drains already while that one can still take it. The text it returns is added to
// the gang's reason.
func (p *Plugin) drain(c domainChoice) string {
	if other := p.holds.draining(c.level, c.g.key); other != "" {
		p.holds.release(c.g.key)
		return fmt.Sprintf("; gang %s, waiting longer, has a domain of %s kept for it", other, c.level)
	}
	want := 0
	for _, m := range c.unplaced {
		want += m.Req.Count
	}
	held, draining, ok := p.holds.held(c.g.key)
	var best *block
	for _, dom := range p.domains.domains(c.level) {
		b := p.blockOf(c, dom)
		if b.heldByOther || b.healthy < want {
			continue
		}
		if ok && draining && dom == held {
			best = b
			break
		}
		if best == nil || b.free > best.free {
			best = b
		}
	}
	if best == nil {
		p.holds.release(c.g.key)
		return fmt.Sprintf("; no domain of %s has %d healthy GPUs free of other gangs' holds", c.level, want)
	}
	p.holds.set(c.g.key, best.d, best.nodes, true)
	return fmt.Sprintf("; %s is kept for it: other pods keep off its nodes until the gang fits", best.d)
}

// healthyGPUs counts a node's healthy GPUs, held or not.
func healthyGPUs(n *allocator.Node) int {
	out := 0
	for _, g := range n.GPUs {
		if g.Health == allocator.Healthy {
			out++
		}
	}
	return out
}

// gangNodes are the nodes of the gang's members that have GPUs for a live pod: reserved in the
// ledger, or bound (the claim's status).
func (p *Plugin) gangNodes(g gang) []string {
	var out []string
	for _, c := range g.members {
		holder, ok := p.claimHolder(c)
		if !ok {
			continue
		}
		if node, _ := p.ledger.HoldsOf(holder.UID); node != "" {
			out = append(out, node)
		} else if c.Status.NodeName != "" {
			out = append(out, c.Status.NodeName)
		}
	}
	return out
}

// inDomain tells whether node is in d.
func (p *Plugin) inDomain(d domain, node string) bool { return p.domains.contains(d, node) }
