package mock

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestFabricInfo: the 18 nodes of one GB200 NVL72 rack share a cluster UUID and clique; the
// next rack has another; a node outside a multi-node domain answers NOT_SUPPORTED.
func TestFabricInfo(t *testing.T) {
	info := func(topology, node string, gpu int) (nvml.GpuFabricInfo, nvml.Return) {
		t.Helper()
		s, err := New(topology, WithSeed(node))
		if err != nil {
			t.Fatal(err)
		}
		if ret := s.Init(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		d, _ := s.DeviceGetHandleByIndex(gpu)
		return d.(*Device).GetGpuFabricInfo()
	}
	first, ret := info("gb200-nvl72", "rack-00000", 0)
	if ret != nvml.SUCCESS || first.State != nvml.GPU_FABRIC_STATE_COMPLETED || first.CliqueId != 1 {
		t.Fatalf("GB200 fabric info: %+v %v", first, ret)
	}
	same, _ := info("gb200-nvl72", "rack-00017", 3)
	next, _ := info("gb200-nvl72", "rack-00018", 0)
	if same.ClusterUuid != first.ClusterUuid {
		t.Errorf("nodes 0 and 17 are in one NVL72 domain, got cluster UUIDs %x and %x", first.ClusterUuid, same.ClusterUuid)
	}
	if next.ClusterUuid == first.ClusterUuid {
		t.Errorf("node 18 starts the second domain, got the first's cluster UUID %x", next.ClusterUuid)
	}
	if _, ret := info(DGXH100, "dgx-00000", 0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("DGX H100 fabric info: %v, want NOT_SUPPORTED", ret)
	}
}

// TestRegister: a scenario's own hardware is found by name; an invalid one, or another
// description under a taken name, is refused.
func TestRegister(t *testing.T) {
	h := &Hardware{Metadata: HardwareMetadata{Name: "test-register-box"}, Spec: HardwareSpec{
		GPUs:   GPUSpec{Count: 2, Model: "NVIDIA L4", MemoryMiB: 23034, PCIeGeneration: 4},
		NVLink: &NVLinkSpec{Version: 4, Links: []NVLinkBridge{{From: 0, To: 1, Count: 4}}},
	}}
	if err := Register(h); err != nil {
		t.Fatal(err)
	}
	if err := Register(h); err != nil {
		t.Errorf("registering the same description twice: %v", err)
	}
	s, err := New("test-register-box")
	if err != nil || s.NumDevices() != 2 || len(s.devices[0].links) != 4 || len(s.devices[1].links) != 4 {
		t.Fatalf("New: %v", err)
	}
	other := *h
	other.Spec.GPUs.Count = 1
	other.Spec.NVLink = nil
	if err := Register(&other); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("another description under a taken name: %v", err)
	}
	bad := *h
	bad.Metadata.Name = "test-register-bad"
	bad.Spec.NVLink = &NVLinkSpec{Version: 4, Links: []NVLinkBridge{{From: 0, To: 5, Count: 4}}}
	if err := Register(&bad); err == nil || !strings.Contains(err.Error(), "GPU 5 does not exist") {
		t.Errorf("invalid description: %v", err)
	}
	if _, ok := Lookup("test-register-bad"); ok {
		t.Error("an invalid description was registered")
	}
}

// TestMinorNumbers: a GPU's device minor is the description's (pcie-nvlink-pairs numbers its
// GPUs unlike NVML), else its index; a repeated or out-of-range minor is refused.
func TestMinorNumbers(t *testing.T) {
	minor := func(topology string, gpu int) int {
		t.Helper()
		s, err := New(topology)
		if err != nil {
			t.Fatal(err)
		}
		if ret := s.Init(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		d, _ := s.DeviceGetHandleByIndex(gpu)
		m, ret := d.GetMinorNumber()
		if ret != nvml.SUCCESS {
			t.Fatalf("%s GPU %d minor: %v", topology, gpu, ret)
		}
		return m
	}
	if got := minor(PCIeNVLinkPairs, 1); got != 3 {
		t.Errorf("pcie-nvlink-pairs GPU 1 has minor %d, want 3", got)
	}
	if got := minor(DGXA100, 5); got != 5 {
		t.Errorf("dgx-a100 GPU 5 has minor %d, want its index", got)
	}
	h := &Hardware{Metadata: HardwareMetadata{Name: "test-minors"}, Spec: HardwareSpec{
		GPUs: GPUSpec{Count: 3, Model: "NVIDIA L4", MemoryMiB: 23034, PCIeGeneration: 4, MinorNumbers: []int{1, 1, 255}},
	}}
	errs := h.Validate()
	if len(errs) != 2 || errs[0].Path != "spec.gpus.minorNumbers[1]" || errs[1].Path != "spec.gpus.minorNumbers[2]" {
		t.Fatalf("minors [1 1 255]: %+v, want a repeat at [1] and out of range at [2]", errs)
	}
	h.Spec.GPUs.MinorNumbers = []int{0}
	if errs := h.Validate(); len(errs) != 1 || errs[0].Path != "spec.gpus.minorNumbers" {
		t.Fatalf("one minor for three GPUs: %+v", errs)
	}
}

// BenchmarkNewDGX is what one simulated 8-GPU node costs the fleet in memory (B/op): a
// fleet of 5,000 nodes builds 5,000 of them. Compare before and after a change with
// benchstat. The go-nvml generated mocks are not embedded in a simulated device: they would
// multiply this several times over (docs/benchmarks.md).
func BenchmarkNewDGX(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New("dgx-h100", WithSeed("node")); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMIGLayoutValidation: a MIG layout that breaks the model's placement table is refused
// with the GPU and device named.
func TestMIGLayoutValidation(t *testing.T) {
	base, ok := Lookup("dgx-h100-mig")
	if !ok {
		t.Fatal("preset dgx-h100-mig is not registered")
	}
	if errs := base.Validate(); len(errs) > 0 {
		t.Fatalf("preset dgx-h100-mig: %v", errs)
	}
	for _, tc := range []struct {
		name    string
		mig     MIGSpec
		model   string
		wantErr string
	}{
		{name: "start not in the table", mig: MIGSpec{GPUs: []MIGGPU{{GPU: 1, Devices: []MIGPlacement{{Profile: "3g.40gb", Slot: 2}}}}},
			wantErr: "spec.mig.gpus[0].devices[0].slot: GPU 1: MIG device 3g.40gb cannot start at slot 2; it starts at [0 4]"},
		{name: "overlap", mig: MIGSpec{GPUs: []MIGGPU{{GPU: 0, Devices: []MIGPlacement{{Profile: "4g.40gb", Slot: 0}, {Profile: "1g.10gb", Slot: 3}}}}},
			wantErr: "spec.mig.gpus[0].devices[1]: GPU 0: MIG device 1g.10gb at slot 3 overlaps devices[0] at memory slice 3"},
		{name: "unknown profile", mig: MIGSpec{GPUs: []MIGGPU{{GPU: 0, Devices: []MIGPlacement{{Profile: "1g.5gb", Slot: 0}}}}},
			wantErr: `spec.mig.gpus[0].devices[0].profile: GPU 0 (NVIDIA H100 80GB HBM3): no MIG profile "1g.5gb"`},
		{name: "no table", model: "NVIDIA L40S", mig: MIGSpec{GPUs: []MIGGPU{{GPU: 0}}},
			wantErr: `GPU model "NVIDIA L40S" has no MIG profile table`},
		{name: "GPU off the node", mig: MIGSpec{GPUs: []MIGGPU{{GPU: 8}}}, wantErr: "spec.mig.gpus[0].gpu: GPU 8 is not on the node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := *base
			h.Spec.MIG = &tc.mig
			if tc.model != "" {
				h.Spec.GPUs.Model = tc.model
			}
			var msgs []string
			for _, e := range h.Validate() {
				msgs = append(msgs, e.Path+": "+e.Msg)
			}
			if got := strings.Join(msgs, "; "); !strings.Contains(got, tc.wantErr) {
				t.Errorf("Validate() = %q, want it to contain %q", got, tc.wantErr)
			}
			if _, err := Build(&h); err == nil {
				t.Error("Build accepted the layout")
			}
		})
	}
}
