// Package gpu is the agent's narrow view of the GPU management library: the few facts and
// events the agent needs, and nothing of the rest of NVML. The production implementation
// (package nvmlgpu) adapts go-nvml; the simulator and the tests plug mock topologies into the
// same adapter, so everything above this interface runs unchanged against real and mock GPUs.
package gpu

import (
	"context"
	"errors"
)

// Library is a GPU management library session: Init, read, watch, Shutdown.
type Library interface {
	// Init loads and initialises the library. Every other call needs a successful Init.
	Init() error
	// Shutdown ends the session started by Init.
	Shutdown() error
	// Devices lists the GPUs in index order.
	Devices() ([]Device, error)
	// WatchEvents delivers health events for devices to out until ctx is done (then it returns
	// nil) or the library fails (then it returns the error, and the caller starts a new session).
	WatchEvents(ctx context.Context, devices []Device, out chan<- Event) error
}

// Device is one GPU.
type Device interface {
	// Index is the GPU's index on the node, the ID the scheduler allocates.
	Index() int
	UUID() (string, error)
	Name() (string, error)
	// Minor is the driver's minor number of the GPU: its device node is /dev/nvidia<minor>.
	// The driver numbers GPUs in its own probe order, which need not be NVML's index order.
	Minor() (int, error)
	MemoryMiB() (int64, error)
	PCIBusID() (string, error)
	// PCIeLink is the GPU's maximum PCIe link generation and width.
	PCIeLink() (PCIeLink, error)
	// NVLinks lists the GPU's NVLink links, active or not; none on GPUs without NVLink.
	NVLinks() ([]Link, error)
	// CommonAncestor is the closest PCIe topology level the GPU shares with other.
	CommonAncestor(other Device) (PCIeLevel, error)
	// Probe checks that the GPU answers and has no persistent fault. It returns nil, an error
	// wrapping ErrLost, an error wrapping ErrFaulted, or another error when it cannot tell.
	Probe() error
	// Telemetry reads the GPU's utilisation, memory, temperature, power and ECC counters. A
	// reading the GPU does not support is left nil; an error means the GPU did not answer.
	Telemetry() (Telemetry, error)
	// Fabric reads the GPU's place in a multi-node NVLink domain (GB200 NVL72 and alike). A
	// GPU outside any such domain answers a Fabric whose State is FabricNotSupported.
	Fabric() (Fabric, error)
	// MIG reads the GPU's MIG mode and the MIG devices the operator made on it (the agent
	// never makes or destroys them). It answers nil for a GPU or driver without MIG.
	MIG() (*MIG, error)
}

// MIG is a GPU's Multi-Instance GPU state.
type MIG struct {
	// Enabled is the current MIG mode (not a pending one, which needs a GPU reset).
	Enabled bool
	// Slices is how many memory slices the GPU divides into: the placement slots.
	Slices int
	// Devices are the MIG devices (GPU instance and compute instance) in slot order.
	Devices []MIGDevice
}

// MIGDevice is one MIG device: a GPU instance at a placement, with its compute instance.
type MIGDevice struct {
	// Slot is the GPU instance's placement start, Size how many memory slices it spans.
	Slot, Size int
	// Profile is the GPU instance profile's name, such as 1g.10gb.
	Profile string
	// UUID is the MIG device's UUID (MIG-...).
	UUID      string
	MemoryMiB int64
	// GI and CI are the GPU instance and compute instance IDs: the driver's capability files
	// of the device are named by them.
	GI, CI int
}

// FabricState is how far a GPU's registration with its NVLink fabric has come; the values
// match NVML's nvmlGpuFabricState_t.
type FabricState int

const (
	// FabricNotSupported: the GPU is in no multi-node NVLink domain.
	FabricNotSupported FabricState = 0
	// FabricNotStarted: the GPU has not begun registering with the fabric manager.
	FabricNotStarted FabricState = 1
	// FabricInProgress: registration has begun and not ended.
	FabricInProgress FabricState = 2
	// FabricCompleted: registration ended; Fabric.Err says whether it succeeded.
	FabricCompleted FabricState = 3
)

// Fabric is a GPU's multi-node NVLink domain. ClusterUUID and CliqueID mean something only
// once State is FabricCompleted and Err is nil: before, NVML reports them as zero.
type Fabric struct {
	State FabricState
	// Err is why a completed registration failed (NVML's fabric status); nil when it succeeded.
	Err         error
	ClusterUUID string
	CliqueID    uint32
}

// Telemetry is one reading of a GPU's load and error counters. Nil fields are readings the
// GPU does not support (ECC on consumer boards, power on some vGPU guests).
type Telemetry struct {
	// UtilizationPercent is the share of the last sample period in which a kernel ran.
	UtilizationPercent *int
	// MemoryUtilizationPercent is the share of the last sample period in which memory was
	// read or written.
	MemoryUtilizationPercent *int
	// MemoryUsedMiB and MemoryTotalMiB are the framebuffer in use and in all.
	MemoryUsedMiB, MemoryTotalMiB *int64
	// TemperatureCelsius is the core temperature.
	TemperatureCelsius *int
	// PowerMilliwatts is the power draw.
	PowerMilliwatts *int64
	// ECCCorrected and ECCUncorrected are the volatile ECC error counts (since the driver loaded).
	ECCCorrected, ECCUncorrected *int64
}

var (
	// ErrLost means the GPU fell off the bus or does not answer.
	ErrLost = errors.New("GPU is lost")
	// ErrFaulted means the GPU answers but reports a persistent fault (such as a failed
	// row remapping) that only a reset clears.
	ErrFaulted = errors.New("GPU reports a persistent fault")
)

// PCIeLink is a PCIe link's generation and lane count.
type PCIeLink struct {
	Generation int
	Width      int
}

// PCIeLevel is how far apart two GPUs are on the PCIe tree, closest first; the values match
// NVML's nvmlGpuTopologyLevel_t.
type PCIeLevel int

const (
	// LevelInternal is the same board (a multi-GPU board) or the same GPU.
	LevelInternal PCIeLevel = 0
	// LevelSingle is one PCIe switch.
	LevelSingle PCIeLevel = 10
	// LevelMultiple is several PCIe switches, without crossing a host bridge.
	LevelMultiple PCIeLevel = 20
	// LevelHostBridge is the same host bridge.
	LevelHostBridge PCIeLevel = 30
	// LevelNode is the same NUMA node (CPU socket).
	LevelNode PCIeLevel = 40
	// LevelSystem is across sockets.
	LevelSystem PCIeLevel = 50
)

// RemoteType is what sits at the far end of an NVLink.
type RemoteType int

const (
	RemoteUnknown RemoteType = iota
	RemoteGPU
	RemoteSwitch
	RemoteOther
)

func (r RemoteType) String() string {
	switch r {
	case RemoteGPU:
		return "GPU"
	case RemoteSwitch:
		return "NVSwitch"
	case RemoteOther:
		return "other"
	default:
		return "unknown"
	}
}

// NVLinkVersion is the NVLink version of one link, in NVML's nvmlNvlinkVersion_t numbering.
type NVLinkVersion int

const (
	NVLinkVersionInvalid NVLinkVersion = 0
	NVLinkVersion1_0     NVLinkVersion = 1
	NVLinkVersion2_0     NVLinkVersion = 2
	NVLinkVersion2_2     NVLinkVersion = 3
	NVLinkVersion3_0     NVLinkVersion = 4
	NVLinkVersion3_1     NVLinkVersion = 5
	NVLinkVersion4_0     NVLinkVersion = 6
	NVLinkVersion5_0     NVLinkVersion = 7
)

// Link is one NVLink of a GPU.
type Link struct {
	// Index is the link number on the GPU.
	Index int
	// Active tells whether the link is up; inactive links carry nothing else.
	Active  bool
	Version NVLinkVersion
	// RemoteBusID is the PCI bus ID of the device at the far end (a GPU or an NVSwitch).
	RemoteBusID string
	RemoteType  RemoteType
}

// EventKind is the kind of a health event.
type EventKind int

const (
	// EventXid is an Xid error; Event.Xid holds its code.
	EventXid EventKind = iota + 1
	// EventDoubleBitECC is an uncorrectable (double-bit) ECC error.
	EventDoubleBitECC
	// EventLost means some GPU stopped answering; the library cannot say which.
	EventLost
)

func (k EventKind) String() string {
	switch k {
	case EventXid:
		return "xid"
	case EventDoubleBitECC:
		return "double-bit-ecc"
	case EventLost:
		return "lost"
	default:
		return "unknown"
	}
}

// Event is one health event.
type Event struct {
	Kind EventKind
	// Device is the GPU's index, or -1 when the library could not say which GPU it was.
	Device int
	Xid    uint64
}
