// Package topology turns what the GPUs say about their links into islands (groups of GPUs
// joined by a fast interconnect) and each GPU's bandwidth to its island peers.
//
//   - NVLink-connected GPUs form an island. On NVSwitch systems the far end of every link is a
//     switch, not a GPU; GPUs on the same switch fabric are one island (joined through the
//     switches), and each GPU's bandwidth is its own link count times the per-link speed.
//   - GPUs without NVLink form islands by PCIe: those under one PCIe switch tree (common
//     ancestor no farther than several switches, without crossing a host bridge), with the
//     PCIe link's bandwidth.
//
// Islands are named nvlink-group-N, numbered by their lowest GPU index, as in the API contract.
package topology

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
)

// GPU is what Compute needs to know about one GPU.
type GPU struct {
	Index int
	BusID string
	PCIe  gpu.PCIeLink
	Links []gpu.Link
}

// Input is a node's GPUs and the PCIe level between each pair: Ancestor[i][j] is the level
// between GPUs[i] and GPUs[j] (positions, not indices). A missing entry counts as LevelSystem.
type Input struct {
	GPUs     []GPU
	Ancestor [][]gpu.PCIeLevel
}

// Placement is where one GPU sits.
type Placement struct {
	Island        string
	BandwidthGBps int32
	// NVLink tells whether the GPU has at least one active NVLink to a peer or a switch.
	NVLink bool
}

// IslandName is the name of the k-th island of a node.
func IslandName(k int) string { return "nvlink-group-" + strconv.Itoa(k) }

// PerLinkGBps is the bidirectional bandwidth of one NVLink link of version v, in GB/s:
// NVLink 1 20+20, NVLink 2-4 25+25, NVLink 5 50+50. An A100 has 12 links (600 GB/s), an H100
// 18 (900 GB/s), a B200 18 (1800 GB/s). Unknown versions count as NVLink 2-4: a link that
// is up is never worth nothing.
func PerLinkGBps(v gpu.NVLinkVersion) int32 {
	switch v {
	case gpu.NVLinkVersion1_0:
		return 40
	case gpu.NVLinkVersion5_0:
		return 100
	default:
		return 50
	}
}

// PCIeGBps is the bidirectional bandwidth of a PCIe link in GB/s, counting 0.25, 0.5, 1, 2,
// 4, 8 GB/s per lane and direction for generations 1-6: Gen4 x16 is 64 GB/s.
func PCIeGBps(l gpu.PCIeLink) int32 {
	if l.Generation < 1 || l.Generation > 6 || l.Width < 1 || l.Width > 32 {
		return 0
	}
	perLaneMBps := int32(250) << (l.Generation - 1)
	return perLaneMBps * int32(l.Width) * 2 / 1000
}

// Compute places every GPU of in; the result is parallel to in.GPUs.
func Compute(in Input) []Placement {
	n := len(in.GPUs)
	byBus := make(map[string]int, n)
	for i, g := range in.GPUs {
		if g.BusID != "" {
			byBus[normBus(g.BusID)] = i
		}
	}
	// Union-find over GPUs (0..n-1) and the NVSwitches they reach (n..).
	uf := newUnionFind(n)
	switches := map[string]int{}
	switchNode := func(bus string) int {
		bus = normBus(bus)
		if id, ok := switches[bus]; ok {
			return id
		}
		id := uf.add()
		switches[bus] = id
		return id
	}
	out := make([]Placement, n)
	for i, g := range in.GPUs {
		var gbps int32
		for _, l := range g.Links {
			if !l.Active {
				continue
			}
			peer, isGPU := byBus[normBus(l.RemoteBusID)]
			switch {
			case l.RemoteType == gpu.RemoteGPU || (l.RemoteType == gpu.RemoteUnknown && isGPU):
				if !isGPU || peer == i {
					continue // a GPU this node does not show: no island to join
				}
				uf.union(i, peer)
			case l.RemoteType == gpu.RemoteSwitch || l.RemoteType == gpu.RemoteUnknown:
				// An empty bus ID still means "the switch fabric": all such links share one node.
				uf.union(i, switchNode(l.RemoteBusID))
			default:
				continue // CPU-attached NVLink (IBM NPU) joins no GPUs
			}
			gbps += PerLinkGBps(l.Version)
		}
		if gbps > 0 {
			out[i] = Placement{BandwidthGBps: gbps, NVLink: true}
		}
	}
	for i := range in.GPUs {
		if out[i].NVLink {
			continue
		}
		out[i].BandwidthGBps = PCIeGBps(in.GPUs[i].PCIe)
		for j := range i {
			if !out[j].NVLink && level(in.Ancestor, i, j) <= gpu.LevelMultiple {
				uf.union(i, j)
			}
		}
	}
	// Name islands in the order of their lowest GPU index.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(in.GPUs[a].Index, in.GPUs[b].Index) })
	names := map[int]string{}
	for _, i := range order {
		root := uf.find(i)
		name, ok := names[root]
		if !ok {
			name = IslandName(len(names))
			names[root] = name
		}
		out[i].Island = name
	}
	return out
}

func level(m [][]gpu.PCIeLevel, i, j int) gpu.PCIeLevel {
	if i < len(m) && j < len(m[i]) {
		return m[i][j]
	}
	return gpu.LevelSystem
}

func normBus(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

type unionFind struct{ parent []int }

func newUnionFind(n int) *unionFind {
	u := &unionFind{parent: make([]int, n)}
	for i := range u.parent {
		u.parent[i] = i
	}
	return u
}

func (u *unionFind) add() int {
	u.parent = append(u.parent, len(u.parent))
	return len(u.parent) - 1
}

func (u *unionFind) find(x int) int {
	for u.parent[x] != x {
		u.parent[x] = u.parent[u.parent[x]]
		x = u.parent[x]
	}
	return x
}

// union keeps the smaller root, so a GPU root wins over a switch root.
func (u *unionFind) union(a, b int) {
	ra, rb := u.find(a), u.find(b)
	if ra == rb {
		return
	}
	if ra < rb {
		u.parent[rb] = ra
	} else {
		u.parent[ra] = rb
	}
}
