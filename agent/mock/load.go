package mock

import (
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"
)

// The simulated load. Every GPU follows a slow wave of its own, drawn from the server's seed,
// topology and the GPU's index, so the same node shows the same load at the same instant in
// every run (tests pass a fake clock and can assert on it) while a fleet of nodes shows a
// spread of loads that move over minutes, as a busy cluster does. SetLoad pins a GPU's
// utilisation, for scenarios that need one node busier than another.

// wave is one GPU's utilisation over time: base ± amplitude, over period, shifted by phase.
type wave struct {
	base, amplitude float64
	period          time.Duration
	phase           float64
	// eccPerHour is how many corrected ECC errors the GPU collects per hour (most: none).
	eccPerHour float64
}

// waveFor draws a GPU's wave from the seed, topology and index.
func waveFor(seed, topology string, index int) wave {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%d", seed, topology, index)
	x := h.Sum64()
	next := func(n uint64) float64 { // a number in [0, 1) from the next bits of x
		v := x % n
		x /= n
		return float64(v) / float64(n)
	}
	w := wave{
		base:      10 + 60*next(1000),
		amplitude: 5 + 25*next(1000),
		period:    time.Duration(5+15*next(1000)) * time.Minute,
		phase:     2 * math.Pi * next(1000),
	}
	if next(8) == 0 {
		w.eccPerHour = 1 + 5*next(100)
	}
	return w
}

// WithClock makes the simulated load follow c (default: the real clock).
func WithClock(c clock.PassiveClock) Option {
	return func(s *Server) { s.clock = c }
}

// SetLoad pins GPU index's utilisation to percent (0-100); a negative percent lets it follow its
// wave again.
func (s *Server) SetLoad(index, percent int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index < 0 || index >= len(s.devices) {
		return fmt.Errorf("set load of %s GPU %d: the server has GPUs 0-%d", s.topology, index, len(s.devices)-1)
	}
	if percent > 100 {
		return fmt.Errorf("set load of %s GPU %d: %d%% is more than 100%%", s.topology, index, percent)
	}
	s.devices[index].pinned = percent
	return nil
}

// load is what GPU d is doing at the server's current time.
type load struct {
	util, memUtil int
	usedMiB       uint64
	tempC         uint32
	powerMW       uint32
	eccCorrected  uint64
}

// Power model: an idle GPU draws idleWatts, a fully busy one maxWatts.
const idleWatts, maxWatts = 60, 700

func (d *Device) loadLocked() load {
	s := d.server
	now := s.clock.Now()
	w := waveFor(s.seed, s.topology, d.index)
	util := d.pinned
	if util < 0 {
		t := float64(now.UnixNano()) / float64(w.period)
		util = int(math.Round(w.base + w.amplitude*math.Sin(2*math.Pi*t+w.phase)))
		util = max(0, min(100, util))
	}
	u := float64(util) / 100
	return load{
		util:    util,
		memUtil: int(math.Round(60 * u)),
		// A loaded model holds memory whether or not its kernels run at this instant.
		usedMiB:      uint64(float64(d.memoryMiB) * (0.05 + 0.85*u)),
		tempC:        uint32(32 + math.Round(50*u)),
		powerMW:      uint32(1000 * (idleWatts + (maxWatts-idleWatts)*u)),
		eccCorrected: uint64(w.eccPerHour * float64(now.Unix()%(24*3600)) / 3600),
	}
}

func (d *Device) load() (load, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return load{}, ret
	}
	d.server.mu.Lock()
	defer d.server.mu.Unlock()
	return d.loadLocked(), nvml.SUCCESS
}

// GetUtilizationRates is the GPU's simulated load.
func (d *Device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	l, ret := d.load()
	return nvml.Utilization{Gpu: uint32(l.util), Memory: uint32(l.memUtil)}, ret
}

// GetTemperature is the core temperature; it follows the load.
func (d *Device) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	if sensor != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	l, ret := d.load()
	return l.tempC, ret
}

// GetPowerUsage is the power draw in milliwatts; it follows the load.
func (d *Device) GetPowerUsage() (uint32, nvml.Return) {
	l, ret := d.load()
	return l.powerMW, ret
}

// GetTotalEccErrors counts volatile ECC errors: corrected ones accrue slowly on a few GPUs
// (the count restarts every simulated day, as after a driver reload), uncorrected ones are the
// double-bit errors injected since the server was built.
func (d *Device) GetTotalEccErrors(typ nvml.MemoryErrorType, counter nvml.EccCounterType) (uint64, nvml.Return) {
	if counter != nvml.VOLATILE_ECC {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	l, ret := d.load()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	switch typ {
	case nvml.MEMORY_ERROR_TYPE_CORRECTED:
		return l.eccCorrected, nvml.SUCCESS
	case nvml.MEMORY_ERROR_TYPE_UNCORRECTED:
		d.server.mu.Lock()
		defer d.server.mu.Unlock()
		return d.doubleBit, nvml.SUCCESS
	default:
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
}
