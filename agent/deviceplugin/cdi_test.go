package deviceplugin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// fakeDevRoot makes a directory whose entries are character devices, as the runtime's stat of a
// CDI host path needs: each is a bind mount of /dev/null, which the test's private mount
// namespace (TestMain) allows without root. Unmounted when the test ends.
func fakeDevRoot(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("/dev/null", p, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind-mounting /dev/null on %s: %v", p, err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(p, 0) })
	}
	return dir
}

// TestCDISpec writes the spec through the plugin, reads it back with CDI's own parser and
// validation, and resolves GPU 1 (device minor 3) into an OCI spec as a runtime does: the
// container gets /dev/nvidia3, the control devices and GPU 1's UUID, nothing of GPU 0. The spec
// is rewritten when the inventory changes but not on a health change.
func TestCDISpec(t *testing.T) {
	dir := t.TempDir()
	devRoot := fakeDevRoot(t, append([]string{"nvidia0", "nvidia3"}, controlDevices...)...)
	p, err := New(Config{NodeName: "n", Pods: v1.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)), CDIDir: dir, DevRoot: devRoot})
	if err != nil {
		t.Fatal(err)
	}
	gpus := []GPU{{Index: 0, UUID: "GPU-a", Minor: 0, Healthy: true}, {Index: 1, UUID: "GPU-b", Minor: 3, Healthy: true}}
	if err := p.SetGPUs(gpus); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gpu.scheduling-gpu.json")
	spec, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatalf("CDI refuses the plugin's spec: %v", err)
	}
	// hostPath needs CDI 0.5.0; declaring no more lets containerd 1.7 and CRI-O read it.
	if spec.Version != "0.5.0" || spec.GetVendor()+"/"+spec.GetClass() != DefaultCDIKind || len(spec.Devices) != 2 {
		t.Fatalf("spec %s kind %s/%s with %d devices, want 0.5.0 %s with 2", spec.Version, spec.GetVendor(), spec.GetClass(), len(spec.Devices), DefaultCDIKind)
	}

	reg, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := reg.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	// The variables of Allocate's response come first; CDI's edits must leave them as they are.
	const allocated = "NVIDIA_VISIBLE_DEVICES=GPU-b"
	ociSpec := &oci.Spec{Process: &oci.Process{Env: []string{allocated}}}
	if unresolved, err := reg.InjectDevices(ociSpec, DefaultCDIKind+"=1"); err != nil {
		t.Fatalf("resolving %s=1 (unresolved %v): %v", DefaultCDIKind, unresolved, err)
	}
	var nodes []string
	for _, d := range ociSpec.Linux.Devices {
		nodes = append(nodes, d.Path)
	}
	slices.Sort(nodes)
	if want := []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3", "/dev/nvidiactl"}; !slices.Equal(nodes, want) {
		t.Fatalf("GPU 1 resolves to device nodes %v, want %v", nodes, want)
	}
	if env := strings.Join(ociSpec.Process.Env, " "); env != allocated {
		t.Fatalf("GPU 1 resolves to environment %q, want Allocate's %q untouched", env, allocated)
	}
	// Two GPUs: the container must still name both, not the last device's UUID.
	const both = "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"
	two := &oci.Spec{Process: &oci.Process{Env: []string{both}}}
	if unresolved, err := reg.InjectDevices(two, DefaultCDIKind+"=0", DefaultCDIKind+"=1"); err != nil {
		t.Fatalf("resolving GPUs 0 and 1 (unresolved %v): %v", unresolved, err)
	}
	if env := strings.Join(two.Process.Env, " "); env != both {
		t.Fatalf("GPUs 0 and 1 resolve to environment %q, want %q", env, both)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	gpus[1].Healthy = false
	if err := p.SetGPUs(gpus); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a health change rewrote the CDI spec (stat: %v)", err)
	}
	if err := p.SetGPUs(gpus[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("an inventory change did not rewrite the CDI spec: %v", err)
	}
}

// TestDeviceNodeIsTheMinor: the container of a pod holding GPU 1, whose driver minor is 3, is
// handed /dev/nvidia3, not /dev/nvidia1; a GPU whose minor is unknown is refused, and two GPUs
// claiming one minor are refused.
func TestDeviceNodeIsTheMinor(t *testing.T) {
	p, err := New(Config{NodeName: "n", Pods: v1.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// The minors come from the agent's discovery, the rest from its status.
	status := []apiv1.Device{{ID: 0, UUID: "GPU-a", Health: apiv1.Healthy}, {ID: 1, UUID: "GPU-b", Health: apiv1.Healthy}, {ID: 2, UUID: "GPU-c", Health: apiv1.Healthy}}
	gpus := FromStatus(status, []topology.Device{{Index: 0, Minor: 2}, {Index: 1, Minor: 3}})
	if gpus[1].Minor != 3 || gpus[2].Minor != -1 {
		t.Fatalf("FromStatus minors %+v, want GPU 1 minor 3 and GPU 2 unknown", gpus)
	}
	resp, err := p.containerResponse([]int{1}, gpus)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range resp.Devices {
		got = append(got, d.ContainerPath+"<-"+d.HostPath)
	}
	if got[0] != "/dev/nvidia3<-/dev/nvidia3" || slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "nvidia1") }) {
		t.Fatalf("GPU 1 (minor 3) is handed %v, want /dev/nvidia3 and no /dev/nvidia1", got)
	}
	if _, err := p.containerResponse([]int{2}, gpus); err == nil || !strings.Contains(err.Error(), "GPU 2 (GPU-c) has no known device node") {
		t.Fatalf("GPU 2 without a minor: %v", err)
	}
	spec, err := p.CDISpec(gpus)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Devices) != 2 || spec.Devices[1].ContainerEdits.DeviceNodes[0].Path != "/dev/nvidia3" {
		t.Fatalf("CDI devices %+v, want GPUs 0 and 1 with GPU 1 on /dev/nvidia3", spec.Devices)
	}
	gpus[2].Minor = 3
	if err := p.SetGPUs(gpus); err == nil || !strings.Contains(err.Error(), "GPUs 1 and 2 both have device minor 3") {
		t.Fatalf("two GPUs on minor 3: %v", err)
	}
}

// TestMIGModeGPUNotAdvertised: a GPU in MIG mode is never a whole GPU for the kubelet (nor in
// the CDI spec); a MIG-capable GPU with the mode off is. Its MIG devices are advertised by the
// plugin of their profile, and the GPUs not in MIG mode as replicas by the Shared plugin.
func TestMIGModeGPUNotAdvertised(t *testing.T) {
	status := []apiv1.Device{
		{ID: 0, UUID: "GPU-a", Health: apiv1.Healthy, MIG: &apiv1.DeviceMIG{Enabled: true, Slices: 8, Devices: []apiv1.MigDevice{
			{Slot: 0, Profile: "3g.40gb", UUID: "MIG-x", Health: apiv1.Healthy}, {Slot: 4, Profile: "1g.10gb", UUID: "MIG-y", Health: apiv1.Healthy}}}},
		{ID: 1, UUID: "GPU-b", Health: apiv1.Healthy, MIG: &apiv1.DeviceMIG{Slices: 8}},
		{ID: 2, UUID: "GPU-c", Health: apiv1.Unhealthy},
	}
	gpus := FromStatus(status, []topology.Device{{Index: 0, Minor: 0}, {Index: 1, Minor: 1}, {Index: 2, Minor: 2}})
	lister := v1.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil))
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{}, []string{"1", "2!"}},
		{Config{Mode: ModeMIG, MIGProfile: "1g.10gb"}, []string{"0:4"}},
		{Config{Mode: ModeShared, Replicas: 2}, []string{"1::0", "1::1", "2::0!", "2::1!"}},
	} {
		tc.cfg.NodeName, tc.cfg.Pods = "n", lister
		p, err := New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range p.advertised(gpus) {
			id := d.ID
			if d.Health != "Healthy" {
				id += "!"
			}
			got = append(got, id)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s advertises %v, want %v (! unhealthy)", p.cfg.ResourceName, got, tc.want)
		}
		spec, err := p.CDISpec(gpus)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range spec.Devices {
			names = append(names, d.Name)
		}
		if tc.cfg.Mode == ModeGPU && slices.Contains(names, "0") {
			t.Errorf("the whole-GPU CDI spec has GPU 0, which is in MIG mode: %v", names)
		}
		if tc.cfg.Mode == ModeMIG && !slices.Equal(names, []string{"0:4"}) {
			t.Errorf("the 1g.10gb CDI spec has devices %v, want 0:4", names)
		}
	}
}

// TestMIGCapabilityNodes: a MIG device is handed the capability device nodes the driver lists
// for its GPU instance and compute instance, in the CDI spec and the Allocate response; where
// the driver has no such files, only the parent GPU's node.
func TestMIGCapabilityNodes(t *testing.T) {
	proc := t.TempDir()
	gi := filepath.Join(proc, "driver/nvidia/capabilities/gpu3/mig/gi2")
	if err := os.MkdirAll(filepath.Join(gi, "ci0"), 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{filepath.Join(gi, "access"): "DeviceFileMinor: 21\nDeviceFileMode: 292\n", filepath.Join(gi, "ci0", "access"): "DeviceFileMinor: 22\n"} {
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(Config{NodeName: "n", Pods: v1.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)), Mode: ModeMIG, MIGProfile: "3g.40gb", ProcRoot: proc})
	if err != nil {
		t.Fatal(err)
	}
	gpus := []GPU{
		{Index: 1, Minor: 3, MIGMode: true, Healthy: true, MIG: []MIGDevice{{Slot: 4, Profile: "3g.40gb", UUID: "MIG-a", GI: 2, CI: 0, Healthy: true}}},
		{Index: 2, Minor: 5, MIGMode: true, Healthy: true, MIG: []MIGDevice{{Slot: 0, Profile: "3g.40gb", UUID: "MIG-b", GI: 1, CI: 0, Healthy: true}}},
	}
	spec, err := p.CDISpec(gpus)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range spec.Devices {
		var nodes []string
		for _, n := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		got = append(got, d.Name+"="+strings.Join(nodes, "+"))
	}
	want := []string{"1:4=/dev/nvidia3+/dev/nvidia-caps/nvidia-cap21+/dev/nvidia-caps/nvidia-cap22", "2:0=/dev/nvidia5"}
	if !slices.Equal(got, want) {
		t.Errorf("CDI devices %v, want %v", got, want)
	}
	resp, err := p.migContainerResponse([]int{migKey(1, 4)}, gpus)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, d := range resp.Devices {
		nodes = append(nodes, d.ContainerPath)
	}
	if !slices.Contains(nodes, "/dev/nvidia-caps/nvidia-cap22") || resp.Envs["NVIDIA_VISIBLE_DEVICES"] != "MIG-a" {
		t.Errorf("Allocate response: nodes %v, env %v", nodes, resp.Envs)
	}
}
