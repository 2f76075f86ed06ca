package mock

import (
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The topology names. The simulator labels kwok nodes with one of them
// (gpu.scheduling/topology) and the acceptance tests name them; this is the only list.
const (
	// DGXA100 is 8 A100-SXM4-80GB on six NVSwitches, 12 NVLink 3 links each: one island at 600 GB/s.
	DGXA100 = "dgx-a100"
	// DGXH100 is 8 H100 80GB HBM3 on four NVSwitches, 18 NVLink 4 links each: one island at 900 GB/s.
	DGXH100 = "dgx-h100"
	// DGXB200 is 8 B200 on two NVSwitch chips, 18 NVLink 5 links each: one island at 1800 GB/s.
	DGXB200 = "dgx-b200"
	// PCIeNVLinkPairs is 8 A100 80GB PCIe joined in pairs by three NVLink bridges (12 links):
	// islands {0,1} {2,3} {4,5} {6,7} at 600 GB/s.
	PCIeNVLinkPairs = "pcie-nvlink-pairs"
	// TwoIsland is the API contract's example box: GPUs 0-3 fully meshed with NVLink 3
	// (4 links per pair, 600 GB/s), GPUs 4-7 on one PCIe Gen4 x16 switch (64 GB/s), and GPU 7
	// with a failed row remapping, so Unhealthy.
	TwoIsland = "two-island"
	// PCIeOnly is 8 L40S without NVLink, four per PCIe Gen4 switch on each socket:
	// islands {0-3} {4-7} at 64 GB/s.
	PCIeOnly = "pcie-only"
)

type builder func() *Server

var registry = map[string]builder{
	DGXA100:         func() *Server { return nvswitchBox(DGXA100, a100SXM, 6, 2, nvml.NVLINK_VERSION_3_0) },
	DGXH100:         func() *Server { return nvswitchBox(DGXH100, h100SXM, 4, 0, nvml.NVLINK_VERSION_4_0) },
	DGXB200:         func() *Server { return nvswitchBox(DGXB200, b200, 2, 9, nvml.NVLINK_VERSION_5_0) },
	PCIeNVLinkPairs: pcieNVLinkPairs,
	TwoIsland:       twoIsland,
	PCIeOnly:        pcieOnly,
}

// Names lists the registered topologies, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds a fresh server of the named topology.
func New(name string, opts ...Option) (*Server, error) {
	b, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("mock topology %q is unknown; known: %v", name, Names())
	}
	s := b()
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

type product struct {
	name      string
	memoryMiB uint64
	pcieGen   int
}

var (
	a100SXM   = product{"NVIDIA A100-SXM4-80GB", 81920, 4}
	a100SXM40 = product{"NVIDIA A100-SXM4-40GB", 40960, 4}
	a100PCIe  = product{"NVIDIA A100 80GB PCIe", 81920, 4}
	h100SXM   = product{"NVIDIA H100 80GB HBM3", 81559, 5}
	b200      = product{"NVIDIA B200", 183359, 6}
	l40s      = product{"NVIDIA L40S", 46068, 4}
)

// dgxBusIDs are the GPU bus IDs of a DGX A100 / H100, in NVML index order.
var dgxBusIDs = []string{"07", "0f", "47", "4e", "87", "90", "b7", "bd"}

func busID(bus string) string { return "00000000:" + bus + ":00.0" }

// newServer makes n GPUs of product p with the given bus numbers. The PCIe tree is two
// sockets, each with two host bridges, each with one switch holding two GPUs, as on a DGX.
func newServer(topology string, p product, buses []string) *Server {
	s := &Server{topology: topology}
	for i, bus := range buses {
		s.devices = append(s.devices, &Device{
			server:     s,
			index:      i,
			uuid:       deviceUUID("", topology, i),
			name:       p.name,
			busID:      busID(bus),
			memoryMiB:  p.memoryMiB,
			pcie:       pcie{gen: p.pcieGen, width: 16, path: []string{fmt.Sprintf("cpu%d", i/4), fmt.Sprintf("rc%d", i/2), fmt.Sprintf("sw%d", i/2)}},
			registered: map[*EventSet]uint64{},
		})
	}
	return s
}

// nvswitchBox wires every GPU to every NVSwitch with linksPerSwitch links; when
// linksPerSwitch is 0 it uses the DGX H100 pattern (5, 4, 4, 5 links on four switches).
func nvswitchBox(topology string, p product, switches, linksPerSwitch int, v nvml.NvlinkVersion) *Server {
	s := newServer(topology, p, dgxBusIDs)
	perSwitch := make([]int, switches)
	for i := range perSwitch {
		perSwitch[i] = linksPerSwitch
	}
	if linksPerSwitch == 0 {
		perSwitch = []int{5, 4, 4, 5}
	}
	for _, d := range s.devices {
		for sw, n := range perSwitch {
			for range n {
				d.links = append(d.links, link{version: v, remoteBus: busID(fmt.Sprintf("%02x", 0xc4+sw)), remoteType: nvml.NVLINK_DEVICE_TYPE_SWITCH})
			}
		}
	}
	return s
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

func pcieNVLinkPairs() *Server {
	s := newServer(PCIeNVLinkPairs, a100PCIe, []string{"17", "18", "31", "32", "b1", "b2", "ca", "cb"})
	for i := 0; i < 8; i += 2 {
		connect(s, i, i+1, 12, nvml.NVLINK_VERSION_3_0)
	}
	return s
}

func twoIsland() *Server {
	s := newServer(TwoIsland, a100SXM40, dgxBusIDs)
	for a := 0; a < 4; a++ {
		for b := a + 1; b < 4; b++ {
			connect(s, a, b, 4, nvml.NVLINK_VERSION_3_0)
		}
	}
	for i := 4; i < 8; i++ {
		s.devices[i].pcie.path = []string{"cpu1", "rc2", "sw2"}
	}
	s.devices[7].remapFailure = true
	return s
}

func pcieOnly() *Server {
	s := newServer(PCIeOnly, l40s, []string{"1a", "1b", "1c", "1d", "9a", "9b", "9c", "9d"})
	for i, d := range s.devices {
		d.pcie.path = []string{fmt.Sprintf("cpu%d", i/4), fmt.Sprintf("rc%d", i/4), fmt.Sprintf("sw%d", i/4), fmt.Sprintf("sw%d.%d", i/4, i%4/2)}
	}
	return s
}
