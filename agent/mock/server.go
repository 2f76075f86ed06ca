// Package mock is a set of simulated GPU servers that speak go-nvml's nvml.Interface, so the
// agent's production adapter (package nvmlgpu) runs against them unchanged. They are built on
// go-nvml's generated mock types, which supply the hundreds of NVML calls the agent never makes
// (calling one panics, loudly). Every call the agent does make is a method of our own here,
// for two reasons: go-nvml's presets have no topology or NVLink answers, empty PCI bus IDs and
// random UUIDs; and the generated mocks append every call to an in-memory record that a
// long simulation would grow without bound.
//
// Servers are built from hardware descriptions (Hardware, Build): the presets embedded from
// scenarios/hardware and any a scenario registers are found by name (Names, New); the simulator
// and the acceptance tests refer to them by these names. Faults are injected at run time with Server.Inject.
package mock

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
	"k8s.io/utils/clock"
)

// Server is one simulated GPU server.
type Server struct {
	// The nvml interfaces are embedded, nil, for the methods the simulator does not serve:
	// calling one panics. go-nvml's generated mocks would do the same with a longer message,
	// but they carry a function field, a call log and a mutex per method, tens of kilobytes
	// per GPU, which a fleet of 5,000 nodes pays 40,000 times (heap profile of a 1,000-node fleet: 167 MB in Build).
	nvml.Interface

	topology string
	// seed is WithSeed's (the node name in the fleet); multiNode the node's multi-node NVLink
	// domain, if any.
	seed      string
	multiNode *MultiNodeSpec
	mu        sync.Mutex
	devices   []*Device
	initErr   nvml.Return
	inits     int
	sets      []*EventSet
	// missing are the library symbols LookupSymbol denies (SetMissingSymbol).
	missing map[string]bool
	// calls counts device queries: a bounded stand-in for the generated mocks' call records.
	calls atomic.Uint64
	// clock drives the simulated load (load.go).
	clock clock.PassiveClock
}

var _ nvml.Interface = &Server{}

// Device is one simulated GPU.
type Device struct {
	nvml.Device // nil: see Server

	server    *Server
	index     int
	minor     int
	uuid      string
	name      string
	busID     string
	memoryMiB uint64
	pcie      pcie
	links     []link

	// Guarded by server.mu.
	lost         bool
	remapFailure bool
	registered   map[*EventSet]uint64
	// pinned is the utilisation SetLoad fixed, or -1 to follow the GPU's wave.
	pinned int
	// doubleBit counts the double-bit ECC errors injected.
	doubleBit uint64
	// fabric, when set, is what GetGpuFabricInfo answers (SetFabric).
	fabric *FabricAnswer
	// mig is the GPU's MIG mode and devices; nil for a model without MIG.
	mig *migState
}

var _ nvml.Device = &Device{}

type pcie struct {
	gen, width int
	// path is the GPU's place in the PCIe tree from the root: socket, host bridge, switches.
	path []string
}

type link struct {
	version    nvml.NvlinkVersion
	remoteBus  string
	remoteType nvml.IntNvLinkDeviceType
}

// Option configures New.
type Option func(*Server)

// WithSeed makes the GPUs' UUIDs depend on seed as well as on the topology and index; the
// fleet passes the node name so that no two simulated GPUs share a UUID.
func WithSeed(seed string) Option {
	return func(s *Server) {
		s.seed = seed
		for _, d := range s.devices {
			d.uuid = deviceUUID(seed, s.topology, d.index)
		}
	}
}

// uuidSpace is the namespace of simulated GPU UUIDs.
var uuidSpace = uuid.MustParse("6f0d7c51-5d4e-4c4e-9a57-1c0f1f2a9b10")

func deviceUUID(seed, topology string, index int) string {
	return "GPU-" + uuid.NewSHA1(uuidSpace, fmt.Appendf(nil, "%s/%s/%d", seed, topology, index)).String()
}

// Topology is the name this server was built from.
func (s *Server) Topology() string { return s.topology }

// NumDevices is how many GPUs the server has.
func (s *Server) NumDevices() int { return len(s.devices) }

// SetInitError makes Init fail with ret (nvml.SUCCESS lets it succeed again), as NVML does
// when the driver is missing or broken.
func (s *Server) SetInitError(ret nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initErr = ret
}

// Init starts an NVML session.
func (s *Server) Init() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.initErr != nvml.SUCCESS {
		return s.initErr
	}
	s.inits++
	return nvml.SUCCESS
}

// Shutdown ends an NVML session; event sets die with it.
func (s *Server) Shutdown() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inits == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	s.inits--
	return nvml.SUCCESS
}

func (s *Server) initialized() nvml.Return {
	if s.inits == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	return nvml.SUCCESS
}

// DeviceGetCount counts the GPUs.
func (s *Server) DeviceGetCount() (int, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ret := s.initialized(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return len(s.devices), nvml.SUCCESS
}

// DeviceGetHandleByIndex returns GPU i.
func (s *Server) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ret := s.initialized(); ret != nvml.SUCCESS {
		return nil, ret
	}
	if i < 0 || i >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.devices[i], nvml.SUCCESS
}

// SystemGetDriverVersion is a plausible driver version.
func (s *Server) SystemGetDriverVersion() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS }

// EventSetCreate makes an event set the devices can be registered with.
func (s *Server) EventSetCreate() (nvml.EventSet, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ret := s.initialized(); ret != nvml.SUCCESS {
		return nil, ret
	}
	set := &EventSet{server: s, queue: make(chan nvml.EventData, eventQueueLen), freed: make(chan struct{})}
	s.sets = append(s.sets, set)
	return set, nvml.SUCCESS
}

// eventQueueLen bounds the events waiting in one set; when full, further events are dropped
// as a driver's ring buffer would drop them.
const eventQueueLen = 64

// EventSet is a simulated NVML event set. It is not go-nvml's generated EventSet: Wait is
// called in a loop for as long as the simulation runs, and the generated one records each call.
type EventSet struct {
	server *Server
	queue  chan nvml.EventData
	freed  chan struct{}
	once   sync.Once
}

var _ nvml.EventSet = &EventSet{}

// Wait returns the next event, or ERROR_TIMEOUT after timeoutms milliseconds.
func (e *EventSet) Wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	t := time.NewTimer(time.Duration(timeoutms) * time.Millisecond)
	defer t.Stop()
	select {
	case ev := <-e.queue:
		if ev.EventType == lostMarker {
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		}
		return ev, nvml.SUCCESS
	case <-e.freed:
		return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

// Free releases the set; a Wait in progress returns at once.
func (e *EventSet) Free() nvml.Return {
	e.once.Do(func() {
		close(e.freed)
		s := e.server
		s.mu.Lock()
		defer s.mu.Unlock()
		s.sets = slices.DeleteFunc(s.sets, func(x *EventSet) bool { return x == e })
		for _, d := range s.devices {
			delete(d.registered, e)
		}
	})
	return nvml.SUCCESS
}

// lostMarker is queued to make Wait answer ERROR_GPU_IS_LOST, as libnvml does when a GPU
// falls off the bus. It is no real event type.
const lostMarker = uint64(1) << 63

func (e *EventSet) post(ev nvml.EventData) {
	select {
	case e.queue <- ev:
	default:
	}
}

// Watched tells whether some event set listens to GPU index's events: faults injected before
// the agent registers are not seen as events, so tests wait for this first.
func (s *Server) Watched(index int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return index >= 0 && index < len(s.devices) && len(s.devices[index].registered) > 0
}

// GetIndex is the GPU's index.
func (d *Device) GetIndex() (int, nvml.Return) { return d.index, nvml.SUCCESS }

// Calls is how many device queries the server has answered so far.
func (s *Server) Calls() uint64 { return s.calls.Load() }

// answer is what every query returns first: GPU_IS_LOST once the GPU fell off the bus.
func (d *Device) answer() nvml.Return {
	d.server.calls.Add(1)
	d.server.mu.Lock()
	defer d.server.mu.Unlock()
	if ret := d.server.initialized(); ret != nvml.SUCCESS {
		return ret
	}
	if d.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	return nvml.SUCCESS
}

// GetUUID is deterministic: the same topology, index and seed give the same UUID.
func (d *Device) GetUUID() (string, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return "", ret
	}
	return d.uuid, nvml.SUCCESS
}

// GetMinorNumber is the driver's minor number (the GPU's /dev/nvidia<minor>).
func (d *Device) GetMinorNumber() (int, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return d.minor, nvml.SUCCESS
}

// GetName is the product name.
func (d *Device) GetName() (string, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return "", ret
	}
	return d.name, nvml.SUCCESS
}

// GetMemoryInfo reports the total memory and, following the simulated load, the memory in use.
func (d *Device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	l, ret := d.load()
	if ret != nvml.SUCCESS {
		return nvml.Memory{}, ret
	}
	total, used := d.memoryMiB<<20, l.usedMiB<<20
	return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
}

// GetPciInfo reports the bus ID.
func (d *Device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return nvml.PciInfo{}, ret
	}
	return pciInfo(d.busID), nvml.SUCCESS
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	copy(p.BusId[:len(p.BusId)-1], bus)
	return p
}

// GetMaxPcieLinkGeneration is the PCIe generation.
func (d *Device) GetMaxPcieLinkGeneration() (int, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return d.pcie.gen, nvml.SUCCESS
}

// GetMaxPcieLinkWidth is the PCIe lane count.
func (d *Device) GetMaxPcieLinkWidth() (int, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return d.pcie.width, nvml.SUCCESS
}

func (d *Device) linkAt(i int) (link, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return link{}, ret
	}
	if len(d.links) == 0 {
		return link{}, nvml.ERROR_NOT_SUPPORTED
	}
	if i < 0 || i >= len(d.links) {
		return link{}, nvml.ERROR_INVALID_ARGUMENT
	}
	return d.links[i], nvml.SUCCESS
}

// GetNvLinkState: every link the topology wires is up.
func (d *Device) GetNvLinkState(i int) (nvml.EnableState, nvml.Return) {
	if _, ret := d.linkAt(i); ret != nvml.SUCCESS {
		return nvml.FEATURE_DISABLED, ret
	}
	return nvml.FEATURE_ENABLED, nvml.SUCCESS
}

// GetNvLinkVersion is the link's NVLink version (nvmlNvlinkVersion_t).
func (d *Device) GetNvLinkVersion(i int) (uint32, nvml.Return) {
	l, ret := d.linkAt(i)
	return uint32(l.version), ret
}

// GetNvLinkRemotePciInfo is the bus ID of the GPU or NVSwitch at the far end.
func (d *Device) GetNvLinkRemotePciInfo(i int) (nvml.PciInfo, nvml.Return) {
	l, ret := d.linkAt(i)
	if ret != nvml.SUCCESS {
		return nvml.PciInfo{}, ret
	}
	return pciInfo(l.remoteBus), nvml.SUCCESS
}

// GetNvLinkRemoteDeviceType is GPU or SWITCH.
func (d *Device) GetNvLinkRemoteDeviceType(i int) (nvml.IntNvLinkDeviceType, nvml.Return) {
	l, ret := d.linkAt(i)
	return l.remoteType, ret
}

// GetTopologyCommonAncestor compares the two GPUs' places in the PCIe tree.
func (d *Device) GetTopologyCommonAncestor(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	o, ok := other.(*Device)
	if !ok || o.server != d.server {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if ret := o.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return commonAncestor(d.pcie.path, o.pcie.path, d == o), nvml.SUCCESS
}

func commonAncestor(a, b []string, same bool) nvml.GpuTopologyLevel {
	if same {
		return nvml.TOPOLOGY_INTERNAL
	}
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	switch {
	case p == 0:
		return nvml.TOPOLOGY_SYSTEM
	case p == 1:
		return nvml.TOPOLOGY_NODE
	case p == 2:
		return nvml.TOPOLOGY_HOSTBRIDGE
	case p == len(a) && p == len(b):
		return nvml.TOPOLOGY_SINGLE
	default:
		return nvml.TOPOLOGY_MULTIPLE
	}
}

// GetSupportedEventTypes: Xid and ECC events.
func (d *Device) GetSupportedEventTypes() (uint64, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
}

// RegisterEvents registers the GPU's events of the given types with set.
func (d *Device) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return ret
	}
	es, ok := set.(*EventSet)
	if !ok || es.server != d.server {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d.server.mu.Lock()
	defer d.server.mu.Unlock()
	d.registered[es] |= types
	return nvml.SUCCESS
}

// GetRemappedRows reports a row-remapping failure when one was injected.
func (d *Device) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return 0, 0, false, false, ret
	}
	d.server.mu.Lock()
	defer d.server.mu.Unlock()
	if d.remapFailure {
		return 0, 1, false, true, nvml.SUCCESS
	}
	return 0, 0, false, false, nvml.SUCCESS
}
