package baseline

import (
	"fmt"
	"strings"
	"sync"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
)

// FromDevices reads a node's graph the way go-gpuallocator reads NVML: the PCIe common
// ancestor of every pair, and for every GPU its active NVLinks whose far end is the other
// GPU's PCI bus (links to an NVSwitch name the switch's bus, so they join no pair).
func FromDevices(devs []gpu.Device) (*Graph, error) {
	g := NewGraph(len(devs))
	buses := make([]string, len(devs))
	links := make([][]gpu.Link, len(devs))
	for i, d := range devs {
		b, err := d.PCIBusID()
		if err != nil {
			return nil, fmt.Errorf("GPU %d bus ID: %w", d.Index(), err)
		}
		buses[i] = normBus(b)
		if links[i], err = d.NVLinks(); err != nil {
			return nil, fmt.Errorf("GPU %d NVLinks: %w", d.Index(), err)
		}
	}
	for i, a := range devs {
		for j := i + 1; j < len(devs); j++ {
			lvl, err := a.CommonAncestor(devs[j])
			if err != nil {
				return nil, fmt.Errorf("PCIe level of GPUs %d and %d: %w", i, j, err)
			}
			if err := g.SetPCIe(i, j, Level(lvl)); err != nil {
				return nil, err
			}
		}
	}
	for i := range devs {
		for j := range devs {
			if i == j {
				continue
			}
			n := 0
			for _, l := range links[i] {
				if l.Active && normBus(l.RemoteBusID) == buses[j] {
					n++
				}
			}
			// One direction at a time, as the allocator stores each GPU's links to the other.
			g.score[i][j] += min(n, maxNVLinks) * scorePerNVLink
		}
	}
	return g, nil
}

func normBus(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

var (
	cacheMu sync.Mutex
	cache   = map[string]*Graph{}
)

// ForTopology is the graph of the named hardware (a preset or a scenario's registered one),
// read through the agent's NVML adapter from the same mock NVML server the agent fleet runs on.
// Every node of one hardware has the same graph, so it is read once.
func ForTopology(name string) (*Graph, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if g, ok := cache[name]; ok {
		return g, nil
	}
	srv, err := mock.New(name)
	if err != nil {
		return nil, err
	}
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		return nil, fmt.Errorf("hardware %s: %w", name, err)
	}
	defer func() { _ = lib.Shutdown() }()
	devs, err := lib.Devices()
	if err != nil {
		return nil, fmt.Errorf("hardware %s: %w", name, err)
	}
	g, err := FromDevices(devs)
	if err != nil {
		return nil, fmt.Errorf("hardware %s: %w", name, err)
	}
	cache[name] = g
	return g, nil
}
