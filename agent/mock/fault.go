package mock

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// FaultKind is what goes wrong (or right again) with a simulated GPU.
type FaultKind string

const (
	// FaultXid raises an Xid error event with Fault.Xid; Xid 79 ("fallen off the bus") also
	// makes the GPU lost, as on real hardware.
	FaultXid FaultKind = "xid"
	// FaultDoubleBitECC raises a double-bit ECC error event.
	FaultDoubleBitECC FaultKind = "dbe"
	// FaultLost makes the GPU stop answering, without an Xid.
	FaultLost FaultKind = "lost"
	// FaultRemapFailure makes the GPU report a failed row remapping (a persistent fault).
	FaultRemapFailure FaultKind = "remap-failure"
	// FaultRecover is a GPU reset: it answers again and its persistent faults are gone.
	FaultRecover FaultKind = "recover"
)

// XidFallenOffBus is Xid 79.
const XidFallenOffBus = 79

// Fault is one injected fault.
type Fault struct {
	Kind FaultKind
	// Xid is the Xid code for FaultXid.
	Xid uint64
}

func (f Fault) String() string {
	if f.Kind == FaultXid {
		return "xid" + strconv.FormatUint(f.Xid, 10)
	}
	return string(f.Kind)
}

// ParseFault reads "xid79" (any Xid code after "xid"), "dbe", "lost", "remap-failure" or
// "recover". It is what the fleet's HTTP endpoint accepts.
func ParseFault(s string) (Fault, error) {
	switch k := FaultKind(s); k {
	case FaultDoubleBitECC, FaultLost, FaultRemapFailure, FaultRecover:
		return Fault{Kind: k}, nil
	}
	if rest, ok := strings.CutPrefix(s, "xid"); ok && rest != "" && len(rest) <= 5 {
		code, err := strconv.ParseUint(rest, 10, 32)
		if err == nil {
			return Fault{Kind: FaultXid, Xid: code}, nil
		}
	}
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return Fault{}, fmt.Errorf("fault %q is unknown; want xid<code> (e.g. xid79), %s, %s, %s or %s", s, FaultDoubleBitECC, FaultLost, FaultRemapFailure, FaultRecover)
}

// Inject applies f to GPU index.
func (s *Server) Inject(index int, f Fault) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index < 0 || index >= len(s.devices) {
		return fmt.Errorf("inject %s into %s GPU %d: the server has GPUs 0-%d", f, s.topology, index, len(s.devices)-1)
	}
	d := s.devices[index]
	switch f.Kind {
	case FaultXid:
		d.postLocked(nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: f.Xid})
		if f.Xid == XidFallenOffBus {
			d.loseLocked()
		}
	case FaultDoubleBitECC:
		d.doubleBit++
		d.postLocked(nvml.EventData{Device: d, EventType: nvml.EventTypeDoubleBitEccError})
	case FaultLost:
		d.loseLocked()
	case FaultRemapFailure:
		d.remapFailure = true
	case FaultRecover:
		d.lost = false
		d.remapFailure = false
	default:
		return fmt.Errorf("inject into %s GPU %d: fault kind %q is unknown", s.topology, index, f.Kind)
	}
	return nil
}

// postLocked delivers ev to every set the GPU registered its type with.
func (d *Device) postLocked(ev nvml.EventData) {
	for set, types := range d.registered {
		if types&ev.EventType != 0 {
			set.post(ev)
		}
	}
}

// loseLocked makes the GPU stop answering and, as libnvml does, makes waits on every event
// set the GPU was registered with report GPU_IS_LOST once.
func (d *Device) loseLocked() {
	if d.lost {
		return
	}
	d.lost = true
	for set := range d.registered {
		set.post(nvml.EventData{EventType: lostMarker})
	}
}
