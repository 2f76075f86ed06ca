package agent_test

import (
	"maps"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/telemetry"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// The status carries each GPU's reading through the production NVML adapter, an Xid is counted
// on its GPU, and the same readings are exported under dcgm-exporter's names.
func TestTelemetryInStatusAndMetrics(t *testing.T) {
	collector := telemetry.NewCollector()
	// A telemetry write budget: the agent reads the GPUs as soon as it starts, maybe before the
	// loads below are pinned, and without a budget that first reading would stay in the status.
	h := newHarnessWith(t, mock.DGXH100, nvml.SUCCESS, func(c *agent.Config) {
		c.Telemetry, c.TelemetryWritesPerMinute = collector, 600
	})
	for i := range h.srv.NumDevices() {
		if err := h.srv.SetLoad(i, 10*i); err != nil {
			t.Fatal(err)
		}
	}
	st := h.until("the pinned loads in the status", 60, func(s *apiv1.GpuNodeStatus) bool {
		if s.Status.Total != 8 {
			return false
		}
		for _, d := range s.Status.Devices {
			if d.UtilizationPercent == nil || int(*d.UtilizationPercent) != 10*int(d.ID) {
				return false
			}
		}
		return true
	})
	if st.Status.TelemetryTime == nil || st.Status.TelemetryTime.IsZero() {
		t.Errorf("telemetryTime not set: %+v", st.Status)
	}
	for _, d := range st.Status.Devices {
		if d.UtilizationPercent == nil || int(*d.UtilizationPercent) != 10*int(d.ID) {
			t.Errorf("GPU %d utilization %v, want %d", d.ID, d.UtilizationPercent, 10*d.ID)
		}
		if d.MemoryUsedMiB == nil || *d.MemoryUsedMiB <= 0 || *d.MemoryUsedMiB >= d.MemoryMiB ||
			d.MemoryUtilizationPercent == nil || d.TemperatureCelsius == nil || d.PowerWatts == nil ||
			d.ECCCorrectedErrors == nil || d.ECCUncorrectedErrors == nil {
			t.Errorf("GPU %d telemetry incomplete: %+v", d.ID, d)
		}
	}
	// Busier GPUs use more memory, run hotter and draw more power.
	idle, busy := st.Status.Devices[0], st.Status.Devices[7]
	if *idle.MemoryUsedMiB >= *busy.MemoryUsedMiB || *idle.TemperatureCelsius >= *busy.TemperatureCelsius || *idle.PowerWatts >= *busy.PowerWatts {
		t.Errorf("GPU 0 at 0%% vs GPU 7 at 70%%: %+v vs %+v", idle, busy)
	}

	h.watched()
	if err := h.srv.Inject(2, mock.Fault{Kind: mock.FaultXid, Xid: 48}); err != nil {
		t.Fatal(err)
	}
	st = h.until("the Xid counted", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Devices[2].XidErrors == 1 })
	if d := st.Status.Devices[2]; d.LastXid != 48 || d.Health != apiv1.Unhealthy {
		t.Errorf("GPU 2 after Xid 48: %+v", d)
	}
	if d := st.Status.Devices[3]; d.XidErrors != 0 || d.LastXid != 0 {
		t.Errorf("GPU 3 had no Xid: %+v", d)
	}

	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(collector)
	h.eventually("the Xid exported", func() bool { return gathered(t, reg, "DCGM_FI_DEV_XID_ERRORS", "2") == 48 })
	d0 := st.Status.Devices[0]
	for name, want := range map[string]float64{
		"DCGM_FI_DEV_GPU_UTIL":          0,
		"DCGM_FI_DEV_FB_USED":           float64(*d0.MemoryUsedMiB),
		"DCGM_FI_DEV_FB_FREE":           float64(d0.MemoryMiB - *d0.MemoryUsedMiB),
		"DCGM_FI_DEV_GPU_TEMP":          float64(*d0.TemperatureCelsius),
		"DCGM_FI_DEV_POWER_USAGE":       float64(*d0.PowerWatts),
		"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
	} {
		if got := gathered(t, reg, name, "0"); got != want {
			t.Errorf("%s{gpu=\"0\"} = %v, want %v", name, got, want)
		}
	}
	if got := gathered(t, reg, "DCGM_FI_DEV_GPU_UTIL", "7"); got != 70 {
		t.Errorf("DCGM_FI_DEV_GPU_UTIL{gpu=\"7\"} = %v, want 70", got)
	}
	// The labels are dcgm-exporter's.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "DCGM_FI_DEV_GPU_UTIL" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["gpu"] != "0" {
				continue
			}
			want := map[string]string{"gpu": "0", "UUID": d0.UUID, "pci_bus_id": d0.PCIBusID, "device": "nvidia0",
				"modelName": "NVIDIA H100 80GB HBM3", "Hostname": node}
			if !maps.Equal(got, want) {
				t.Errorf("labels %v, want %v", got, want)
			}
		}
	}
}

// gathered is the value of the series name of GPU gpu, or -1 when there is none.
func gathered(t *testing.T, reg metrics.KubeRegistry, name, gpu string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu" && l.GetValue() == gpu {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestTelemetryKeepsItsWriteBudget: over ten minutes of moving load the status is written at
// most the budget's 2 times a minute (30s apart at least), yet the load does get written.
func TestTelemetryKeepsItsWriteBudget(t *testing.T) {
	h := newHarnessWith(t, mock.DGXH100, nvml.SUCCESS, func(c *agent.Config) { c.TelemetryWritesPerMinute = 2 })
	first := h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Total == 8 })
	start := first.Status.LastHeartbeatTime.Time
	for range 60 { // ten minutes in steps of the telemetry interval
		before := h.srv.Calls()
		h.clk.Step(10 * time.Second)
		h.nudging("a telemetry read", func() bool { return h.srv.Calls() > before })
	}
	var times []time.Time
	for _, a := range h.gpu.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			times = append(times, u.GetObject().(*apiv1.GpuNodeStatus).Status.LastHeartbeatTime.Time)
		}
	}
	elapsed := h.clk.Now().Sub(start)
	budget := 1 + int(elapsed/(30*time.Second))
	if len(times) < 3 || len(times) > budget {
		t.Fatalf("%d status writes in %s of moving load, want between 3 and %d", len(times), elapsed, budget)
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 30*time.Second {
			t.Errorf("writes %d and %d only %s apart; the budget of 2 a minute allows 30s", i-1, i, gap)
		}
	}
	t.Logf("%d status writes in %s", len(times), elapsed)
}

// TestTelemetryAloneWritesNothingByDefault: without a budget, ten minutes of moving load make no
// status write of their own (the first status is the only one before the 2-hour heartbeat),
// and the write that does go out carries the latest reading.
func TestTelemetryAloneWritesNothingByDefault(t *testing.T) {
	h := newHarness(t, mock.DGXH100, nvml.SUCCESS)
	h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Total == 8 })
	for range 60 { // ten minutes in steps of the telemetry interval
		before := h.srv.Calls()
		h.clk.Step(10 * time.Second)
		h.nudging("a telemetry read", func() bool { return h.srv.Calls() > before })
	}
	writes := 0
	for _, a := range h.gpu.Actions() {
		if _, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			writes++
		}
	}
	if writes > 1 {
		t.Fatalf("%d status writes in ten minutes of moving load with the default budget, want at most the first", writes)
	}
}
