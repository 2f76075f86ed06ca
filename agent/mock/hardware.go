package mock

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"
)

// HardwareAPIVersion and HardwareKind start every hardware file (scenarios/hardware/*.yaml).
const (
	HardwareAPIVersion = "sim.gpu.scheduling/v1alpha1"
	HardwareKind       = "Hardware"
)

// MaxGPUs is the most GPUs one described node may have.
const MaxGPUs = 64

// Hardware describes one kind of GPU node as data: its GPUs, their place in the PCIe tree
// (NUMA nodes, host bridges, PCIe switches), their NVLinks (GPU-to-GPU bridges and NVSwitch
// domains) and, for rack-scale systems, the multi-node NVLink domain the node belongs to. The
// mock NVML server is built from it (Build), so the agent's discovery reads it as it would
// read the hardware.
type Hardware struct {
	APIVersion string           `json:"apiVersion,omitempty"`
	Kind       string           `json:"kind,omitempty"`
	Metadata   HardwareMetadata `json:"metadata"`
	Spec       HardwareSpec     `json:"spec"`
}

// HardwareMetadata names a hardware description; the name is the node label
// gpu.scheduling/topology.
type HardwareMetadata struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// HardwareSpec is the node's GPUs and interconnect.
type HardwareSpec struct {
	GPUs GPUSpec `json:"gpus"`
	// NUMANodes place the GPUs in the PCIe tree. Left out, every GPU sits on its own host
	// bridge of one NUMA node.
	NUMANodes []NUMANode `json:"numaNodes,omitempty"`
	// NVLink joins GPUs directly or through NVSwitches; left out, the GPUs have no NVLink.
	NVLink *NVLinkSpec `json:"nvlink,omitempty"`
	// MultiNode puts the node's GPUs in an NVLink domain that spans several nodes (GB200 NVL72):
	// NVML reports it as the fabric's cluster UUID and clique ID.
	MultiNode *MultiNodeSpec `json:"multiNode,omitempty"`
	// RemapFailures are GPUs that start with a failed row remapping, so Unhealthy.
	RemapFailures []int `json:"remapFailures,omitempty"`
	// MIG puts GPUs in MIG mode with a layout of MIG devices, checked against the model's
	// MIG placement table (MIGTableFor). GPUs of a model with a table and not listed support
	// MIG with the mode off.
	MIG *MIGSpec `json:"mig,omitempty"`
}

// GPUSpec is what every GPU of the node is.
type GPUSpec struct {
	// Count is how many GPUs the node has (1 to MaxGPUs); NVML indexes them 0..Count-1.
	Count int `json:"count"`
	// Model is the product name NVML reports, e.g. "NVIDIA H100 80GB HBM3".
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	// PCIeGeneration (1-6) and PCIeWidth (lanes, default 16) give the PCIe bandwidth.
	PCIeGeneration int `json:"pcieGeneration"`
	PCIeWidth      int `json:"pcieWidth,omitempty"`
	// BusIDs are the GPUs' PCI bus numbers in index order, two hex digits each ("07");
	// default 01, 02, ...
	BusIDs []string `json:"busIds,omitempty"`
	// MinorNumbers are the driver's minor numbers of the GPUs in index order (the GPU's device
	// node is /dev/nvidia<minor>); default the index. The driver numbers GPUs in its probe
	// order, NVML indexes them by PCI bus ID, and the two need not agree.
	MinorNumbers []int `json:"minorNumbers,omitempty"`
}

// maxMinor is the largest minor number of a GPU device node: 255 is /dev/nvidiactl.
const maxMinor = 254

// NUMANode is one CPU socket's part of the PCIe tree.
type NUMANode struct {
	ID          int          `json:"id"`
	HostBridges []HostBridge `json:"hostBridges"`
}

// HostBridge is a PCIe root complex; GPUs sit on it directly or under its switches.
type HostBridge struct {
	ID       int          `json:"id"`
	Switches []PCIeSwitch `json:"switches,omitempty"`
	GPUs     []int        `json:"gpus,omitempty"`
}

// PCIeSwitch holds GPUs and further switches.
type PCIeSwitch struct {
	ID       int          `json:"id"`
	Switches []PCIeSwitch `json:"switches,omitempty"`
	GPUs     []int        `json:"gpus,omitempty"`
}

// NVLinkSpec is the node's NVLink wiring.
type NVLinkSpec struct {
	// Version (1-5) of every link unless a link or switch says otherwise. The agent counts
	// 40 GB/s per link for NVLink 1, 50 for 2-4, 100 for 5 (both directions).
	Version int `json:"version"`
	// Links are GPU-to-GPU NVLink bridges.
	Links []NVLinkBridge `json:"links,omitempty"`
	// Switches are NVSwitch chips: each member GPU has LinksPerGPU links to the chip. GPUs on
	// chips that share members are one island.
	Switches []NVSwitch `json:"switches,omitempty"`
}

// NVLinkBridge is Count links between GPUs From and To. A bridge is two-way: writing it
// once is enough; writing the reverse too is allowed if it says the same.
type NVLinkBridge struct {
	From    int `json:"from"`
	To      int `json:"to"`
	Count   int `json:"count"`
	Version int `json:"version,omitempty"`
}

// NVSwitch is one NVSwitch chip and the GPUs wired to it.
type NVSwitch struct {
	ID int `json:"id"`
	// GPUs wired to the chip; default all of the node's GPUs.
	GPUs        []int `json:"gpus,omitempty"`
	LinksPerGPU int   `json:"linksPerGPU"`
	Version     int   `json:"version,omitempty"`
}

// MultiNodeSpec is an NVLink domain shared by several nodes (an NVL72 rack: 18 nodes of 4 GPUs).
type MultiNodeSpec struct {
	// NodesPerDomain is how many consecutive nodes of a pool share one domain (clique).
	NodesPerDomain int `json:"nodesPerDomain"`
	// CliqueID NVML reports for the domain's GPUs (default 1).
	CliqueID int `json:"cliqueId,omitempty"`
}

// HardwareError is one problem of a description: the field path from the description's root
// (spec.nvlink.links[2].to) and what is wrong.
type HardwareError struct {
	Path string
	Msg  string
}

// Validate checks a description; it returns every problem, in field order. A valid
// description always builds.
func (h *Hardware) Validate() []HardwareError {
	var errs []HardwareError
	add := func(path, format string, args ...any) {
		errs = append(errs, HardwareError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if h.APIVersion != "" && h.APIVersion != HardwareAPIVersion {
		add("apiVersion", "must be %s, got %q", HardwareAPIVersion, h.APIVersion)
	}
	if h.Kind != "" && h.Kind != HardwareKind {
		add("kind", "must be %s, got %q", HardwareKind, h.Kind)
	}
	if !validName(h.Metadata.Name) {
		add("metadata.name", "%q is not a valid hardware name; use at most 63 lower-case letters, digits and '-' (it becomes the node label gpu.scheduling/topology)", h.Metadata.Name)
	}
	s := &h.Spec
	g := s.GPUs
	n := g.Count
	if n < 1 || n > MaxGPUs {
		add("spec.gpus.count", "must be between 1 and %d, got %d", MaxGPUs, n)
	}
	if strings.TrimSpace(g.Model) == "" {
		add("spec.gpus.model", "is required: the product name NVML reports, e.g. \"NVIDIA H100 80GB HBM3\"")
	}
	if g.MemoryMiB <= 0 {
		add("spec.gpus.memoryMiB", "must be positive, got %d", g.MemoryMiB)
	}
	if g.PCIeGeneration < 1 || g.PCIeGeneration > 6 {
		add("spec.gpus.pcieGeneration", "must be between 1 and 6, got %d", g.PCIeGeneration)
	}
	if g.PCIeWidth != 0 && !slices.Contains([]int{1, 2, 4, 8, 16, 32}, g.PCIeWidth) {
		add("spec.gpus.pcieWidth", "must be 1, 2, 4, 8, 16 or 32 lanes, got %d", g.PCIeWidth)
	}
	if len(g.BusIDs) > 0 && len(g.BusIDs) != n {
		add("spec.gpus.busIds", "lists %d bus IDs for %d GPUs; give one per GPU or leave busIds out", len(g.BusIDs), n)
	}
	buses := map[string]int{}
	for i, b := range g.BusIDs {
		p := fmt.Sprintf("spec.gpus.busIds[%d]", i)
		if v, err := strconv.ParseUint(b, 16, 8); err != nil || len(b) != 2 {
			add(p, "%q is not a PCI bus number; write two hex digits, e.g. \"07\"", b)
		} else if j, dup := buses[fmt.Sprintf("%02x", v)]; dup {
			add(p, "bus %s is also GPU %d's; each GPU has its own bus", b, j)
		} else {
			buses[fmt.Sprintf("%02x", v)] = i
		}
	}
	if len(g.MinorNumbers) > 0 && len(g.MinorNumbers) != n {
		add("spec.gpus.minorNumbers", "lists %d minor numbers for %d GPUs; give one per GPU or leave minorNumbers out", len(g.MinorNumbers), n)
	}
	minors := map[int]int{}
	for i, m := range g.MinorNumbers {
		p := fmt.Sprintf("spec.gpus.minorNumbers[%d]", i)
		if m < 0 || m > maxMinor {
			add(p, "must be between 0 and %d (255 is /dev/nvidiactl), got %d", maxMinor, m)
		} else if j, dup := minors[m]; dup {
			add(p, "minor %d is also GPU %d's; each GPU has its own device node", m, j)
		} else {
			minors[m] = i
		}
	}
	gpu := func(path string, id int) bool {
		if n >= 1 && (id < 0 || id >= n) {
			add(path, "GPU %d does not exist; this node has GPUs 0..%d", id, n-1)
			return false
		}
		return true
	}

	// The PCIe tree: every GPU exactly once, every ID unique at its level.
	if len(s.NUMANodes) > 0 {
		placed := map[int]string{}
		numaIDs, hbIDs, swIDs := map[int]bool{}, map[int]bool{}, map[int]bool{}
		var walkSwitches func(path string, sws []PCIeSwitch)
		place := func(path string, ids []int) {
			for k, id := range ids {
				p := fmt.Sprintf("%s.gpus[%d]", path, k)
				if !gpu(p, id) {
					continue
				}
				if prev, dup := placed[id]; dup {
					add(p, "GPU %d is already placed at %s; a GPU sits in one place of the PCIe tree", id, prev)
					continue
				}
				placed[id] = p
			}
		}
		walkSwitches = func(path string, sws []PCIeSwitch) {
			for k, sw := range sws {
				p := fmt.Sprintf("%s.switches[%d]", path, k)
				if swIDs[sw.ID] {
					add(p+".id", "PCIe switch %d is defined twice; give each switch its own id", sw.ID)
				}
				swIDs[sw.ID] = true
				if len(sw.GPUs) == 0 && len(sw.Switches) == 0 {
					add(p, "holds no GPUs and no switches; remove it")
				}
				place(p, sw.GPUs)
				walkSwitches(p, sw.Switches)
			}
		}
		for i, nn := range s.NUMANodes {
			p := fmt.Sprintf("spec.numaNodes[%d]", i)
			if numaIDs[nn.ID] {
				add(p+".id", "NUMA node %d is defined twice; give each its own id", nn.ID)
			}
			numaIDs[nn.ID] = true
			if len(nn.HostBridges) == 0 {
				add(p+".hostBridges", "a NUMA node needs at least one host bridge holding GPUs")
			}
			for j, hb := range nn.HostBridges {
				hp := fmt.Sprintf("%s.hostBridges[%d]", p, j)
				if hbIDs[hb.ID] {
					add(hp+".id", "host bridge %d is defined twice; give each its own id", hb.ID)
				}
				hbIDs[hb.ID] = true
				if len(hb.GPUs) == 0 && len(hb.Switches) == 0 {
					add(hp, "holds no GPUs and no switches; remove it")
				}
				place(hp, hb.GPUs)
				walkSwitches(hp, hb.Switches)
			}
		}
		var missing []string
		for id := range max(n, 0) {
			if _, ok := placed[id]; !ok && n <= MaxGPUs {
				missing = append(missing, strconv.Itoa(id))
			}
		}
		if len(missing) > 0 {
			add("spec.numaNodes", "GPU(s) %s are not placed in the PCIe tree; the tree must hold all %d GPUs", strings.Join(missing, ", "), n)
		}
	}

	if nv := s.NVLink; nv != nil {
		version := func(path string, v int) {
			if v < 1 || v > 5 {
				add(path, "NVLink version must be 1 to 5, got %d", v)
			}
		}
		version("spec.nvlink.version", nv.Version)
		if len(nv.Links) == 0 && len(nv.Switches) == 0 {
			add("spec.nvlink", "has no links and no switches; remove nvlink for a PCIe-only node")
		}
		type pair struct{ a, b int }
		seen := map[pair]int{}
		perGPU := make([]int, max(n, 0))
		for i, l := range nv.Links {
			p := fmt.Sprintf("spec.nvlink.links[%d]", i)
			okFrom, okTo := gpu(p+".from", l.From), gpu(p+".to", l.To)
			if l.Count < 1 {
				add(p+".count", "must be at least 1 link, got %d", l.Count)
			}
			if l.Version != 0 {
				version(p+".version", l.Version)
			}
			if !okFrom || !okTo {
				continue
			}
			if l.From == l.To {
				add(p+".to", "GPU %d cannot have an NVLink to itself", l.From)
				continue
			}
			if j, dup := seen[pair{l.From, l.To}]; dup {
				add(p, "GPUs %d and %d are already linked by links[%d]; write each bridge once", l.From, l.To, j)
				continue
			}
			if j, rev := seen[pair{l.To, l.From}]; rev {
				r := nv.Links[j]
				if r.Count != l.Count || linkVersion(r.Version, nv.Version) != linkVersion(l.Version, nv.Version) {
					add(p, "asymmetric link: %d→%d has %d NVLink %d link(s) but links[%d] gives %d→%d %d NVLink %d link(s); an NVLink bridge is the same both ways",
						l.From, l.To, l.Count, linkVersion(l.Version, nv.Version), j, r.From, r.To, r.Count, linkVersion(r.Version, nv.Version))
				}
				seen[pair{l.From, l.To}] = i
				continue
			}
			seen[pair{l.From, l.To}] = i
			perGPU[l.From] += l.Count
			perGPU[l.To] += l.Count
		}
		switchIDs := map[int]bool{}
		for i, sw := range nv.Switches {
			p := fmt.Sprintf("spec.nvlink.switches[%d]", i)
			if switchIDs[sw.ID] {
				add(p+".id", "NVSwitch %d is defined twice; give each its own id", sw.ID)
			}
			switchIDs[sw.ID] = true
			if sw.LinksPerGPU < 1 {
				add(p+".linksPerGPU", "must be at least 1, got %d", sw.LinksPerGPU)
			}
			if sw.Version != 0 {
				version(p+".version", sw.Version)
			}
			members := sw.GPUs
			if len(members) == 0 {
				members = allGPUs(n)
			}
			if len(members) == 1 || n == 1 {
				add(p+".gpus", "an NVSwitch domain needs at least 2 GPUs, got %d; a lone GPU has no NVLink peer", len(members))
			}
			inSwitch := map[int]bool{}
			for k, id := range sw.GPUs {
				gp := fmt.Sprintf("%s.gpus[%d]", p, k)
				if !gpu(gp, id) {
					continue
				}
				if inSwitch[id] {
					add(gp, "GPU %d is listed twice", id)
				}
				inSwitch[id] = true
			}
			for _, id := range members {
				if id >= 0 && id < len(perGPU) {
					perGPU[id] += max(sw.LinksPerGPU, 0)
				}
			}
		}
		for id, c := range perGPU {
			if c > nvml.NVLINK_MAX_LINKS {
				add("spec.nvlink", "GPU %d has %d NVLinks; NVML counts at most %d per GPU", id, c, nvml.NVLINK_MAX_LINKS)
			}
		}
	}
	if m := s.MultiNode; m != nil {
		if m.NodesPerDomain < 2 {
			add("spec.multiNode.nodesPerDomain", "a multi-node NVLink domain spans at least 2 nodes, got %d; remove multiNode for a single node", m.NodesPerDomain)
		}
		if m.CliqueID < 0 {
			add("spec.multiNode.cliqueId", "must not be negative, got %d", m.CliqueID)
		}
		if s.NVLink == nil {
			add("spec.multiNode", "a multi-node NVLink domain needs the GPUs' NVLinks to the switch trays; add nvlink.switches")
		}
	}
	for i, id := range s.RemapFailures {
		gpu(fmt.Sprintf("spec.remapFailures[%d]", i), id)
	}
	validateMIG(s, add)
	return errs
}

func linkVersion(v, dflt int) int {
	if v == 0 {
		return dflt
	}
	return v
}

func allGPUs(n int) []int {
	out := make([]int, max(n, 0))
	for i := range out {
		out[i] = i
	}
	return out
}

func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// nvlinkVersions maps a description's version number to NVML's.
var nvlinkVersions = map[int]nvml.NvlinkVersion{
	1: nvml.NVLINK_VERSION_1_0, 2: nvml.NVLINK_VERSION_2_0, 3: nvml.NVLINK_VERSION_3_0,
	4: nvml.NVLINK_VERSION_4_0, 5: nvml.NVLINK_VERSION_5_0,
}

// Build makes a mock server from a description; it fails on one that does not validate.
func Build(h *Hardware, opts ...Option) (*Server, error) {
	if errs := h.Validate(); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Path + ": " + e.Msg
		}
		return nil, fmt.Errorf("hardware %q: %s", h.Metadata.Name, strings.Join(msgs, "; "))
	}
	sp := &h.Spec
	n := sp.GPUs.Count
	width := sp.GPUs.PCIeWidth
	if width == 0 {
		width = 16
	}
	s := &Server{topology: h.Metadata.Name, multiNode: sp.MultiNode, clock: clock.RealClock{}}
	for i := range n {
		bus := fmt.Sprintf("%02x", i+1)
		if len(sp.GPUs.BusIDs) == n {
			bus = strings.ToLower(sp.GPUs.BusIDs[i])
		}
		minor := i
		if len(sp.GPUs.MinorNumbers) == n {
			minor = sp.GPUs.MinorNumbers[i]
		}
		s.devices = append(s.devices, &Device{
			server:     s,
			index:      i,
			minor:      minor,
			uuid:       deviceUUID("", h.Metadata.Name, i),
			name:       sp.GPUs.Model,
			busID:      busID(bus),
			memoryMiB:  uint64(sp.GPUs.MemoryMiB),
			pcie:       pcie{gen: sp.GPUs.PCIeGeneration, width: width, path: []string{"numa0", "hb" + strconv.Itoa(i)}},
			registered: map[*EventSet]uint64{},
			pinned:     -1,
		})
	}
	// The PCIe tree: a GPU's path is the chain of IDs from its NUMA node down to its switch.
	var place func(path []string, sws []PCIeSwitch)
	setPath := func(path []string, ids []int) {
		for _, id := range ids {
			s.devices[id].pcie.path = slices.Clone(path)
		}
	}
	place = func(path []string, sws []PCIeSwitch) {
		for _, sw := range sws {
			p := append(slices.Clone(path), "sw"+strconv.Itoa(sw.ID))
			setPath(p, sw.GPUs)
			place(p, sw.Switches)
		}
	}
	for _, nn := range sp.NUMANodes {
		for _, hb := range nn.HostBridges {
			p := []string{"numa" + strconv.Itoa(nn.ID), "hb" + strconv.Itoa(hb.ID)}
			setPath(p, hb.GPUs)
			place(p, hb.Switches)
		}
	}
	if nv := sp.NVLink; nv != nil {
		type pair struct{ a, b int }
		done := map[pair]bool{}
		for _, l := range nv.Links {
			if done[pair{l.To, l.From}] {
				continue // the reverse of a bridge already wired
			}
			done[pair{l.From, l.To}] = true
			connect(s, l.From, l.To, l.Count, nvlinkVersions[linkVersion(l.Version, nv.Version)])
		}
		for k, sw := range nv.Switches {
			members := sw.GPUs
			if len(members) == 0 {
				members = allGPUs(n)
			}
			v := nvlinkVersions[linkVersion(sw.Version, nv.Version)]
			remote := busID(fmt.Sprintf("%02x", 0xc4+k))
			for _, id := range members {
				for range sw.LinksPerGPU {
					s.devices[id].links = append(s.devices[id].links, link{version: v, remoteBus: remote, remoteType: nvml.NVLINK_DEVICE_TYPE_SWITCH})
				}
			}
		}
	}
	for _, id := range sp.RemapFailures {
		s.devices[id].remapFailure = true
	}
	for _, o := range opts {
		o(s)
	}
	// After the options: the MIG devices' UUIDs depend on the seed.
	buildMIG(s, sp, h.Metadata.Name)
	return s, nil
}

// connect joins GPUs a and b with n links of version v, both directions at once, so that no
// topology can have a one-way link.
func connect(s *Server, a, b, n int, v nvml.NvlinkVersion) {
	da, db := s.devices[a], s.devices[b]
	for range n {
		da.links = append(da.links, link{version: v, remoteBus: db.busID, remoteType: nvml.NVLINK_DEVICE_TYPE_GPU})
		db.links = append(db.links, link{version: v, remoteBus: da.busID, remoteType: nvml.NVLINK_DEVICE_TYPE_GPU})
	}
}

func busID(bus string) string { return "00000000:" + bus + ":00.0" }
