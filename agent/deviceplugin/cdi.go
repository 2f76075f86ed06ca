package deviceplugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultCDIKind is the CDI kind (vendor/class) of the devices the plugin hands over:
// gpu.scheduling/gpu=<index>. Our own kind, so that it never clashes with the specs the
// NVIDIA container toolkit writes (nvidia.com/gpu).
const DefaultCDIKind = "gpu.scheduling/gpu"

// controlDevices are the node-wide NVIDIA device nodes every GPU container needs.
var controlDevices = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// cdiSpec is the part of the CDI specification (v0.6.0) the plugin writes.
type cdiSpec struct {
	Version        string      `json:"cdiVersion"`
	Kind           string      `json:"kind"`
	Devices        []cdiDevice `json:"devices"`
	ContainerEdits cdiEdits    `json:"containerEdits"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}

type cdiDeviceNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath,omitempty"`
}

// CDISpec renders the CDI spec for gpus: one device per GPU named by its index, carrying its
// device node; the control devices are common to all. A runtime that resolves
// gpu.scheduling/gpu=1 therefore exposes /dev/nvidia1 and nothing of the other GPUs.
func (p *Plugin) CDISpec(gpus []GPU) ([]byte, error) {
	spec := cdiSpec{Version: "0.6.0", Kind: p.cfg.CDIKind}
	for _, c := range controlDevices {
		spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes,
			cdiDeviceNode{Path: "/dev/" + c, HostPath: p.cfg.DevRoot + "/" + c})
	}
	for _, g := range gpus {
		n := strconv.Itoa(g.Index)
		spec.Devices = append(spec.Devices, cdiDevice{Name: deviceID(g.Index), ContainerEdits: cdiEdits{
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=" + g.UUID},
			DeviceNodes: []cdiDeviceNode{{Path: "/dev/nvidia" + n, HostPath: p.cfg.DevRoot + "/nvidia" + n}},
		}})
	}
	return json.MarshalIndent(spec, "", "  ")
}

// WriteCDISpec writes the spec for gpus into dir (normally /var/run/cdi), atomically.
func (p *Plugin) WriteCDISpec(dir string, gpus []GPU) error {
	b, err := p.CDISpec(gpus)
	if err != nil {
		return fmt.Errorf("rendering the CDI spec: %w", err)
	}
	name := filepath.Join(dir, strings.ReplaceAll(p.cfg.CDIKind, "/", "-")+".json")
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing CDI spec %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("installing CDI spec %s: %w", name, err)
	}
	return nil
}
