package deviceplugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// DefaultCDIKind is the CDI kind (vendor/class) of the devices the plugin hands over:
// gpu.scheduling/gpu=<index>. Our own kind, so that it never clashes with the specs the
// NVIDIA container toolkit writes (nvidia.com/gpu).
const DefaultCDIKind = "gpu.scheduling/gpu"

// controlDevices are the node-wide NVIDIA device nodes every GPU container needs.
var controlDevices = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// gpuDeviceNode is the name under /dev of the GPU whose driver minor number is minor.
func gpuDeviceNode(minor int) string { return "nvidia" + strconv.Itoa(minor) }

// CDISpec builds the CDI spec for gpus: one device per GPU named by its index, carrying its
// own device node (/dev/nvidia<minor>); the control devices are common to all. A
// runtime that resolves gpu.scheduling/gpu=1 therefore exposes GPU 1's device node and nothing
// of the other GPUs. A GPU whose minor is unknown is left out (Allocate refuses it too). The
// spec declares the oldest CDI version that has what it uses, so older runtimes read it.
func (p *Plugin) CDISpec(gpus []GPU) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: p.cfg.CDIKind}
	for _, c := range controlDevices {
		spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes,
			&cdispec.DeviceNode{Path: "/dev/" + c, HostPath: p.cfg.DevRoot + "/" + c})
	}
	for _, g := range gpus {
		if g.Minor < 0 {
			continue
		}
		node := gpuDeviceNode(g.Minor)
		if p.cfg.Mode == ModeMIG {
			// One device per MIG device of the plugin's profile: the parent GPU's node and the
			// MIG device's capability nodes. NVIDIA_VISIBLE_DEVICES (MIG-<uuid>) comes from
			// Allocate, as for whole GPUs.
			for _, m := range g.MIG {
				if m.Profile != p.cfg.MIGProfile {
					continue
				}
				edits := cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/" + node, HostPath: p.cfg.DevRoot + "/" + node}}}
				for _, c := range p.migCapsNodes(g.Minor, m) {
					edits.DeviceNodes = append(edits.DeviceNodes, &cdispec.DeviceNode{Path: "/dev/" + c, HostPath: p.cfg.DevRoot + "/" + c})
				}
				spec.Devices = append(spec.Devices, cdispec.Device{Name: apiv1.MIGDeviceRef{GPU: g.Index, Slot: m.Slot}.String(), ContainerEdits: edits})
			}
			continue
		}
		if g.MIGMode {
			continue // never handed whole
		}
		// No environment here: a variable of each device would leave a container of several GPUs
		// with the last device's value only. Allocate sets NVIDIA_VISIBLE_DEVICES to all of them.
		spec.Devices = append(spec.Devices, cdispec.Device{Name: deviceID(g.Index), ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/" + node, HostPath: p.cfg.DevRoot + "/" + node}},
		}})
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec %s: %w", p.cfg.CDIKind, err)
	}
	spec.Version = v
	return spec, nil
}

// CDISpecFile is the name of the plugin's CDI spec file in its CDI directory, as CDI names
// them (vendor-class.json).
func (p *Plugin) CDISpecFile() string { return strings.ReplaceAll(p.cfg.CDIKind, "/", "-") + ".json" }

// WriteCDISpec writes the spec for gpus into dir (normally /var/run/cdi), atomically.
func (p *Plugin) WriteCDISpec(dir string, gpus []GPU) error {
	spec, err := p.CDISpec(gpus)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("rendering CDI spec %s: %w", p.cfg.CDIKind, err)
	}
	name := filepath.Join(dir, p.CDISpecFile())
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing CDI spec %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("installing CDI spec %s: %w", name, err)
	}
	return nil
}
