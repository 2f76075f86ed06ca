package topology_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
)

func switchLinks(n int, v gpu.NVLinkVersion, buses ...string) []gpu.Link {
	var links []gpu.Link
	for i := range n {
		links = append(links, gpu.Link{Index: i, Active: true, Version: v, RemoteBusID: buses[i%len(buses)], RemoteType: gpu.RemoteSwitch})
	}
	return links
}

func gpuLinks(n int, v gpu.NVLinkVersion, peer string, t gpu.RemoteType) []gpu.Link {
	var links []gpu.Link
	for i := range n {
		links = append(links, gpu.Link{Index: i, Active: true, Version: v, RemoteBusID: peer, RemoteType: t})
	}
	return links
}

func uniform(n int, l gpu.PCIeLevel) [][]gpu.PCIeLevel {
	m := make([][]gpu.PCIeLevel, n)
	for i := range m {
		m[i] = make([]gpu.PCIeLevel, n)
		for j := range m[i] {
			m[i][j] = l
		}
	}
	return m
}

func TestCompute(t *testing.T) {
	gen4 := gpu.PCIeLink{Generation: 4, Width: 16}
	tests := []struct {
		name string
		in   topology.Input
		want []topology.Placement
	}{
		{
			// The case the NVIDIA allocator gets wrong: no link names a GPU, yet all GPUs on
			// the switch fabric are one island at full NVLink bandwidth.
			name: "NVSwitch: every link ends at a switch",
			in: topology.Input{GPUs: []topology.GPU{
				{Index: 0, BusID: "b0", PCIe: gen4, Links: switchLinks(12, gpu.NVLinkVersion3_0, "s0", "s1", "s2", "s3", "s4", "s5")},
				{Index: 1, BusID: "b1", PCIe: gen4, Links: switchLinks(12, gpu.NVLinkVersion3_0, "s0", "s1", "s2", "s3", "s4", "s5")},
				{Index: 2, BusID: "b2", PCIe: gen4, Links: switchLinks(12, gpu.NVLinkVersion3_0, "s5", "s4", "s3", "s2", "s1", "s0")},
			}, Ancestor: uniform(3, gpu.LevelSystem)},
			want: []topology.Placement{
				{Island: "nvlink-group-0", BandwidthGBps: 600, NVLink: true},
				{Island: "nvlink-group-0", BandwidthGBps: 600, NVLink: true},
				{Island: "nvlink-group-0", BandwidthGBps: 600, NVLink: true},
			},
		},
		{
			name: "NVSwitch links without remote bus IDs still form one fabric",
			in: topology.Input{GPUs: []topology.GPU{
				{Index: 0, BusID: "b0", Links: switchLinks(18, gpu.NVLinkVersion4_0, "")},
				{Index: 1, BusID: "b1", Links: switchLinks(18, gpu.NVLinkVersion4_0, "")},
			}},
			want: []topology.Placement{
				{Island: "nvlink-group-0", BandwidthGBps: 900, NVLink: true},
				{Island: "nvlink-group-0", BandwidthGBps: 900, NVLink: true},
			},
		},
		{
			name: "bridge pairs; remote type unknown (old driver) is matched by bus ID",
			in: topology.Input{GPUs: []topology.GPU{
				{Index: 0, BusID: "B0", Links: gpuLinks(4, gpu.NVLinkVersion2_0, "b1", gpu.RemoteGPU)},
				{Index: 1, BusID: "b1", Links: gpuLinks(4, gpu.NVLinkVersion2_0, "b0", gpu.RemoteUnknown)},
				{Index: 2, BusID: "b2", Links: gpuLinks(2, gpu.NVLinkVersion1_0, "b3", gpu.RemoteGPU)},
				{Index: 3, BusID: "b3", Links: gpuLinks(2, gpu.NVLinkVersion1_0, "b2", gpu.RemoteGPU)},
			}, Ancestor: uniform(4, gpu.LevelSingle)},
			want: []topology.Placement{
				{Island: "nvlink-group-0", BandwidthGBps: 200, NVLink: true},
				{Island: "nvlink-group-0", BandwidthGBps: 200, NVLink: true},
				{Island: "nvlink-group-1", BandwidthGBps: 80, NVLink: true},
				{Island: "nvlink-group-1", BandwidthGBps: 80, NVLink: true},
			},
		},
		{
			name: "inactive links and links to unseen GPUs count for nothing",
			in: topology.Input{GPUs: []topology.GPU{
				{Index: 0, BusID: "b0", PCIe: gen4, Links: []gpu.Link{{Index: 0}, {Index: 1, Active: true, RemoteBusID: "elsewhere", RemoteType: gpu.RemoteGPU}}},
				{Index: 1, BusID: "b1", PCIe: gpu.PCIeLink{Generation: 3, Width: 8}},
			}, Ancestor: [][]gpu.PCIeLevel{{0, gpu.LevelHostBridge}, {gpu.LevelHostBridge, 0}}},
			want: []topology.Placement{
				{Island: "nvlink-group-0", BandwidthGBps: 64},
				{Island: "nvlink-group-1", BandwidthGBps: 16},
			},
		},
		{
			name: "PCIe islands by switch; a missing ancestor matrix separates everyone",
			in: topology.Input{GPUs: []topology.GPU{
				{Index: 0, BusID: "b0", PCIe: gen4},
				{Index: 1, BusID: "b1", PCIe: gen4},
			}},
			want: []topology.Placement{
				{Island: "nvlink-group-0", BandwidthGBps: 64},
				{Island: "nvlink-group-1", BandwidthGBps: 64},
			},
		},
		{
			name: "islands are numbered by lowest GPU index whatever the input order",
			in: topology.Input{GPUs: []topology.GPU{
				{Index: 3, BusID: "b3", Links: gpuLinks(12, gpu.NVLinkVersion3_0, "b2", gpu.RemoteGPU)},
				{Index: 2, BusID: "b2", Links: gpuLinks(12, gpu.NVLinkVersion3_0, "b3", gpu.RemoteGPU)},
				{Index: 0, BusID: "b0", PCIe: gen4},
			}},
			want: []topology.Placement{
				{Island: "nvlink-group-1", BandwidthGBps: 600, NVLink: true},
				{Island: "nvlink-group-1", BandwidthGBps: 600, NVLink: true},
				{Island: "nvlink-group-0", BandwidthGBps: 64},
			},
		},
		{name: "no GPUs", in: topology.Input{}, want: []topology.Placement{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := topology.Compute(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Compute() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPCIeGBps(t *testing.T) {
	for _, tt := range []struct {
		link gpu.PCIeLink
		want int32
	}{
		{gpu.PCIeLink{Generation: 3, Width: 16}, 32},
		{gpu.PCIeLink{Generation: 4, Width: 16}, 64},
		{gpu.PCIeLink{Generation: 5, Width: 16}, 128},
		{gpu.PCIeLink{Generation: 6, Width: 16}, 256},
		{gpu.PCIeLink{Generation: 1, Width: 1}, 0},
		{gpu.PCIeLink{Generation: 0, Width: 16}, 0},
		{gpu.PCIeLink{Generation: 7, Width: 16}, 0},
		{gpu.PCIeLink{Generation: 4, Width: -1}, 0},
	} {
		if got := topology.PCIeGBps(tt.link); got != tt.want {
			t.Errorf("PCIeGBps(%+v) = %d, want %d", tt.link, got, tt.want)
		}
	}
}

type want struct {
	island string
	gbps   int32
	nvlink bool
}

func repeat(n int, w want) []want {
	out := make([]want, n)
	for i := range out {
		out[i] = w
	}
	return out
}

// TestDiscoverMockTopologies runs every registered topology through the production adapter.
func TestDiscoverMockTopologies(t *testing.T) {
	g0, g1, g2, g3 := "nvlink-group-0", "nvlink-group-1", "nvlink-group-2", "nvlink-group-3"
	tests := map[string]struct {
		product string
		want    []want
	}{
		mock.DGXA100:   {"NVIDIA A100-SXM4-80GB", repeat(8, want{g0, 600, true})},
		mock.DGXH100:   {"NVIDIA H100 80GB HBM3", repeat(8, want{g0, 900, true})},
		"dgx-h100-mig": {"NVIDIA H100 80GB HBM3", repeat(8, want{g0, 900, true})},
		"dgx-h200":     {"NVIDIA H200", repeat(8, want{g0, 900, true})},
		mock.DGXB200:   {"NVIDIA B200", repeat(8, want{g0, 1800, true})},
		mock.PCIeNVLinkPairs: {"NVIDIA A100 80GB PCIe", []want{
			{g0, 600, true}, {g0, 600, true}, {g1, 600, true}, {g1, 600, true},
			{g2, 600, true}, {g2, 600, true}, {g3, 600, true}, {g3, 600, true},
		}},
		mock.TwoIsland: {"NVIDIA A100-SXM4-40GB", append(repeat(4, want{g0, 600, true}), repeat(4, want{g1, 64, false})...)},
		mock.PCIeOnly:  {"NVIDIA L40S", append(repeat(4, want{g0, 64, false}), repeat(4, want{g1, 64, false})...)},
		"t4-x1":        {"Tesla T4", []want{{g0, 32, false}}},
		"t4-x2":        {"Tesla T4", []want{{g0, 32, false}, {g1, 32, false}}}, // one per socket
		"l4-x1":        {"NVIDIA L4", []want{{g0, 64, false}}},
		"l4-x2":        {"NVIDIA L4", repeat(2, want{g0, 64, false})}, // one PCIe switch
		"a10-x1":       {"NVIDIA A10", []want{{g0, 64, false}}},
		"a10-x2":       {"NVIDIA A10", []want{{g0, 64, false}, {g1, 64, false}}},
		"hgx-a100-4":   {"NVIDIA A100-SXM4-40GB", repeat(4, want{g0, 600, true})},
		// The hybrid cube mesh is connected, so one island; each GPU has 6 NVLink 2 links.
		"dgx1-v100": {"Tesla V100-SXM2-32GB", repeat(8, want{g0, 300, true})},
		"h100-nvl-pairs": {"NVIDIA H100 NVL", []want{
			{g0, 600, true}, {g0, 600, true}, {g1, 600, true}, {g1, 600, true},
			{g2, 600, true}, {g2, 600, true}, {g3, 600, true}, {g3, 600, true},
		}},
		"dgx-2":       {"Tesla V100-SXM3-32GB", repeat(16, want{g0, 300, true})},
		"gb200-nvl72": {"NVIDIA GB200", repeat(4, want{g0, 1800, true})},
	}
	if got, wantNames := len(mock.Names()), len(tests); got != wantNames {
		t.Fatalf("mock.Names() has %d topologies, this test covers %d: cover the new one", got, wantNames)
	}
	for _, name := range mock.Names() {
		t.Run(name, func(t *testing.T) {
			tt := tests[name]
			srv, err := mock.New(name)
			if err != nil {
				t.Fatal(err)
			}
			lib := nvmlgpu.New(srv, nvmlgpu.Options{})
			if err := lib.Init(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := lib.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			devs, err := lib.Devices()
			if err != nil {
				t.Fatal(err)
			}
			got, err := topology.Discover(devs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("discovered %d GPUs, want %d", len(got), len(tt.want))
			}
			uuids := map[string]bool{}
			for i, d := range got {
				w := tt.want[i]
				if d.Index != i || d.Island != w.island || d.BandwidthGBps != w.gbps || d.NVLink != w.nvlink {
					t.Errorf("GPU %d: got index %d island %q %d GB/s nvlink=%v, want island %q %d GB/s nvlink=%v",
						i, d.Index, d.Island, d.BandwidthGBps, d.NVLink, w.island, w.gbps, w.nvlink)
				}
				if d.Product != tt.product || d.MemoryMiB == 0 || d.PCIBusID == "" || d.Lost != nil {
					t.Errorf("GPU %d: facts %+v", i, d)
				}
				if uuids[d.UUID] {
					t.Errorf("GPU %d: UUID %s repeats", i, d.UUID)
				}
				uuids[d.UUID] = true
			}
		})
	}
}

func TestDiscoverDeterministicUUIDs(t *testing.T) {
	read := func(opts ...mock.Option) []string {
		srv, err := mock.New(mock.DGXH100, opts...)
		if err != nil {
			t.Fatal(err)
		}
		lib := nvmlgpu.New(srv, nvmlgpu.Options{})
		if err := lib.Init(); err != nil {
			t.Fatal(err)
		}
		devs, _ := lib.Devices()
		var out []string
		for _, d := range devs {
			u, err := d.UUID()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, u)
		}
		return out
	}
	a, b, c := read(), read(), read(mock.WithSeed("node-1"))
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("UUIDs differ between two builds:\n%s", diff)
	}
	if a[0] == c[0] {
		t.Errorf("seeded UUID %s equals the unseeded one", c[0])
	}
}

func TestDiscoverLostGPU(t *testing.T) {
	srv, _ := mock.New(mock.PCIeOnly)
	if err := srv.Inject(2, mock.Fault{Kind: mock.FaultLost}); err != nil {
		t.Fatal(err)
	}
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, _ := lib.Devices()
	got, err := topology.Discover(devs)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got[2].Lost, gpu.ErrLost) || got[2].Island != "" {
		t.Errorf("lost GPU 2: got %+v, want Lost and no island", got[2])
	}
	for _, i := range []int{0, 1, 3} {
		if got[i].Island != "nvlink-group-0" {
			t.Errorf("GPU %d island %q, want nvlink-group-0", i, got[i].Island)
		}
	}
	if got[4].Island != "nvlink-group-1" {
		t.Errorf("GPU 4 island %q, want nvlink-group-1", got[4].Island)
	}
}

func FuzzCompute(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Build an arbitrary (possibly inconsistent) topology from the bytes: Compute must
		// not panic and must place every GPU on a named island.
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		n := int(next() % 10)
		in := topology.Input{}
		for i := range n {
			g := topology.GPU{Index: int(next() % 12), BusID: fmt.Sprint(next() % 12), PCIe: gpu.PCIeLink{Generation: int(next() % 8), Width: int(next() % 33)}}
			for range int(next() % 20) {
				g.Links = append(g.Links, gpu.Link{Active: next()%2 == 0, Version: gpu.NVLinkVersion(next() % 9), RemoteBusID: fmt.Sprint(next() % 14), RemoteType: gpu.RemoteType(next() % 5)})
			}
			in.GPUs = append(in.GPUs, g)
			row := make([]gpu.PCIeLevel, int(next()%11))
			for j := range row {
				row[j] = gpu.PCIeLevel(next() % 60)
			}
			_ = i
			in.Ancestor = append(in.Ancestor, row)
		}
		got := topology.Compute(in)
		if len(got) != n {
			t.Fatalf("got %d placements for %d GPUs", len(got), n)
		}
		for i, p := range got {
			if p.Island == "" || p.BandwidthGBps < 0 {
				t.Fatalf("GPU %d placed at %+v", i, p)
			}
		}
	})
}
