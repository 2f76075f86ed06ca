package gpuclaim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
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
// why they wait. The zero domain, with no status, means anywhere.
func (p *Plugin) gangDomain(g gang, claim *apiv1.GpuClaim, unplaced []ledger.GangMember, need int, oldest time.Time) (domain, *fwk.Status) {
	topo := claim.Spec.GangTopology
	if topo == nil {
		return domain{}, nil
	}
	levels := p.args.TopologyLevels
	i := slices.Index(levels, topo.Level)
	if i < 0 {
		return domain{}, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"gang %s: spec.gangTopology.level %q is not one of the scheduler's topologyLevels [%s]", g.key, topo.Level, strings.Join(levels, ", ")))
	}
	required := topo.Mode == apiv1.TopologyRequired
	try := levels[i:]
	if required {
		try = levels[i : i+1]
	}
	labels := p.nodeLabels()
	placed := p.gangNodes(g)
	for _, level := range try {
		d, fits, why := p.domainAt(claim, level, labels, placed, unplaced, need, oldest)
		if fits {
			return d, nil
		}
		if required {
			return domain{}, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s (gangTopology %s, Required): %s", g.key, level, why))
		}
	}
	return domain{}, nil
}

// domainAt chooses the domain of level for the gang: the one its placed members are in, or the
// best-fitting one with room for all need members still to place. fits is false, with why,
// when there is none. Domains are counted on the nodes claim's selector allows.
func (p *Plugin) domainAt(claim *apiv1.GpuClaim, level string, labels map[string]map[string]string, placed []string, unplaced []ledger.GangMember, need int, oldest time.Time) (d domain, fits bool, why string) {
	in := func(d domain) func(*apiv1.GpuClaim, string) bool {
		return func(c *apiv1.GpuClaim, node string) bool {
			return d.holds(labels[node]) && p.nodeSelected(c, node)
		}
	}
	if len(placed) > 0 {
		values := map[string]bool{}
		for _, n := range placed {
			v, ok := labels[n][level]
			if !ok {
				return domain{}, false, fmt.Sprintf("member node %s has no label %s", n, level)
			}
			values[v] = true
		}
		if len(values) > 1 {
			return domain{}, false, fmt.Sprintf("members already placed span %d domains of %s", len(values), level)
		}
		d := domain{level: level, value: labels[placed[0]][level]}
		if need == 0 || p.ledger.GangFits(unplaced, oldest, in(d)) >= need {
			return d, true, ""
		}
		return domain{}, false, fmt.Sprintf("its domain %s, where members are placed, has no room for the %d still to place", d, need)
	}
	type block struct {
		d          domain
		free, size int
	}
	blocks := map[string]*block{}
	for node, l := range labels {
		v, ok := l[level]
		if !ok || !p.nodeSelected(claim, node) {
			continue
		}
		b := blocks[v]
		if b == nil {
			b = &block{d: domain{level: level, value: v}}
			blocks[v] = b
		}
		if n, heartbeat := p.ledger.NodeView(node); n != nil && !heartbeat.Before(oldest) {
			b.free += ledger.FreeGPUs(n)
			b.size++
		}
	}
	var best, largest *block
	for _, b := range blocks {
		if largest == nil || b.free > largest.free || b.free == largest.free && b.d.value < largest.d.value {
			largest = b
		}
		if p.ledger.GangFits(unplaced, oldest, in(b.d)) < need {
			continue
		}
		if best == nil || b.free < best.free || b.free == best.free && b.d.value < best.d.value {
			best = b
		}
	}
	switch {
	case best != nil:
		return best.d, true, ""
	case largest == nil:
		return domain{}, false, fmt.Sprintf("no node the claim may use has the label %s", level)
	default:
		return domain{}, false, fmt.Sprintf("no domain of %s has room for all %d pods at once; the largest free block is %d GPUs on %d nodes in %s",
			level, need, largest.free, largest.size, largest.d)
	}
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

// nodeLabels are the labels of every node in the scheduler's snapshot, by node name.
func (p *Plugin) nodeLabels() map[string]map[string]string {
	out := map[string]map[string]string{}
	if p.handle == nil {
		return out
	}
	infos, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return out
	}
	for _, ni := range infos {
		if n := ni.Node(); n != nil {
			out[n.Name] = n.Labels
		}
	}
	return out
}

// inDomain tells whether node, in the scheduler's snapshot, is in d.
func (p *Plugin) inDomain(d domain, node string) bool {
	if d.level == "" {
		return true
	}
	ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(node)
	return err == nil && ni.Node() != nil && d.holds(ni.Node().Labels)
}
