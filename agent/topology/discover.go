package topology

import (
	"errors"
	"fmt"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
)

// Device is one GPU as discovered: its facts and its place in the topology.
type Device struct {
	Index     int
	UUID      string
	Product   string
	MemoryMiB int64
	PCIBusID  string
	// Minor is the driver's minor number: the GPU's device node is /dev/nvidia<Minor>. It
	// stays on the node (the kubelet device plugin hands the node over); -1 when the GPU was
	// lost during discovery.
	Minor int
	// MIG is the GPU's MIG mode and devices; nil on GPUs without MIG.
	MIG *gpu.MIG
	Placement
	// Lost is set when the GPU did not answer during discovery: it has no facts and no island
	// until it answers again and the node is discovered anew.
	Lost error
}

// Discover reads every device and places it. A GPU that is lost (gpu.ErrLost) is reported
// with Lost set; any other error fails the whole discovery, since a half-read topology would
// give wrong islands.
func Discover(devs []gpu.Device) ([]Device, error) {
	out := make([]Device, len(devs))
	var in Input
	var inPos []int // position in out of each in.GPUs entry
	var answering []gpu.Device
	for i, d := range devs {
		out[i].Index, out[i].Minor = d.Index(), -1
		g, err := read(d, &out[i])
		if errors.Is(err, gpu.ErrLost) {
			out[i].Lost = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discover GPU %d: %w", d.Index(), err)
		}
		in.GPUs = append(in.GPUs, g)
		inPos = append(inPos, i)
		answering = append(answering, d)
	}
	in.Ancestor = make([][]gpu.PCIeLevel, len(answering))
	for i := range answering {
		in.Ancestor[i] = make([]gpu.PCIeLevel, len(answering))
	}
	for i, a := range answering {
		for j := i + 1; j < len(answering); j++ {
			lvl, err := a.CommonAncestor(answering[j])
			if err != nil {
				return nil, fmt.Errorf("discover PCIe topology: %w", err)
			}
			in.Ancestor[i][j], in.Ancestor[j][i] = lvl, lvl
		}
	}
	for k, p := range Compute(in) {
		out[inPos[k]].Placement = p
	}
	return out, nil
}

func read(d gpu.Device, dev *Device) (GPU, error) {
	var err error
	if dev.UUID, err = d.UUID(); err != nil {
		return GPU{}, err
	}
	if dev.Product, err = d.Name(); err != nil {
		return GPU{}, err
	}
	if dev.MemoryMiB, err = d.MemoryMiB(); err != nil {
		return GPU{}, err
	}
	if dev.PCIBusID, err = d.PCIBusID(); err != nil {
		return GPU{}, err
	}
	minor, err := d.Minor()
	if err != nil {
		return GPU{}, err
	}
	dev.Minor = minor
	if dev.MIG, err = d.MIG(); err != nil {
		return GPU{}, err
	}
	g := GPU{Index: d.Index(), BusID: dev.PCIBusID}
	if g.PCIe, err = d.PCIeLink(); err != nil {
		return GPU{}, err
	}
	if g.Links, err = d.NVLinks(); err != nil {
		return GPU{}, err
	}
	return g, nil
}
