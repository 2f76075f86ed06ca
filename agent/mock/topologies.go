package mock

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/scenarios/hardware"
)

// The names of some shipped hardware presets (scenarios/hardware/<name>.yaml) that tests and
// the simulator's defaults refer to. Every preset file is registered; Names lists them all.
const (
	// DGXA100 is 8 A100-SXM4-80GB on six NVSwitches, 12 NVLink 3 links each: one island at 600 GB/s.
	DGXA100 = "dgx-a100"
	// DGXH100 is 8 H100 80GB HBM3 on four NVSwitches, 18 NVLink 4 links each: one island at 900 GB/s.
	DGXH100 = "dgx-h100"
	// DGXB200 is 8 B200 on two NVSwitch chips, 18 NVLink 5 links each: one island at 1800 GB/s.
	DGXB200 = "dgx-b200"
	// PCIeNVLinkPairs is 8 A100 80GB PCIe joined in pairs by three NVLink bridges (12 links):
	// islands {0,1} {2,3} {4,5} {6,7} at 600 GB/s.
	PCIeNVLinkPairs = "pcie-nvlink-pairs"
	// TwoIsland is the API contract's example box: GPUs 0-3 fully meshed with NVLink 3
	// (4 links per pair, 600 GB/s), GPUs 4-7 on one PCIe Gen4 x16 switch (64 GB/s), and GPU 7
	// with a failed row remapping, so Unhealthy.
	TwoIsland = "two-island"
	// PCIeOnly is 8 L40S without NVLink, four per PCIe Gen4 switch on each socket:
	// islands {0-3} {4-7} at 64 GB/s.
	PCIeOnly = "pcie-only"
)

var (
	registryMu sync.RWMutex
	registry   = map[string]*Hardware{}
)

func init() {
	presets, err := ParseHardwareFS(hardware.Files)
	if err != nil {
		panic(fmt.Sprintf("mock: the embedded hardware presets are invalid: %v", err))
	}
	for _, h := range presets {
		registry[h.Metadata.Name] = h
	}
}

// ParseHardwareFS reads every *.yaml file of fsys as a hardware description; the file name
// (without .yaml) must be the description's name. Errors name the file and field.
func ParseHardwareFS(fsys fs.FS) ([]*Hardware, error) {
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*Hardware
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		h, err := ParseHardware(f, data)
		if err != nil {
			return nil, err
		}
		if want := strings.TrimSuffix(path.Base(f), ".yaml"); h.Metadata.Name != want {
			return nil, fmt.Errorf("%s: metadata.name %q is not the file's name %q", f, h.Metadata.Name, want)
		}
		out = append(out, h)
	}
	return out, nil
}

// ParseHardware strictly decodes and validates one hardware file. The simulator's scenario
// loader reads user files itself, with line numbers; this is for the embedded presets.
func ParseHardware(file string, data []byte) (*Hardware, error) {
	var h Hardware
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(data), &h); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if h.APIVersion != HardwareAPIVersion || h.Kind != HardwareKind {
		return nil, fmt.Errorf("%s: want apiVersion %s and kind %s", file, HardwareAPIVersion, HardwareKind)
	}
	if errs := h.Validate(); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = file + ": " + e.Path + ": " + e.Msg
		}
		return nil, fmt.Errorf("%s", strings.Join(msgs, "\n"))
	}
	return &h, nil
}

// Register adds a hardware description (a scenario's inline one) under its name, so that
// New and the agent fleet find it. It refuses an invalid description, and a name already
// registered with another description.
func Register(h *Hardware) error {
	if errs := h.Validate(); len(errs) > 0 {
		return fmt.Errorf("hardware %q: %s: %s", h.Metadata.Name, errs[0].Path, errs[0].Msg)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if old, ok := registry[h.Metadata.Name]; ok {
		if sameHardware(old, h) {
			return nil
		}
		return fmt.Errorf("hardware %q is already defined (a preset or another pool's); give the inline hardware another name", h.Metadata.Name)
	}
	c := *h
	registry[h.Metadata.Name] = &c
	return nil
}

func sameHardware(a, b *Hardware) bool {
	x, _ := yaml.Marshal(a.Spec)
	y, _ := yaml.Marshal(b.Spec)
	return bytes.Equal(x, y)
}

// Lookup returns the registered description of name.
func Lookup(name string) (*Hardware, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	h, ok := registry[name]
	return h, ok
}

// Names lists the registered hardware, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}

// New builds a fresh server of the named hardware.
func New(name string, opts ...Option) (*Server, error) {
	h, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("mock topology %q is unknown; known: %v", name, Names())
	}
	return Build(h, opts...)
}
