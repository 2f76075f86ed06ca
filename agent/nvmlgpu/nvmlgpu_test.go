package nvmlgpu_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
)

// TestRealNVML runs the adapter over the real libnvidia-ml. Without a driver Init must fail
// with an error, not a panic; on a GPU machine discovery must succeed.
func TestRealNVML(t *testing.T) {
	lib := nvmlgpu.New(nvml.New(), nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Skipf("no NVML here (the agent would fence the node): %v", err)
	}
	defer lib.Shutdown()
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	got, err := topology.Discover(devs)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got {
		t.Logf("GPU %d %s %s %d MiB bus %s island %s %d GB/s nvlink=%v lost=%v", d.Index, d.UUID, d.Product, d.MemoryMiB, d.PCIBusID, d.Island, d.BandwidthGBps, d.NVLink, d.Lost)
	}
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
