package telemetry_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/component-base/metrics"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/telemetry"
)

func p[T any](v T) *T { return &v }

// A GPU without ECC (nil readings) has no ECC series, a forgotten node none at all, and the
// rest carry dcgm-exporter's names, units (W, MiB) and labels.
func TestCollector(t *testing.T) {
	c := telemetry.NewCollector()
	c.Set("node-b", []telemetry.GPU{{Index: 0, UUID: "GPU-b", PCIBusID: "00000000:01:00.0", Model: "NVIDIA L4"}})
	c.Set("node-a", []telemetry.GPU{{
		Index: 1, UUID: "GPU-a1", PCIBusID: "00000000:02:00.0", Model: "NVIDIA L4",
		Telemetry: gpu.Telemetry{
			UtilizationPercent: p(37), MemoryUtilizationPercent: p(12), MemoryUsedMiB: p(int64(1000)),
			MemoryTotalMiB: p(int64(23034)), TemperatureCelsius: p(61), PowerMilliwatts: p(int64(72500)),
		},
		LastXid: 31,
	}})
	c.Forget("node-b")
	l := `{Hostname="node-a",UUID="GPU-a1",device="nvidia1",gpu="1",modelName="NVIDIA L4",pci_bus_id="00000000:02:00.0"}`
	want := `
# HELP DCGM_FI_DEV_FB_FREE [ALPHA] Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE` + l + ` 22034
# HELP DCGM_FI_DEV_FB_USED [ALPHA] Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED` + l + ` 1000
# HELP DCGM_FI_DEV_GPU_TEMP [ALPHA] GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP` + l + ` 61
# HELP DCGM_FI_DEV_GPU_UTIL [ALPHA] GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL` + l + ` 37
# HELP DCGM_FI_DEV_MEM_COPY_UTIL [ALPHA] Memory utilization (in %).
# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge
DCGM_FI_DEV_MEM_COPY_UTIL` + l + ` 12
# HELP DCGM_FI_DEV_POWER_USAGE [ALPHA] Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE` + l + ` 72.5
# HELP DCGM_FI_DEV_XID_ERRORS [ALPHA] Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS` + l + ` 31
`
	// dcgm-exporter's label names are camelCase, which component-base's own comparison
	// refuses as lint; Prometheus' comparison checks the text alone.
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
