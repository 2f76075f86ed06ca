package nvmlgpu

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
)

// DeviceForTest adapts one NVML device handle, as Devices does.
func DeviceForTest(d nvml.Device, index int) gpu.Device { return &device{index: index, dev: d} }
