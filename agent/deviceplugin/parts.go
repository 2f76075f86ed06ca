package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Mode is what a plugin serves: whole GPUs, the MIG devices of one profile, or replicas of the
// GPUs for Shared claims. The kubelet keeps one plugin per resource, so the agent runs one
// plugin per mode (and per MIG profile), each with its own socket and CDI kind.
type Mode int

const (
	// ModeGPU serves whole GPUs (DefaultResourceName), named by index.
	ModeGPU Mode = iota
	// ModeMIG serves the MIG devices of Config.MIGProfile (MIGResourceName), named
	// "<gpu>:<slot>", as NVIDIA's device plugin does with its mixed strategy.
	ModeMIG
	// ModeShared serves SharedResourceName: each GPU not in MIG mode advertised as
	// Config.Replicas devices "<gpu>::<replica>", one of which a Shared pod gets per GPU.
	ModeShared
)

// SharedResourceName is the resource of Shared claims: one per GPU the claim shares.
const SharedResourceName = apiv1.SharedResourceName

// DefaultReplicas is how many pods may share one GPU through SharedResourceName unless told
// otherwise: the kubelet's count, beside the scheduler's own bound (maxSharersPerGPU).
const DefaultReplicas = 16

// MIGResourceName is the resource of the MIG devices of profile (apiv1.MIGResourceName).
func MIGResourceName(profile string) string { return apiv1.MIGResourceName(profile) }

// MIGDevice is one MIG device of a GPU as the plugin hands it.
type MIGDevice struct {
	Slot    int
	Profile string
	// UUID is the MIG device's UUID (MIG-...), handed in NVIDIA_VISIBLE_DEVICES.
	UUID string
	// GI and CI are the GPU and compute instance IDs: they name the device's capability files
	// (/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<GI>/ci<CI>/access). -1: unknown.
	GI, CI  int
	Healthy bool
}

// migKey is the plugin's number for MIG device slot of GPU gpu: the allocation code matches
// numbers, and one GPU has at most apiv1.MaxMIGSlot+1 slots.
func migKey(gpu, slot int) int { return gpu*(apiv1.MaxMIGSlot+1) + slot }

func migRef(key int) apiv1.MIGDeviceRef {
	return apiv1.MIGDeviceRef{GPU: key / (apiv1.MaxMIGSlot + 1), Slot: key % (apiv1.MaxMIGSlot + 1)}
}

// id is the kubelet's name of the plugin's device key: a GPU index, a MIG device's
// "<gpu>:<slot>", or for ModeShared a GPU index whose replicas are named by replicaID.
func (p *Plugin) id(key int) string {
	if p.cfg.Mode == ModeMIG {
		return migRef(key).String()
	}
	return deviceID(key)
}

// formatKeys formats the plugin's keys for messages: GPU IDs, or MIG devices "3:0,3:4".
func (p *Plugin) formatKeys(keys []int) string {
	if p.cfg.Mode != ModeMIG {
		return apiv1.FormatIDs(keys)
	}
	refs := make([]apiv1.MIGDeviceRef, len(keys))
	for i, k := range keys {
		refs[i] = migRef(k)
	}
	return apiv1.FormatMIGDevices(refs)
}

func replicaID(gpu, r int) string { return deviceID(gpu) + "::" + strconv.Itoa(r) }

// parseIDs turns the kubelet's device IDs into the plugin's keys, sorted: GPU indexes, MIG
// keys, or for ModeShared the GPUs of the replicas. unique refuses two replicas of one GPU (a
// pod gets one per GPU); otherwise they are one GPU.
func (p *Plugin) parseIDs(ids []string, unique bool) ([]int, error) {
	switch p.cfg.Mode {
	case ModeMIG:
		out := make([]int, 0, len(ids))
		for _, s := range ids {
			refs, err := apiv1.ParseMIGDevices(s)
			if err != nil || len(refs) != 1 || refs[0].String() != s {
				return nil, fmt.Errorf("device ID %q is not a MIG device <gpu>:<slot> this plugin advertised", s)
			}
			out = append(out, migKey(refs[0].GPU, refs[0].Slot))
		}
		slices.Sort(out)
		return out, nil
	case ModeShared:
		out := make([]int, 0, len(ids))
		for _, s := range ids {
			g, r, ok := strings.Cut(s, "::")
			gpu, err1 := strconv.Atoi(g)
			rep, err2 := strconv.Atoi(r)
			if !ok || err1 != nil || err2 != nil || replicaID(gpu, rep) != s || gpu < 0 || rep < 0 {
				return nil, fmt.Errorf("device ID %q is not a GPU replica <gpu>::<replica> this plugin advertised", s)
			}
			if slices.Contains(out, gpu) {
				if unique {
					return nil, fmt.Errorf("device IDs %s hold GPU %d twice; a Shared pod gets one %s per GPU", strings.Join(ids, ","), gpu, p.cfg.ResourceName)
				}
				continue
			}
			out = append(out, gpu)
		}
		slices.Sort(out)
		return out, nil
	}
	return parseDeviceIDs(ids)
}

// advertised is what ListAndWatch tells the kubelet about gpus in the plugin's mode.
func (p *Plugin) advertised(gpus []GPU) []*pluginapi.Device {
	var out []*pluginapi.Device
	add := func(id string, healthy bool, g GPU) {
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if !healthy {
			d.Health = pluginapi.Unhealthy
		}
		if g.NUMANode >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(g.NUMANode)}}}
		}
		out = append(out, d)
	}
	for _, g := range gpus {
		switch p.cfg.Mode {
		case ModeMIG:
			for _, m := range g.MIG {
				if m.Profile == p.cfg.MIGProfile {
					add(apiv1.MIGDeviceRef{GPU: g.Index, Slot: m.Slot}.String(), g.Healthy && m.Healthy, g)
				}
			}
		case ModeShared:
			if g.MIGMode {
				continue
			}
			for r := range p.cfg.Replicas {
				add(replicaID(g.Index, r), g.Healthy, g)
			}
		default:
			// A GPU in MIG mode is never allocated whole: the kubelet must not count it.
			if !g.MIGMode {
				add(deviceID(g.Index), g.Healthy, g)
			}
		}
	}
	return out
}

// migAllocation is pod's allocation in the plugin's MIG mode: its MIG devices of the
// plugin's profile (AnnotationMIGDevices), as keys; or why it has none.
func (p *Plugin) migAllocation(pod *corev1.Pod, gpus []GPU) ([]int, string) {
	v, ok := pod.Annotations[apiv1.AnnotationMIGDevices]
	if !ok {
		return nil, fmt.Sprintf("it carries no %s annotation (its claim is not a MIG claim, or its allocation is gone)", apiv1.AnnotationMIGDevices)
	}
	refs, err := apiv1.ParseMIGDevices(v)
	if err != nil {
		return nil, fmt.Sprintf("its %s annotation is invalid: %v", apiv1.AnnotationMIGDevices, err)
	}
	var keys []int
	for _, r := range refs {
		if m, ok := findMIG(gpus, r); ok && m.Profile == p.cfg.MIGProfile {
			keys = append(keys, migKey(r.GPU, r.Slot))
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Sprintf("none of its MIG devices %s is a %s device of this node", v, p.cfg.MIGProfile)
	}
	return keys, ""
}

func findMIG(gpus []GPU, r apiv1.MIGDeviceRef) (MIGDevice, bool) {
	for _, g := range gpus {
		if g.Index != r.GPU {
			continue
		}
		for _, m := range g.MIG {
			if m.Slot == r.Slot {
				return m, true
			}
		}
	}
	return MIGDevice{}, false
}

// migCapsNodes are the MIG capability device nodes that grant access to a MIG device
// (/dev/nvidia-caps/nvidia-cap<N> for its GPU instance and compute instance), read from the
// driver's capability files; none where the driver has no such files (the device nodes are
// then not needed, or the driver exposes MIG through /proc only).
func (p *Plugin) migCapsNodes(minor int, m MIGDevice) []string {
	if m.GI < 0 || m.CI < 0 {
		return nil
	}
	base := filepath.Join(p.cfg.ProcRoot, "driver/nvidia/capabilities", "gpu"+strconv.Itoa(minor), "mig", "gi"+strconv.Itoa(m.GI))
	var out []string
	for _, f := range []string{filepath.Join(base, "access"), filepath.Join(base, "ci"+strconv.Itoa(m.CI), "access")} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "DeviceFileMinor:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
					out = append(out, "nvidia-caps/nvidia-cap"+strconv.Itoa(n))
				}
			}
		}
	}
	return out
}

// migContainerResponse hands over MIG devices keys: the parent GPU's device node and the
// devices' capability nodes, as CDI devices and for runtimes without CDI as device nodes, and
// NVIDIA_VISIBLE_DEVICES naming the MIG devices' UUIDs.
func (p *Plugin) migContainerResponse(keys []int, gpus []GPU) (*pluginapi.ContainerAllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	var uuids []string
	nodes := map[string]bool{}
	addNode := func(n string) {
		if !nodes[n] {
			nodes[n] = true
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + n, HostPath: p.cfg.DevRoot + "/" + n, Permissions: "rw"})
		}
	}
	for _, k := range keys {
		r := migRef(k)
		i := slices.IndexFunc(gpus, func(g GPU) bool { return g.Index == r.GPU })
		m, ok := findMIG(gpus, r)
		if i < 0 || !ok {
			return nil, fmt.Errorf("MIG device %s is not on this node", r)
		}
		g := gpus[i]
		if g.Minor < 0 {
			return nil, fmt.Errorf("GPU %d (%s) has no known device node: it did not answer when the agent discovered it", g.Index, g.UUID)
		}
		uuids = append(uuids, m.UUID)
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: p.cfg.CDIKind + "=" + r.String()})
		addNode(gpuDeviceNode(g.Minor))
		for _, c := range p.migCapsNodes(g.Minor, m) {
			addNode(c)
		}
	}
	for _, c := range controlDevices {
		addNode(c)
	}
	setVisibleDevices(resp, uuids)
	return resp, nil
}

// MPS runs the MPS control daemon of a shared GPU (mps.Manager).
type MPS interface {
	// Ensure starts the daemon of GPU uuid unless it runs, waits until it serves and returns
	// its pipe directory and shared-memory directory on the host; both empty: the node runs
	// no MPS (the control binary is missing), the GPU is shared without it.
	Ensure(ctx context.Context, uuid string) (pipeDir, shmDir string, err error)
}

// mpsClient makes a Shared container a client of its GPU's MPS control daemon: the daemon's
// pipe directory (at the same path, named by CUDA_MPS_PIPE_DIRECTORY) and the shared memory
// it uses as /dev/shm. A CUDA client reaches one daemon, and the agent runs one per GPU, so a
// container of several shared GPUs cannot be served under MPS: with the GPUs in
// EXCLUSIVE_PROCESS mode it could not use them, so it is refused, with the reason.
func (p *Plugin) mpsClient(ctx context.Context, ids []int, gpus []GPU, resp *pluginapi.ContainerAllocateResponse) error {
	if p.cfg.MPS == nil {
		return nil
	}
	if len(ids) != 1 {
		return fmt.Errorf("the node runs an MPS control daemon per shared GPU and a CUDA process reaches only one, so a container cannot share %d GPUs (%s) under MPS: "+
			"ask for one shared GPU per pod, or for whole GPUs (exclusivity: Exclusive)", len(ids), apiv1.FormatIDs(ids))
	}
	i := slices.IndexFunc(gpus, func(g GPU) bool { return g.Index == ids[0] })
	if i < 0 {
		return fmt.Errorf("GPU %d is not on this node", ids[0])
	}
	pipe, shm, err := p.cfg.MPS.Ensure(ctx, gpus[i].UUID)
	if err != nil {
		return fmt.Errorf("the MPS control daemon of GPU %d: %w", ids[0], err)
	}
	if pipe == "" {
		return nil
	}
	resp.Envs["CUDA_MPS_PIPE_DIRECTORY"] = pipe
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: pipe, HostPath: pipe})
	if shm != "" {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: "/dev/shm", HostPath: shm})
	}
	return nil
}

// shareEnv tells a Shared pod's container its limits as CUDA MPS reads them, from the pod's
// share annotation (apiv1.AnnotationShare): the pinned memory limit of each of its GPUs
// (numbered from 0 inside the container) and the active thread percentage. MPS enforces them
// where its server runs for the GPU; elsewhere they are accounted only (docs/sharing.md).
func shareEnv(pod *corev1.Pod, gpus int, env map[string]string) error {
	v, ok := pod.Annotations[apiv1.AnnotationShare]
	if !ok {
		return nil // a Shared claim without a share: one of the sharers, no limits
	}
	s, err := apiv1.ParseShare(v)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if s.MemoryMiB > 0 {
		limits := make([]string, gpus)
		for i := range limits {
			limits[i] = strconv.Itoa(i) + "=" + strconv.FormatInt(s.MemoryMiB, 10) + "M"
		}
		env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = strings.Join(limits, ",")
	}
	if s.ComputePercent > 0 {
		env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(int(s.ComputePercent))
	}
	return nil
}
