package mock

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	clocktesting "k8s.io/utils/clock/testing"
)

func utilization(t *testing.T, s *Server, i int) nvml.Utilization {
	t.Helper()
	d, ret := s.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("GPU %d: %v", i, ret)
	}
	u, ret := d.GetUtilizationRates()
	if ret != nvml.SUCCESS {
		t.Fatalf("utilization of GPU %d: %v", i, ret)
	}
	return u
}

// The load is a function of seed, GPU and time: the same node at the same instant reads the
// same in every run, other nodes read otherwise, and it moves as time passes.
func TestLoadIsDeterministicAndMoves(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	build := func(seed string) *Server {
		s, err := New(DGXH100, WithSeed(seed), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		if ret := s.Init(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		return s
	}
	a, again, other := build("node-1"), build("node-1"), build("node-2")
	differs, moved := false, false
	for i := range a.NumDevices() {
		ua := utilization(t, a, i)
		if ua != utilization(t, again, i) {
			t.Errorf("GPU %d of one seed reads %v and %v at one instant", i, ua, utilization(t, again, i))
		}
		if ua.Gpu > 100 || ua.Memory > 100 {
			t.Errorf("GPU %d utilization %v out of 0-100", i, ua)
		}
		differs = differs || ua != utilization(t, other, i)
	}
	if !differs {
		t.Error("two nodes show the same load on every GPU")
	}
	before := utilization(t, a, 0)
	for range 10 {
		clk.SetTime(clk.Now().Add(time.Minute))
		moved = moved || utilization(t, a, 0) != before
	}
	if !moved {
		t.Error("GPU 0's load did not move in ten minutes")
	}
}

// SetLoad pins a GPU's utilisation, and with it memory, temperature and power; -1 lets go.
func TestSetLoad(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	s, err := New(DGXA100, WithSeed("n"), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if ret := s.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := s.SetLoad(0, 90); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLoad(1, 5); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		clk.SetTime(clk.Now().Add(3 * time.Minute))
		if u := utilization(t, s, 0); u.Gpu != 90 {
			t.Fatalf("pinned GPU 0 reads %d%%", u.Gpu)
		}
	}
	d0, _ := s.DeviceGetHandleByIndex(0)
	d1, _ := s.DeviceGetHandleByIndex(1)
	m0, _ := d0.GetMemoryInfo()
	m1, _ := d1.GetMemoryInfo()
	t0, _ := d0.GetTemperature(nvml.TEMPERATURE_GPU)
	t1, _ := d1.GetTemperature(nvml.TEMPERATURE_GPU)
	p0, _ := d0.GetPowerUsage()
	p1, _ := d1.GetPowerUsage()
	if m0.Used <= m1.Used || m0.Used+m0.Free != m0.Total || t0 <= t1 || p0 <= p1 {
		t.Errorf("busy GPU 0 vs idle GPU 1: memory %+v vs %+v, %d°C vs %d°C, %d mW vs %d mW", m0, m1, t0, t1, p0, p1)
	}
	for _, bad := range []struct{ i, p int }{{-1, 10}, {8, 10}, {0, 101}} {
		if err := s.SetLoad(bad.i, bad.p); err == nil {
			t.Errorf("SetLoad(%d, %d) accepted", bad.i, bad.p)
		}
	}
	if err := s.SetLoad(0, -1); err != nil {
		t.Fatal(err)
	}
	released := false
	for range 10 {
		clk.SetTime(clk.Now().Add(time.Minute))
		released = released || utilization(t, s, 0).Gpu != 90
	}
	if !released {
		t.Error("GPU 0 still reads 90% for ten minutes after SetLoad(0, -1)")
	}
}

// Injected double-bit errors are counted in the volatile uncorrected ECC total.
func TestECCCounts(t *testing.T) {
	s, err := New(DGXA100, WithSeed("n"))
	if err != nil {
		t.Fatal(err)
	}
	if ret := s.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	d, _ := s.DeviceGetHandleByIndex(3)
	for range 2 {
		if err := s.Inject(3, Fault{Kind: FaultDoubleBitECC}); err != nil {
			t.Fatal(err)
		}
	}
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret != nvml.SUCCESS || n != 2 {
		t.Errorf("uncorrected ECC errors %d, %v; want 2", n, ret)
	}
	if _, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("aggregate ECC: %v, want NOT_SUPPORTED", ret)
	}
}
