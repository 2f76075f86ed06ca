package nvmlgpu

import (
	"fmt"
	"math"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
)

// unsupported tells whether ret means the GPU or driver has no such feature.
func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// MIG reads the MIG layout the operator made (nvidia-smi mig or NVIDIA's mig-manager): the GPU
// instances of every profile with their placements, and the MIG device handles with their
// UUIDs and memory. A GPU or driver without MIG answers nil.
func (d *device) MIG() (*gpu.MIG, error) {
	cur, _, ret := d.dev.GetMigMode()
	if unsupported(ret) {
		return nil, nil
	}
	if err := check(ret, "read MIG mode of GPU %d", d.index); err != nil {
		return nil, err
	}
	m := &gpu.MIG{Enabled: cur == nvml.DEVICE_MIG_ENABLE}
	mem, ret := d.dev.GetMemoryInfo()
	if err := check(ret, "read memory of GPU %d", d.index); err != nil {
		return nil, err
	}
	type instance struct {
		slot, size int
		profile    string
	}
	byID := map[uint32]instance{}
	for p := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.dev.GetGpuInstanceProfileInfo(p)
		if unsupported(ret) || ret == nvml.ERROR_INVALID_ARGUMENT || ret == nvml.ERROR_NOT_FOUND {
			continue // a profile this GPU does not have
		}
		if ret != nvml.SUCCESS && !m.Enabled {
			// With the mode off the profiles only size the GPU (Slices): a driver that does not
			// answer then must not fail the discovery of a GPU used whole.
			return m, nil
		}
		if err := check(ret, "read MIG profile %d of GPU %d", p, d.index); err != nil {
			return nil, err
		}
		places, ret := d.dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS && !m.Enabled {
			return m, nil
		}
		if err := check(ret, "read placements of MIG profile %d of GPU %d", p, d.index); err != nil && !unsupported(ret) {
			return nil, err
		}
		for _, pl := range places {
			m.Slices = max(m.Slices, int(pl.Start+pl.Size))
		}
		if !m.Enabled {
			continue
		}
		gis, ret := d.dev.GetGpuInstances(&info)
		if err := check(ret, "list GPU instances of MIG profile %d of GPU %d", p, d.index); err != nil {
			return nil, err
		}
		name := ProfileName(p, info.SliceCount, info.MemorySizeMB, mem.Total)
		for _, gi := range gis {
			gin, ret := gi.GetInfo()
			if err := check(ret, "read a GPU instance of GPU %d", d.index); err != nil {
				return nil, err
			}
			byID[gin.Id] = instance{slot: int(gin.Placement.Start), size: int(gin.Placement.Size), profile: name}
		}
	}
	if !m.Enabled {
		return m, nil
	}
	n, ret := d.dev.GetMaxMigDeviceCount()
	if err := check(ret, "read MIG device count of GPU %d", d.index); err != nil {
		return nil, err
	}
	for i := range n {
		h, ret := d.dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no MIG device at this index: fewer devices than the maximum
		}
		if err := check(ret, "read MIG device %d of GPU %d", i, d.index); err != nil {
			return nil, err
		}
		giID, ret := h.GetGpuInstanceId()
		if err := check(ret, "read GPU instance of MIG device %d of GPU %d", i, d.index); err != nil {
			return nil, err
		}
		inst, ok := byID[uint32(giID)]
		if !ok {
			return nil, fmt.Errorf("MIG device %d of GPU %d is on GPU instance %d, which no profile lists", i, d.index, giID)
		}
		ciID, ret := h.GetComputeInstanceId()
		if err := check(ret, "read compute instance of MIG device %d of GPU %d", i, d.index); err != nil {
			return nil, err
		}
		uuid, ret := h.GetUUID()
		if err := check(ret, "read UUID of MIG device %d of GPU %d", i, d.index); err != nil {
			return nil, err
		}
		dm, ret := h.GetMemoryInfo()
		if err := check(ret, "read memory of MIG device %d of GPU %d", i, d.index); err != nil {
			return nil, err
		}
		m.Devices = append(m.Devices, gpu.MIGDevice{
			Slot: inst.slot, Size: inst.size, Profile: inst.profile, UUID: uuid, MemoryMiB: int64(dm.Total / (1 << 20)),
			GI: giID, CI: ciID,
		})
	}
	sort.Slice(m.Devices, func(i, j int) bool { return m.Devices[i].Slot < m.Devices[j].Slot })
	return m, nil
}

// ProfileName names a GPU instance profile as nvidia-smi and NVIDIA's device plugin do:
// "<compute slices>g.<memory GB>gb", the memory rounded as NVIDIA's go-nvlib rounds it (to an
// eighth of the GPU, then to whole GB of it), and "+me" for the media-extension profiles.
func ProfileName(profile int, slices uint32, memoryMB, totalBytes uint64) string {
	const oneMB, oneGB = 1 << 20, 1 << 30
	frac := float64(memoryMB*oneMB) / float64(totalBytes)
	frac = math.Ceil(frac*8) / 8
	totalGB := float64((totalBytes + oneGB - 1) / oneGB)
	name := fmt.Sprintf("%dg.%dgb", slices, uint64(math.Round(frac*totalGB)))
	if profile == nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1 || profile == nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1 {
		name += "+me"
	}
	return name
}
