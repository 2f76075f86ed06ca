package nvmlgpu_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
)

// TestRealNVML runs the adapter over the real libnvidia-ml. Without a driver Init must fail
// with an error, not a panic. On a GPU machine it logs everything the agent reads of each GPU
// (discovery, device minor, telemetry, the health events it can register) and checks that the
// readings are sane: the device node of the minor exists and is that minor, memory in use fits
// in the memory, utilisation is a percentage, temperature and power are physical, and the
// event watch registers and waits without error.
func TestRealNVML(t *testing.T) {
	lib := nvmlgpu.New(nvml.New(), nvmlgpu.Options{EventWaitTimeout: 500 * time.Millisecond})
	if err := lib.Init(); err != nil {
		t.Skipf("no NVML here (the agent would fence the node): %v", err)
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	if v, ret := nvml.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		t.Logf("driver %s", v)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		t.Fatal("NVML started but lists no GPU")
	}
	got, err := topology.Discover(devs)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range got {
		t.Logf("GPU %d %s %q %d MiB bus %s minor %d island %s %d GB/s nvlink=%v lost=%v", d.Index, d.UUID, d.Product, d.MemoryMiB, d.PCIBusID, d.Minor, d.Island, d.BandwidthGBps, d.NVLink, d.Lost)
		if d.Lost != nil || !strings.HasPrefix(d.UUID, "GPU-") || d.Product == "" || d.MemoryMiB <= 0 || d.PCIBusID == "" {
			t.Errorf("GPU %d: discovery %+v", d.Index, d)
		}
		checkDeviceNode(t, d.Index, d.Minor)
		link, err := devs[i].PCIeLink()
		if err != nil {
			t.Errorf("GPU %d PCIe link: %v", d.Index, err)
		}
		links, err := devs[i].NVLinks()
		if err != nil {
			t.Errorf("GPU %d NVLinks: %v", d.Index, err)
		}
		active := 0
		for _, l := range links {
			if l.Active {
				active++
			}
		}
		t.Logf("GPU %d PCIe gen %d x%d, %d NVLink links (%d active)", d.Index, link.Generation, link.Width, len(links), active)
		tm, err := devs[i].Telemetry()
		if err != nil {
			t.Errorf("GPU %d telemetry: %v", d.Index, err)
			continue
		}
		t.Logf("GPU %d telemetry: utilisation %s%%, memory utilisation %s%%, memory %s/%s MiB, %s C, %s mW, ECC corrected %s uncorrected %s",
			d.Index, show(tm.UtilizationPercent), show(tm.MemoryUtilizationPercent), show(tm.MemoryUsedMiB), show(tm.MemoryTotalMiB),
			show(tm.TemperatureCelsius), show(tm.PowerMilliwatts), show(tm.ECCCorrected), show(tm.ECCUncorrected))
		if tm.UtilizationPercent == nil || *tm.UtilizationPercent < 0 || *tm.UtilizationPercent > 100 ||
			tm.MemoryUtilizationPercent == nil || *tm.MemoryUtilizationPercent < 0 || *tm.MemoryUtilizationPercent > 100 {
			t.Errorf("GPU %d: utilisation is not a percentage", d.Index)
		}
		if tm.MemoryTotalMiB == nil || *tm.MemoryTotalMiB != d.MemoryMiB || tm.MemoryUsedMiB == nil || *tm.MemoryUsedMiB < 0 || *tm.MemoryUsedMiB > *tm.MemoryTotalMiB {
			t.Errorf("GPU %d: memory in use %s of %s MiB, discovery said %d MiB", d.Index, show(tm.MemoryUsedMiB), show(tm.MemoryTotalMiB), d.MemoryMiB)
		}
		if tm.TemperatureCelsius != nil && (*tm.TemperatureCelsius < 5 || *tm.TemperatureCelsius > 110) {
			t.Errorf("GPU %d: core temperature %d C", d.Index, *tm.TemperatureCelsius)
		}
		if tm.PowerMilliwatts != nil && (*tm.PowerMilliwatts <= 0 || *tm.PowerMilliwatts > 2_000_000) {
			t.Errorf("GPU %d: power draw %d mW", d.Index, *tm.PowerMilliwatts)
		}
		if (tm.ECCCorrected != nil && *tm.ECCCorrected < 0) || (tm.ECCUncorrected != nil && *tm.ECCUncorrected < 0) {
			t.Errorf("GPU %d: negative ECC counts", d.Index)
		}
		f, err := devs[i].Fabric()
		t.Logf("GPU %d NVLink fabric: %+v", d.Index, f)
		if err != nil {
			t.Errorf("GPU %d NVLink fabric: %v", d.Index, err)
		}
		h, ret := nvml.DeviceGetHandleByIndex(d.Index)
		if ret == nvml.SUCCESS {
			ev, ret := h.GetSupportedEventTypes()
			t.Logf("GPU %d events supported %#x (%v): Xid %v, double-bit ECC %v", d.Index, ev, ret,
				ev&nvml.EventTypeXidCriticalError != 0, ev&nvml.EventTypeDoubleBitEccError != 0)
		}
	}
	// The watch registers every GPU and waits; for a few waits nothing may go wrong.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	events := make(chan gpu.Event, 16)
	if err := lib.WatchEvents(ctx, devs, events); err != nil {
		t.Errorf("watching health events: %v", err)
	}
	close(events)
	for ev := range events {
		t.Logf("health event during the watch: %+v", ev)
	}
}

// checkDeviceNode checks that /dev/nvidia<minor> is the character device of that minor: the
// node the device plugin hands a container for this GPU.
func checkDeviceNode(t *testing.T, index, minor int) {
	t.Helper()
	path := fmt.Sprintf("/dev/nvidia%d", minor)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Errorf("GPU %d (minor %d): %v", index, minor, err)
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || int(unix.Minor(st.Rdev)) != minor {
		t.Errorf("GPU %d: %s is mode %o device %d:%d, want the character device of minor %d", index, path, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), minor)
		return
	}
	t.Logf("GPU %d device node %s: char %d:%d", index, path, unix.Major(st.Rdev), unix.Minor(st.Rdev))
}

func show[T int | int64](p *T) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprint(*p)
}

func TestErrorsCarryTheReturnCode(t *testing.T) {
	srv, _ := mock.New(mock.DGXA100)
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if _, err := lib.Devices(); !errors.Is(err, nvml.ERROR_UNINITIALIZED) {
		t.Errorf("Devices before Init: %v, want ERROR_UNINITIALIZED", err)
	}
	srv.SetInitError(nvml.ERROR_DRIVER_NOT_LOADED)
	if err := lib.Init(); !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		t.Errorf("Init: %v, want ERROR_DRIVER_NOT_LOADED", err)
	}
	srv.SetInitError(nvml.SUCCESS)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Inject(1, mock.Fault{Kind: mock.FaultLost}); err != nil {
		t.Fatal(err)
	}
	_, err = devs[1].UUID()
	if !errors.Is(err, gpu.ErrLost) || !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Errorf("UUID of a lost GPU: %v, want gpu.ErrLost and ERROR_GPU_IS_LOST", err)
	}
	if err := devs[1].Probe(); !errors.Is(err, gpu.ErrLost) {
		t.Errorf("Probe of a lost GPU: %v", err)
	}
	if err := srv.Inject(2, mock.Fault{Kind: mock.FaultRemapFailure}); err != nil {
		t.Fatal(err)
	}
	if err := devs[2].Probe(); !errors.Is(err, gpu.ErrFaulted) {
		t.Errorf("Probe of a GPU with a failed remapping: %v", err)
	}
}

func TestWatchEvents(t *testing.T) {
	srv, _ := mock.New(mock.DGXH100)
	lib := nvmlgpu.New(srv, nvmlgpu.Options{EventWaitTimeout: time.Millisecond, LostPause: time.Millisecond})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, _ := lib.Devices()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan gpu.Event, 8)
	done := make(chan error, 1)
	go func() { done <- lib.WatchEvents(ctx, devs, out) }()
	deadline := time.After(10 * time.Second)
	for i := range srv.NumDevices() {
		for !srv.Watched(i) {
			select {
			case <-deadline:
				t.Fatal("never registered")
			case <-time.After(time.Millisecond):
			}
		}
	}
	for _, f := range []mock.Fault{{Kind: mock.FaultXid, Xid: 48}, {Kind: mock.FaultDoubleBitECC}, {Kind: mock.FaultXid, Xid: 79}} {
		if err := srv.Inject(6, f); err != nil {
			t.Fatal(err)
		}
	}
	want := []gpu.Event{
		{Kind: gpu.EventXid, Device: 6, Xid: 48},
		{Kind: gpu.EventDoubleBitECC, Device: 6},
		{Kind: gpu.EventXid, Device: 6, Xid: 79}, // named by handle although it can no longer tell its UUID
		{Kind: gpu.EventLost, Device: -1},
	}
	for _, w := range want {
		select {
		case got := <-out:
			if got != w {
				t.Errorf("event %+v, want %+v", got, w)
			}
		case <-deadline:
			t.Fatalf("no event; want %+v", w)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchEvents: %v", err)
	}
}

// Telemetry reads the mock's load through the adapter; a lost GPU fails with ErrLost.
func TestTelemetry(t *testing.T) {
	srv, _ := mock.New(mock.DGXA100, mock.WithSeed("n"))
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.SetLoad(2, 40); err != nil {
		t.Fatal(err)
	}
	tm, err := devs[2].Telemetry()
	if err != nil {
		t.Fatal(err)
	}
	if tm.UtilizationPercent == nil || *tm.UtilizationPercent != 40 || tm.MemoryTotalMiB == nil || *tm.MemoryTotalMiB != 81920 ||
		tm.MemoryUsedMiB == nil || *tm.MemoryUsedMiB <= 0 || tm.TemperatureCelsius == nil || tm.PowerMilliwatts == nil ||
		tm.MemoryUtilizationPercent == nil || tm.ECCCorrected == nil || tm.ECCUncorrected == nil || *tm.ECCUncorrected != 0 {
		t.Errorf("GPU 2 at 40%%: %+v", tm)
	}
	if err := srv.Inject(2, mock.Fault{Kind: mock.FaultLost}); err != nil {
		t.Fatal(err)
	}
	if _, err := devs[2].Telemetry(); !errors.Is(err, gpu.ErrLost) {
		t.Errorf("telemetry of a lost GPU: %v, want ErrLost", err)
	}
}

// TestFabric reads the NVLink fabric as NVML answers it: a registered GPU's cluster UUID and
// clique, NOT_SUPPORTED as a GPU in no domain, a registration still running without a clique,
// and a failed registration as the fabric's error.
func TestFabric(t *testing.T) {
	srv, err := mock.New("gb200-nvl72", mock.WithSeed("rack-20"))
	if err != nil {
		t.Fatal(err)
	}
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := gpu.Fabric{State: gpu.FabricCompleted, ClusterUUID: mock.FabricDomain("gb200-nvl72", "rack-20", 18).String(), CliqueID: 1}
	if f, err := devs[0].Fabric(); err != nil || f != want {
		t.Errorf("registered: %+v, %v; want %+v", f, err, want)
	}
	srv.SetFabric(0, &mock.FabricAnswer{Return: nvml.ERROR_NOT_SUPPORTED})
	if f, err := devs[0].Fabric(); err != nil || f != (gpu.Fabric{State: gpu.FabricNotSupported}) {
		t.Errorf("NOT_SUPPORTED: %+v, %v; want NotSupported and no error", f, err)
	}
	srv.SetFabric(0, &mock.FabricAnswer{Return: nvml.ERROR_FUNCTION_NOT_FOUND})
	if f, err := devs[0].Fabric(); err != nil || f != (gpu.Fabric{State: gpu.FabricNotSupported}) {
		t.Errorf("a driver without the query: %+v, %v; want NotSupported and no error", f, err)
	}
	srv.SetFabric(0, &mock.FabricAnswer{Info: nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_IN_PROGRESS, CliqueId: 5}})
	if f, err := devs[0].Fabric(); err != nil || f != (gpu.Fabric{State: gpu.FabricInProgress}) {
		t.Errorf("in progress: %+v, %v; want InProgress without a clique", f, err)
	}
	srv.SetFabric(0, &mock.FabricAnswer{Info: nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.ERROR_TIMEOUT)}})
	if f, err := devs[0].Fabric(); err != nil || f.State != gpu.FabricCompleted || !errors.Is(f.Err, nvml.ERROR_TIMEOUT) {
		t.Errorf("failed registration: %+v, %v; want Completed with the timeout as its error", f, err)
	}
	srv.SetFabric(0, &mock.FabricAnswer{Info: nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED}})
	if f, err := devs[0].Fabric(); err != nil || f != (gpu.Fabric{State: gpu.FabricNotSupported}) {
		t.Errorf("registered without a cluster (a one-node NVSwitch fabric): %+v, %v; want NotSupported", f, err)
	}
	srv.SetFabric(0, &mock.FabricAnswer{Return: nvml.ERROR_UNKNOWN})
	if _, err := devs[0].Fabric(); !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Errorf("NVML failure: %v, want ERROR_UNKNOWN", err)
	}
	if f, err := devs[1].Fabric(); err != nil || f != want {
		t.Errorf("GPU 1 (not overridden): %+v, %v; want %+v", f, err, want)
	}
	// A driver older than the query: the adapter must not call it (the real libnvml would end
	// the process), so the override that fails every call goes unasked.
	srv.SetMissingSymbol("nvmlDeviceGetGpuFabricInfo")
	srv.SetFabric(1, &mock.FabricAnswer{Return: nvml.ERROR_UNKNOWN})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	if devs, err = lib.Devices(); err != nil {
		t.Fatal(err)
	}
	if f, err := devs[1].Fabric(); err != nil || f != (gpu.Fabric{State: gpu.FabricNotSupported}) {
		t.Errorf("driver without the query: %+v, %v; want NotSupported and no call", f, err)
	}
}

// TestMIGDiscovery: the adapter reads the MIG layout of the mock's dgx-h100-mig preset (mode,
// slices, each device's slot, size, profile name, UUID and memory) and answers nil for GPUs
// of a model without MIG.
func TestMIGDiscovery(t *testing.T) {
	srv, err := mock.New("dgx-h100-mig", mock.WithSeed("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]*gpu.MIG{}
	for _, d := range devs {
		m, err := d.MIG()
		if err != nil {
			t.Fatalf("GPU %d: %v", d.Index(), err)
		}
		got[d.Index()] = m
	}
	if m := got[1]; m == nil || !m.Enabled || m.Slices != 8 || len(m.Devices) != 2 ||
		m.Devices[0].Slot != 0 || m.Devices[0].Size != 4 || m.Devices[0].Profile != "3g.40gb" ||
		m.Devices[1].Slot != 4 || m.Devices[1].MemoryMiB != 40192 || m.Devices[1].GI != 2 || m.Devices[1].CI != 0 || !strings.HasPrefix(m.Devices[1].UUID, "MIG-") {
		t.Errorf("GPU 1 MIG = %+v, want enabled, 8 slices, 3g.40gb at slots 0 and 4", m)
	}
	var profiles []string
	for _, d := range got[2].Devices {
		profiles = append(profiles, fmt.Sprintf("%s@%d/%d", d.Profile, d.Slot, d.Size))
	}
	if want := "2g.20gb@0/2 1g.20gb@2/2 1g.10gb@4/1 1g.10gb@5/1"; strings.Join(profiles, " ") != want {
		t.Errorf("GPU 2 MIG devices = %v, want %s", profiles, want)
	}
	if m := got[0]; m == nil || len(m.Devices) != 7 {
		t.Errorf("GPU 0 MIG = %+v, want seven 1g.10gb", m)
	}
	if m := got[3]; m == nil || !m.Enabled || len(m.Devices) != 0 {
		t.Errorf("GPU 3 MIG = %+v, want enabled without devices", m)
	}
	if m := got[4]; m == nil || m.Enabled || m.Slices != 8 {
		t.Errorf("GPU 4 MIG = %+v, want MIG-capable, mode off", m)
	}

	plain, err := mock.New(mock.PCIeOnly)
	if err != nil {
		t.Fatal(err)
	}
	lib = nvmlgpu.New(plain, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err = lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if m, err := devs[0].MIG(); m != nil || err != nil {
		t.Errorf("L40S MIG() = %+v, %v; want nil, nil (NOT_SUPPORTED is no MIG)", m, err)
	}
}

// TestProfileName: the names NVIDIA's tools give the profiles of A100 40GB, H100 80GB and H200.
func TestProfileName(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		profile  int
		slices   uint32
		mem, gpu uint64
		want     string
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 4864, 40960 * mib, "1g.5gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 40192, 40960 * mib, "7g.40gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 9856, 81559 * mib, "1g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 9856, 81559 * mib, "1g.10gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 40192, 81559 * mib, "3g.40gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 16896, 143771 * mib, "1g.18gb"},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 71424, 143771 * mib, "3g.71gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 143360, 143771 * mib, "7g.141gb"},
	} {
		if got := nvmlgpu.ProfileName(tc.profile, tc.slices, tc.mem, tc.gpu); got != tc.want {
			t.Errorf("ProfileName(%d, %d, %d MiB of %d MiB) = %q, want %q", tc.profile, tc.slices, tc.mem, tc.gpu/mib, got, tc.want)
		}
	}
}

// TestMIGOnGoNVMLDGXA100: go-nvml's own dgxa100 mock (its MIG profiles and placements, mode
// off) reads as MIG-capable with 8 slices and no devices; with the mode off the MIG device
// calls it lacks (GetMaxMigDeviceCount, GetMigDeviceHandleByIndex) are never made.
func TestMIGOnGoNVMLDGXA100(t *testing.T) {
	srv := dgxa100.New()
	if ret := srv.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	d, ret := srv.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	m, err := nvmlgpu.DeviceForTest(d, 0).MIG()
	if err != nil || m == nil || m.Enabled || m.Slices != 8 || len(m.Devices) != 0 {
		t.Fatalf("dgxa100 GPU 0 MIG() = %+v, %v; want MIG-capable, mode off, 8 slices", m, err)
	}
}

// TestMIGModeOffToleratesProfileErrors: with the mode off, a driver that does not answer the
// profile queries leaves the GPU MIG-capable without slices instead of failing its discovery.
func TestMIGModeOffToleratesProfileErrors(t *testing.T) {
	srv := dgxa100.New()
	if ret := srv.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	h, _ := srv.DeviceGetHandleByIndex(0)
	h.(*dgxa100.Device).GetGpuInstanceProfileInfoFunc = func(int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_UNKNOWN
	}
	m, err := nvmlgpu.DeviceForTest(h, 0).MIG()
	if err != nil || m == nil || m.Enabled || m.Slices != 0 {
		t.Fatalf("MIG() = %+v, %v; want MIG-capable, mode off, no error", m, err)
	}
}
