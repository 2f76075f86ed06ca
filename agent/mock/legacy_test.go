package mock

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestPresetsMatchLegacyBuilders: every preset file builds exactly the server the Go builders it
// replaced built: the same names, memory, bus IDs, PCIe tree, NVLinks and health, so the
// agent's islands and bandwidths are unchanged.
func TestPresetsMatchLegacyBuilders(t *testing.T) {
	for name, old := range legacyRegistry {
		t.Run(name, func(t *testing.T) {
			want := old()
			got, err := New(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.devices) != len(want.devices) {
				t.Fatalf("%d GPUs, want %d", len(got.devices), len(want.devices))
			}
			for i, w := range want.devices {
				g := got.devices[i]
				if g.name != w.name || g.busID != w.busID || g.memoryMiB != w.memoryMiB || g.uuid != w.uuid || g.remapFailure != w.remapFailure || g.pcie.gen != w.pcie.gen || g.pcie.width != w.pcie.width {
					t.Errorf("GPU %d: got %s %s %d MiB %s remap=%v gen%d x%d, want %s %s %d MiB %s remap=%v gen%d x%d", i,
						g.name, g.busID, g.memoryMiB, g.uuid, g.remapFailure, g.pcie.gen, g.pcie.width, w.name, w.busID, w.memoryMiB, w.uuid, w.remapFailure, w.pcie.gen, w.pcie.width)
				}
				if !reflect.DeepEqual(g.links, w.links) {
					t.Errorf("GPU %d links:\n got %v\nwant %v", i, g.links, w.links)
				}
				for j, w2 := range want.devices {
					if a, b := commonAncestor(g.pcie.path, got.devices[j].pcie.path, i == j), commonAncestor(w.pcie.path, w2.pcie.path, i == j); a != b {
						t.Errorf("PCIe level between GPUs %d and %d: got %v, want %v", i, j, a, b)
					}
				}
			}
		})
	}
}

type legacyBuilder func() *Server

var legacyRegistry = map[string]legacyBuilder{
	DGXA100:         func() *Server { return nvswitchBox(DGXA100, a100SXM, 6, 2, nvml.NVLINK_VERSION_3_0) },
	DGXH100:         func() *Server { return nvswitchBox(DGXH100, h100SXM, 4, 0, nvml.NVLINK_VERSION_4_0) },
	DGXB200:         func() *Server { return nvswitchBox(DGXB200, b200, 2, 9, nvml.NVLINK_VERSION_5_0) },
	PCIeNVLinkPairs: pcieNVLinkPairs,
	TwoIsland:       twoIsland,
	PCIeOnly:        pcieOnly,
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
