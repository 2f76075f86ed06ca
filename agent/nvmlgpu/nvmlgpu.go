// Package nvmlgpu implements gpu.Library over go-nvml's nvml.Interface. Production passes
// nvml.New() (the real libnvml, loaded at Init); the simulator and tests pass a mock topology
// from package agent/mock, so this adapter is exercised by every test.
//
// Importing this package links go-nvml, which needs cgo and must not share a binary with Go's
// plugin package (the linker then binds every symbol at start and libnvml's are missing).
package nvmlgpu

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
)

// Options tunes the adapter.
type Options struct {
	// EventWaitTimeout bounds one blocking wait for events: it is how late a cancelled
	// WatchEvents notices its context. Default 2s.
	EventWaitTimeout time.Duration
	// LostPause is how long WatchEvents pauses after the library reports a lost GPU, so that
	// a GPU that stays lost does not spin the loop. Default 1s.
	LostPause time.Duration
	// Clock measures LostPause. Default: the real clock.
	Clock clock.Clock
}

// Library adapts an nvml.Interface.
type Library struct {
	lib  nvml.Interface
	opts Options
	// fabricQuery tells whether the loaded libnvml has the fabric query: go-nvml binds its
	// symbols lazily, and calling one a driver older than the query lacks ends the process.
	fabricQuery bool
}

var _ gpu.Library = &Library{}

// New adapts lib.
func New(lib nvml.Interface, opts Options) *Library {
	if opts.EventWaitTimeout <= 0 {
		opts.EventWaitTimeout = 2 * time.Second
	}
	if opts.LostPause <= 0 {
		opts.LostPause = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Library{lib: lib, opts: opts}
}

// Error is a failed NVML call: what was asked and the Return code NVML gave.
type Error struct {
	Op     string
	Return nvml.Return
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Op, e.Return.Error()) }

// Unwrap lets callers test errors.Is(err, nvml.ERROR_GPU_IS_LOST) and errors.Is(err, gpu.ErrLost).
func (e *Error) Unwrap() []error {
	if e.Return == nvml.ERROR_GPU_IS_LOST {
		return []error{e.Return, gpu.ErrLost}
	}
	return []error{e.Return}
}

func check(ret nvml.Return, format string, args ...any) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return &Error{Op: fmt.Sprintf(format, args...), Return: ret}
}

// Init initialises NVML. It recovers the panic go-nvml raises when libnvml cannot be loaded
// on some systems, so that a node without a driver is fenced rather than crash-looping.
func (l *Library) Init() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("NVML init: %v", r)
		}
	}()
	if err := check(l.lib.Init(), "NVML init"); err != nil {
		return err
	}
	l.fabricQuery = l.lib.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfo") == nil
	return nil
}

// Shutdown ends the NVML session.
func (l *Library) Shutdown() error { return check(l.lib.Shutdown(), "NVML shutdown") }

// Devices lists the GPUs in index order.
func (l *Library) Devices() ([]gpu.Device, error) {
	n, ret := l.lib.DeviceGetCount()
	if err := check(ret, "count GPUs"); err != nil {
		return nil, err
	}
	devs := make([]gpu.Device, 0, n)
	for i := 0; i < n; i++ {
		d, ret := l.lib.DeviceGetHandleByIndex(i)
		if err := check(ret, "get handle of GPU %d", i); err != nil {
			return nil, err
		}
		devs = append(devs, &device{index: i, dev: d, fabricQuery: l.fabricQuery})
	}
	return devs, nil
}

// healthEvents are the NVML event types the agent acts on.
const healthEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)

// WatchEvents registers every device for Xid and double-bit ECC events and delivers them.
func (l *Library) WatchEvents(ctx context.Context, devices []gpu.Device, out chan<- gpu.Event) error {
	set, ret := l.lib.EventSetCreate()
	if err := check(ret, "create NVML event set"); err != nil {
		return err
	}
	// Free only after the last Wait has returned: freeing a set that is being waited on is
	// undefined in libnvml. A failed free leaks the set inside libnvml but is no reason to fail
	// the watch (what it returns says why it ended), so it is logged.
	defer func() {
		if ret := set.Free(); ret != nvml.SUCCESS {
			klog.FromContext(ctx).Error(ret, "Freeing the NVML event set failed")
		}
	}()

	known := make([]*device, 0, len(devices))
	for _, gd := range devices {
		d, ok := gd.(*device)
		if !ok {
			return fmt.Errorf("watch GPU %d: device %T does not come from this library", gd.Index(), gd)
		}
		known = append(known, d)
		// A GPU without events (vGPU guests) or one that is lost right now is left out: the
		// probe still covers it, and the agent watches anew when a lost GPU comes back.
		supported, ret := d.dev.GetSupportedEventTypes()
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_GPU_IS_LOST {
			continue
		}
		if err := check(ret, "read supported events of GPU %d", d.index); err != nil {
			return err
		}
		ret = d.dev.RegisterEvents(healthEvents&supported, set)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_GPU_IS_LOST {
			continue
		}
		if err := check(ret, "register events of GPU %d", d.index); err != nil {
			return err
		}
	}

	timeoutMs := uint32(l.opts.EventWaitTimeout / time.Millisecond)
	for ctx.Err() == nil {
		data, ret := set.Wait(timeoutMs)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			// libnvml says a GPU is gone but not which one; the agent probes them all.
			if !send(ctx, out, gpu.Event{Kind: gpu.EventLost, Device: -1}) {
				return nil
			}
			select {
			case <-ctx.Done():
			case <-l.opts.Clock.After(l.opts.LostPause):
			}
			continue
		default:
			return check(ret, "wait for NVML events")
		}
		ev, ok := convert(data, known)
		if !ok {
			continue
		}
		if !send(ctx, out, ev) {
			return nil
		}
	}
	return nil
}

func send(ctx context.Context, out chan<- gpu.Event, ev gpu.Event) bool {
	select {
	case out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// convert maps NVML event data to a gpu.Event. It names the device by its handle and, failing
// that, by UUID; -1 when NVML gives no device the agent knows. The handle comes first because a
// GPU that fell off the bus can no longer tell its UUID.
func convert(data nvml.EventData, known []*device) (gpu.Event, bool) {
	idx := -1
	if data.Device != nil {
		for _, d := range known {
			if d.dev == data.Device {
				idx = d.index
				break
			}
		}
		if idx < 0 {
			if uuid, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
				for _, d := range known {
					if u, err := d.UUID(); err == nil && u == uuid {
						idx = d.index
						break
					}
				}
			}
		}
	}
	switch {
	case data.EventType&nvml.EventTypeXidCriticalError != 0:
		return gpu.Event{Kind: gpu.EventXid, Device: idx, Xid: data.EventData}, true
	case data.EventType&nvml.EventTypeDoubleBitEccError != 0:
		return gpu.Event{Kind: gpu.EventDoubleBitECC, Device: idx}, true
	default:
		return gpu.Event{}, false
	}
}

type device struct {
	index       int
	dev         nvml.Device
	fabricQuery bool
}

func (d *device) Index() int { return d.index }

func (d *device) UUID() (string, error) {
	s, ret := d.dev.GetUUID()
	return s, check(ret, "read UUID of GPU %d", d.index)
}

func (d *device) Name() (string, error) {
	s, ret := d.dev.GetName()
	return s, check(ret, "read name of GPU %d", d.index)
}

func (d *device) Minor() (int, error) {
	m, ret := d.dev.GetMinorNumber()
	return m, check(ret, "read minor number of GPU %d", d.index)
}

func (d *device) MemoryMiB() (int64, error) {
	m, ret := d.dev.GetMemoryInfo()
	if err := check(ret, "read memory of GPU %d", d.index); err != nil {
		return 0, err
	}
	return int64(m.Total / (1 << 20)), nil
}

func (d *device) PCIBusID() (string, error) {
	p, ret := d.dev.GetPciInfo()
	if err := check(ret, "read PCI info of GPU %d", d.index); err != nil {
		return "", err
	}
	return busID(p.BusId), nil
}

func (d *device) PCIeLink() (gpu.PCIeLink, error) {
	gen, ret := d.dev.GetMaxPcieLinkGeneration()
	if err := check(ret, "read PCIe generation of GPU %d", d.index); err != nil {
		return gpu.PCIeLink{}, err
	}
	width, ret := d.dev.GetMaxPcieLinkWidth()
	if err := check(ret, "read PCIe width of GPU %d", d.index); err != nil {
		return gpu.PCIeLink{}, err
	}
	return gpu.PCIeLink{Generation: gen, Width: width}, nil
}

// NVLinks reads links 0..NVLINK_MAX_LINKS-1, stopping at the first link NVML says does not
// exist; a GPU without NVLink answers NOT_SUPPORTED for link 0.
func (d *device) NVLinks() ([]gpu.Link, error) {
	var links []gpu.Link
	for i := 0; i < nvml.NVLINK_MAX_LINKS; i++ {
		state, ret := d.dev.GetNvLinkState(i)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			break
		}
		if err := check(ret, "read state of NVLink %d of GPU %d", i, d.index); err != nil {
			return nil, err
		}
		link := gpu.Link{Index: i, Active: state == nvml.FEATURE_ENABLED}
		if link.Active {
			v, ret := d.dev.GetNvLinkVersion(i)
			if err := check(ret, "read version of NVLink %d of GPU %d", i, d.index); err != nil {
				return nil, err
			}
			link.Version = gpu.NVLinkVersion(v)
			p, ret := d.dev.GetNvLinkRemotePciInfo(i)
			if err := check(ret, "read remote PCI info of NVLink %d of GPU %d", i, d.index); err != nil {
				return nil, err
			}
			link.RemoteBusID = busID(p.BusId)
			t, ret := d.dev.GetNvLinkRemoteDeviceType(i)
			switch {
			case ret == nvml.ERROR_NOT_SUPPORTED:
				// Older drivers cannot say; topology falls back to matching the bus ID.
				link.RemoteType = gpu.RemoteUnknown
			case ret != nvml.SUCCESS:
				return nil, check(ret, "read remote device type of NVLink %d of GPU %d", i, d.index)
			default:
				link.RemoteType = remoteType(t)
			}
		}
		links = append(links, link)
	}
	return links, nil
}

func remoteType(t nvml.IntNvLinkDeviceType) gpu.RemoteType {
	switch t {
	case nvml.NVLINK_DEVICE_TYPE_GPU:
		return gpu.RemoteGPU
	case nvml.NVLINK_DEVICE_TYPE_SWITCH:
		return gpu.RemoteSwitch
	case nvml.NVLINK_DEVICE_TYPE_IBMNPU:
		return gpu.RemoteOther
	default:
		return gpu.RemoteUnknown
	}
}

func (d *device) CommonAncestor(other gpu.Device) (gpu.PCIeLevel, error) {
	o, ok := other.(*device)
	if !ok {
		return 0, fmt.Errorf("common ancestor of GPU %d and GPU %d: device %T does not come from this library", d.index, other.Index(), other)
	}
	level, ret := d.dev.GetTopologyCommonAncestor(o.dev)
	if err := check(ret, "read PCIe common ancestor of GPU %d and GPU %d", d.index, o.index); err != nil {
		return 0, err
	}
	return gpu.PCIeLevel(level), nil
}

// Probe reads the row-remapping state: it needs the GPU to answer (so a lost GPU shows
// here), and a failed remapping is a persistent fault until the GPU is reset. GPUs before
// Ampere do not support it; for them the probe falls back to a memory read.
func (d *device) Probe() error {
	_, _, _, failed, ret := d.dev.GetRemappedRows()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		_, ret = d.dev.GetMemoryInfo()
	}
	if err := check(ret, "probe GPU %d", d.index); err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("probe GPU %d: row remapping failed: %w", d.index, gpu.ErrFaulted)
	}
	return nil
}

// busID turns NVML's NUL-terminated bus ID into a string, lower-cased so that IDs read from
// different calls compare equal.
func busID(raw [32]uint8) string {
	b := raw[:]
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.ToLower(string(b))
}

// Telemetry reads what dcgm-exporter's default counters read through NVML: utilisation,
// framebuffer, temperature, power and the volatile ECC totals. A reading the GPU answers
// NOT_SUPPORTED for stays nil; any other failure (a lost GPU above all) fails the reading.
func (d *device) Telemetry() (gpu.Telemetry, error) {
	var t gpu.Telemetry
	supported := func(ret nvml.Return, what string) (bool, error) {
		if ret == nvml.ERROR_NOT_SUPPORTED {
			return false, nil
		}
		return ret == nvml.SUCCESS, check(ret, "read %s of GPU %d", what, d.index)
	}
	u, ret := d.dev.GetUtilizationRates()
	if ok, err := supported(ret, "utilization"); err != nil {
		return gpu.Telemetry{}, err
	} else if ok {
		t.UtilizationPercent, t.MemoryUtilizationPercent = ptrTo(int(u.Gpu)), ptrTo(int(u.Memory))
	}
	m, ret := d.dev.GetMemoryInfo()
	if ok, err := supported(ret, "memory"); err != nil {
		return gpu.Telemetry{}, err
	} else if ok {
		t.MemoryUsedMiB, t.MemoryTotalMiB = ptrTo(int64(m.Used>>20)), ptrTo(int64(m.Total>>20))
	}
	temp, ret := d.dev.GetTemperature(nvml.TEMPERATURE_GPU)
	if ok, err := supported(ret, "temperature"); err != nil {
		return gpu.Telemetry{}, err
	} else if ok {
		t.TemperatureCelsius = ptrTo(int(temp))
	}
	mw, ret := d.dev.GetPowerUsage()
	if ok, err := supported(ret, "power"); err != nil {
		return gpu.Telemetry{}, err
	} else if ok {
		t.PowerMilliwatts = ptrTo(int64(mw))
	}
	corrected, ret := d.dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
	if ok, err := supported(ret, "corrected ECC errors"); err != nil {
		return gpu.Telemetry{}, err
	} else if ok {
		t.ECCCorrected = ptrTo(int64(corrected))
	}
	uncorrected, ret := d.dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	if ok, err := supported(ret, "uncorrected ECC errors"); err != nil {
		return gpu.Telemetry{}, err
	} else if ok {
		t.ECCUncorrected = ptrTo(int64(uncorrected))
	}
	return t, nil
}

// Fabric reads NVML's GPU fabric info. It calls the first version of the query: go-nvml's
// versioned one (GetGpuFabricInfoV) returns a handler only go-nvml itself can build, which no
// mock library can answer, and the first version carries every field the agent reads. A GPU
// or driver without a fabric answers NOT_SUPPORTED (a driver older than the query has no such
// symbol, or answers FUNCTION_NOT_FOUND), which is no error but a GPU in no domain.
func (d *device) Fabric() (gpu.Fabric, error) {
	if !d.fabricQuery {
		return gpu.Fabric{State: gpu.FabricNotSupported}, nil
	}
	info, ret := d.dev.GetGpuFabricInfo() //nolint:staticcheck // SA1019: see above
	if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
		return gpu.Fabric{State: gpu.FabricNotSupported}, nil
	}
	if err := check(ret, "read fabric info of GPU %d", d.index); err != nil {
		return gpu.Fabric{}, err
	}
	f := gpu.Fabric{State: gpu.FabricState(info.State)}
	if f.State != gpu.FabricCompleted {
		return f, nil
	}
	if err := check(nvml.Return(info.Status), "register GPU %d with the NVLink fabric", d.index); err != nil {
		f.Err = err
		return f, nil
	}
	u, err := uuid.FromBytes(info.ClusterUuid[:])
	if err != nil {
		return gpu.Fabric{}, fmt.Errorf("read fabric info of GPU %d: cluster UUID: %w", d.index, err)
	}
	if u == uuid.Nil {
		// A fabric of one node: NVSwitch systems such as HGX H100 register their GPUs with the
		// node's own fabric manager and report no cluster. Taken as a domain, the nil UUID
		// would put every such node of the cluster in one clique.
		return gpu.Fabric{State: gpu.FabricNotSupported}, nil
	}
	f.ClusterUUID, f.CliqueID = u.String(), info.CliqueId
	return f, nil
}

func ptrTo[T any](v T) *T { return &v }
