package mock

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIGProfile is one GPU instance profile of a GPU model, as NVIDIA's MIG user guide lists it:
// its NVML profile ID, compute slices, memory and the placements it may take.
type MIGProfile struct {
	Name string
	// ID is NVML's GPU instance profile (nvml.GPU_INSTANCE_PROFILE_*).
	ID int
	// ComputeSlices is the "Ng" of the name; MemoryMiB the instance's memory.
	ComputeSlices int
	MemoryMiB     uint64
	// Starts are the memory slices an instance may start at; Size how many it spans.
	Starts []int
	Size   int
}

// MIGTable is the MIG profiles of one GPU model.
type MIGTable struct {
	// Slices is the number of memory slices; ComputeSlices the most compute slices (7).
	Slices, ComputeSlices int
	Profiles              []MIGProfile
}

// Profile finds a profile by name.
func (t *MIGTable) Profile(name string) (*MIGProfile, bool) {
	for i := range t.Profiles {
		if t.Profiles[i].Name == name {
			return &t.Profiles[i], true
		}
	}
	return nil, false
}

func migTable(small, medium, half, full uint64, gb func(int) string) *MIGTable {
	return &MIGTable{Slices: 8, ComputeSlices: 7, Profiles: []MIGProfile{
		{Name: "1g." + gb(1), ID: nvml.GPU_INSTANCE_PROFILE_1_SLICE, ComputeSlices: 1, MemoryMiB: small, Starts: []int{0, 1, 2, 3, 4, 5, 6}, Size: 1},
		{Name: "1g." + gb(2), ID: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, ComputeSlices: 1, MemoryMiB: medium, Starts: []int{0, 2, 4, 6}, Size: 2},
		{Name: "2g." + gb(2), ID: nvml.GPU_INSTANCE_PROFILE_2_SLICE, ComputeSlices: 2, MemoryMiB: medium, Starts: []int{0, 2, 4}, Size: 2},
		{Name: "3g." + gb(4), ID: nvml.GPU_INSTANCE_PROFILE_3_SLICE, ComputeSlices: 3, MemoryMiB: half, Starts: []int{0, 4}, Size: 4},
		{Name: "4g." + gb(4), ID: nvml.GPU_INSTANCE_PROFILE_4_SLICE, ComputeSlices: 4, MemoryMiB: half, Starts: []int{0}, Size: 4},
		{Name: "7g." + gb(8), ID: nvml.GPU_INSTANCE_PROFILE_7_SLICE, ComputeSlices: 7, MemoryMiB: full, Starts: []int{0}, Size: 8},
	}}
}

// The MIG profile tables of the GPUs the presets describe, from NVIDIA's MIG user guide
// ("Supported MIG Profiles"). Every table has 8 memory slices and 7 compute slices; the
// profiles differ in memory only. The media-extension (+me) and graphics profiles are left out:
// no preset makes them.
var (
	migA100_40GB = migTable(4864, 9856, 19968, 40192, func(s int) string { return []string{1: "5gb", 2: "10gb", 4: "20gb", 8: "40gb"}[s] })
	migX100_80GB = migTable(9856, 19968, 40192, 80384, func(s int) string { return []string{1: "10gb", 2: "20gb", 4: "40gb", 8: "80gb"}[s] })
	migH200_141G = migTable(16896, 33792, 71424, 143360, func(s int) string { return []string{1: "18gb", 2: "35gb", 4: "71gb", 8: "141gb"}[s] })
)

// MIGTableFor is the MIG profile table of a GPU model (the product name NVML reports) with
// memoryMiB of memory; nil for a GPU without MIG or whose profiles the mock does not know
// (H100 NVL, B200).
func MIGTableFor(model string, memoryMiB int64) *MIGTable {
	switch {
	case strings.Contains(model, "A100") && memoryMiB <= 48*1024:
		return migA100_40GB
	case strings.Contains(model, "A100"), strings.Contains(model, "H100") && memoryMiB <= 82*1024:
		return migX100_80GB
	case strings.Contains(model, "H200"):
		return migH200_141G
	}
	return nil
}

// MIGSpec puts some of a node's GPUs in MIG mode with the layout the operator would have made
// (nvidia-smi mig -cgi, or NVIDIA's mig-manager).
type MIGSpec struct {
	GPUs []MIGGPU `json:"gpus"`
}

// MIGGPU is one GPU in MIG mode and the MIG devices made on it (none: MIG mode, no devices).
type MIGGPU struct {
	GPU     int            `json:"gpu"`
	Devices []MIGPlacement `json:"devices,omitempty"`
}

// MIGPlacement is one MIG device: a profile at a start slot.
type MIGPlacement struct {
	Profile string `json:"profile"`
	Slot    int    `json:"slot"`
}

// validateMIG checks the MIG layout against the GPU model's placement table: every profile is
// the model's, starts where the profile may, and no two devices overlap or take more compute
// slices than the GPU has.
func validateMIG(sp *HardwareSpec, add func(path, format string, args ...any)) {
	if sp.MIG == nil {
		return
	}
	table := MIGTableFor(sp.GPUs.Model, sp.GPUs.MemoryMiB)
	seen := map[int]bool{}
	for i, g := range sp.MIG.GPUs {
		p := fmt.Sprintf("spec.mig.gpus[%d]", i)
		if table == nil {
			add(p, "GPU model %q has no MIG profile table (MIG tables: A100 40GB/80GB, H100 80GB, H200 141GB)", sp.GPUs.Model)
			return
		}
		if g.GPU < 0 || g.GPU >= sp.GPUs.Count {
			add(p+".gpu", "GPU %d is not on the node (0-%d)", g.GPU, sp.GPUs.Count-1)
			continue
		}
		if seen[g.GPU] {
			add(p+".gpu", "GPU %d is listed twice", g.GPU)
			continue
		}
		seen[g.GPU] = true
		used := make([]int, table.Slices) // the device index+1 holding each memory slice
		compute := 0
		for j, d := range g.Devices {
			dp := fmt.Sprintf("%s.devices[%d]", p, j)
			prof, ok := table.Profile(d.Profile)
			if !ok {
				names := make([]string, len(table.Profiles))
				for k, pr := range table.Profiles {
					names[k] = pr.Name
				}
				add(dp+".profile", "GPU %d (%s): no MIG profile %q; the model has %s", g.GPU, sp.GPUs.Model, d.Profile, strings.Join(names, ", "))
				continue
			}
			if !slices.Contains(prof.Starts, d.Slot) {
				add(dp+".slot", "GPU %d: MIG device %s cannot start at slot %d; it starts at %v", g.GPU, d.Profile, d.Slot, prof.Starts)
				continue
			}
			for s := d.Slot; s < d.Slot+prof.Size; s++ {
				if used[s] != 0 {
					add(dp, "GPU %d: MIG device %s at slot %d overlaps devices[%d] at memory slice %d", g.GPU, d.Profile, d.Slot, used[s]-1, s)
					break
				}
				used[s] = j + 1
			}
			compute += prof.ComputeSlices
		}
		if compute > table.ComputeSlices {
			add(p+".devices", "GPU %d: the MIG devices take %d compute slices; the GPU has %d", g.GPU, compute, table.ComputeSlices)
		}
	}
}

// migState is a GPU's MIG mode and devices in the mock.
type migState struct {
	table   *MIGTable
	enabled bool
	devices []*migDevice
}

type migDevice struct {
	nvml.Device // nil: see Server
	parent      *Device
	giID        int
	profile     *MIGProfile
	slot        int
	uuid        string
}

type gpuInstance struct {
	nvml.GpuInstance // nil: see Server
	info             nvml.GpuInstanceInfo
}

// GetMigMode is the GPU's MIG mode, current and pending alike; NOT_SUPPORTED without a table.
func (d *Device) GetMigMode() (int, int, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	if d.mig == nil {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if d.mig.enabled {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	return mode, mode, nvml.SUCCESS
}

func (d *Device) migProfile(id int) (*MIGProfile, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return nil, ret
	}
	if d.mig == nil {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	for i := range d.mig.table.Profiles {
		if d.mig.table.Profiles[i].ID == id {
			return &d.mig.table.Profiles[i], nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_SUPPORTED
}

// GetGpuInstanceProfileInfo answers the profile's slices and memory.
func (d *Device) GetGpuInstanceProfileInfo(id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	p, ret := d.migProfile(id)
	if ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, ret
	}
	return nvml.GpuInstanceProfileInfo{
		Id: uint32(p.ID), SliceCount: uint32(p.ComputeSlices), InstanceCount: uint32(len(p.Starts)), MemorySizeMB: p.MemoryMiB,
	}, nvml.SUCCESS
}

// GetGpuInstancePossiblePlacements answers the profile's placement table.
func (d *Device) GetGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	p, ret := d.migProfile(int(info.Id))
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	out := make([]nvml.GpuInstancePlacement, len(p.Starts))
	for i, s := range p.Starts {
		out[i] = nvml.GpuInstancePlacement{Start: uint32(s), Size: uint32(p.Size)}
	}
	return out, nvml.SUCCESS
}

// GetGpuInstances lists the GPU instances of a profile.
func (d *Device) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	p, ret := d.migProfile(int(info.Id))
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if !d.mig.enabled {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var out []nvml.GpuInstance
	for _, m := range d.mig.devices {
		if m.profile == p {
			out = append(out, &gpuInstance{info: nvml.GpuInstanceInfo{
				Device: d, Id: uint32(m.giID), ProfileId: uint32(p.ID),
				Placement: nvml.GpuInstancePlacement{Start: uint32(m.slot), Size: uint32(p.Size)},
			}})
		}
	}
	return out, nvml.SUCCESS
}

// GetInfo is the GPU instance's profile and placement.
func (g *gpuInstance) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) { return g.info, nvml.SUCCESS }

// GetMaxMigDeviceCount is 7 in MIG mode, as on A100 and H100.
func (d *Device) GetMaxMigDeviceCount() (int, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	if d.mig == nil {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return d.mig.table.ComputeSlices, nvml.SUCCESS
}

// GetMigDeviceHandleByIndex is the i-th MIG device; NOT_FOUND past the last. go-nvml's dgxa100
// mock has no such call: our mock serves it.
func (d *Device) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return nil, ret
	}
	if d.mig == nil {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if i < 0 || i >= d.mig.table.ComputeSlices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if i >= len(d.mig.devices) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return d.mig.devices[i], nvml.SUCCESS
}

// GetGpuInstanceId is the MIG device's GPU instance.
func (m *migDevice) GetGpuInstanceId() (int, nvml.Return) {
	if ret := m.parent.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return m.giID, nvml.SUCCESS
}

// GetComputeInstanceId is the MIG device's compute instance: one per GPU instance, ID 0.
func (m *migDevice) GetComputeInstanceId() (int, nvml.Return) {
	if ret := m.parent.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return 0, nvml.SUCCESS
}

// GetUUID is the MIG device's UUID, MIG-<uuid> as the driver names them.
func (m *migDevice) GetUUID() (string, nvml.Return) {
	if ret := m.parent.answer(); ret != nvml.SUCCESS {
		return "", ret
	}
	return m.uuid, nvml.SUCCESS
}

// GetMemoryInfo is the MIG device's memory, all free.
func (m *migDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if ret := m.parent.answer(); ret != nvml.SUCCESS {
		return nvml.Memory{}, ret
	}
	total := m.profile.MemoryMiB << 20
	return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
}

// buildMIG gives every GPU of a model with a MIG table its MIG state, and the GPUs sp.MIG
// names their mode and devices. The description is valid (Validate).
func buildMIG(s *Server, sp *HardwareSpec, name string) {
	table := MIGTableFor(sp.GPUs.Model, sp.GPUs.MemoryMiB)
	if table == nil {
		return
	}
	for _, d := range s.devices {
		d.mig = &migState{table: table}
	}
	if sp.MIG == nil {
		return
	}
	for _, g := range sp.MIG.GPUs {
		d := s.devices[g.GPU]
		d.mig.enabled = true
		for j, p := range g.Devices {
			prof, _ := table.Profile(p.Profile)
			d.mig.devices = append(d.mig.devices, &migDevice{
				parent: d, giID: j + 1, profile: prof, slot: p.Slot,
				uuid: "MIG-" + deviceUUID(s.seed, name, g.GPU*16+p.Slot+1000)[len("GPU-"):],
			})
		}
	}
}
