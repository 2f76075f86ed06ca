package deviceplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"

	"github.com/gpu-scheduler/gpu-scheduler/agent/deviceplugin"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mps"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// partsNode starts the kubelet's device manager and one plugin of mode over the mock
// dgx-h100-mig node's GPUs (GPUs 0-3 in MIG mode), read through the agent's NVML adapter.
func partsNode(t *testing.T, edit func(*deviceplugin.Config)) *node {
	t.Helper()
	srv, err := mock.New("dgx-h100-mig", mock.WithSeed(nodeName))
	if err != nil {
		t.Fatal(err)
	}
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var gpus []deviceplugin.GPU
	for _, d := range devs {
		uuid, _ := d.UUID()
		minor, _ := d.Minor()
		mig, err := d.MIG()
		if err != nil {
			t.Fatal(err)
		}
		g := deviceplugin.GPU{Index: d.Index(), UUID: uuid, Minor: minor, Healthy: true, NUMANode: -1, MIGMode: mig != nil && mig.Enabled}
		if mig != nil {
			for _, m := range mig.Devices {
				g.MIG = append(g.MIG, deviceplugin.MIGDevice{Slot: m.Slot, Profile: m.Profile, UUID: m.UUID, GI: m.GI, CI: m.CI, Healthy: true})
			}
		}
		gpus = append(gpus, g)
	}
	n := &node{t: t, pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil), active: map[types.UID]*corev1.Pod{}, gpus: gpus}
	n.startKubelet()
	n.startPluginWith(edit)
	t.Cleanup(func() {
		n.stopPlugin()
		_ = n.mgr.Stop(klog.Background())
	})
	return n
}

// waitFor waits until the kubelet counts want healthy devices of res.
func (n *node) waitFor(res corev1.ResourceName, want int64) {
	n.t.Helper()
	var got int64
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, alloc, _ := n.mgr.GetCapacity()
		q := alloc[res]
		got = q.Value()
		return got == want, nil
	})
	if err != nil {
		n.t.Fatalf("kubelet allocatable %s: got %d, want %d", res, got, want)
	}
}

// bindParts makes a pod bound to the node that asks for count of res, with annotations.
func (n *node) bindParts(res corev1.ResourceName, count int64, annotations map[string]string) *corev1.Pod {
	pod := n.bind(1, nil, time.Now())
	pod = pod.DeepCopy()
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{res: *resource.NewQuantity(count, resource.DecimalSI)}
	for k, v := range annotations {
		pod.Annotations[k] = v
	}
	if err := n.pods.Update(pod); err != nil {
		n.t.Fatal(err)
	}
	return pod
}

func cdiNames(opts *devicemanager.DeviceRunContainerOptions) []string {
	var out []string
	for _, d := range opts.CDIDevices {
		out = append(out, d.Name)
	}
	return out
}

func env(opts *devicemanager.DeviceRunContainerOptions) map[string]string {
	out := map[string]string{}
	for _, e := range opts.Envs {
		out[e.Name] = e.Value
	}
	return out
}

// TestMIGPodGetsItsMIGDevice: the 1g.10gb plugin advertises the node's nine 1g.10gb devices;
// a pod whose mig-devices annotation names 2:5 is handed exactly that device (CDI device,
// MIG UUID in NVIDIA_VISIBLE_DEVICES, the parent GPU's device node), another gets 0:3; a pod
// without the annotation is refused.
func TestMIGPodGetsItsMIGDevice(t *testing.T) {
	res := corev1.ResourceName(deviceplugin.MIGResourceName("1g.10gb"))
	n := partsNode(t, func(c *deviceplugin.Config) { c.Mode, c.MIGProfile = deviceplugin.ModeMIG, "1g.10gb" })
	n.waitFor(res, 9) // GPU 0: seven, GPU 2: two
	alloc := func(gpu int) string { return apiv1.Allocation{Node: nodeName, IDs: []int{gpu}}.String() }
	for _, tc := range []struct {
		ref  apiv1.MIGDeviceRef
		node string
	}{{apiv1.MIGDeviceRef{GPU: 2, Slot: 5}, "/dev/nvidia2"}, {apiv1.MIGDeviceRef{GPU: 0, Slot: 3}, "/dev/nvidia0"}} {
		pod := n.bindParts(res, 1, map[string]string{
			apiv1.AnnotationAllocated: alloc(tc.ref.GPU), apiv1.AnnotationGPUIDs: apiv1.FormatIDs([]int{tc.ref.GPU}),
			apiv1.AnnotationMIGDevices: tc.ref.String(),
		})
		opts, err := n.admit(pod)
		if err != nil {
			t.Fatalf("admitting the pod of MIG device %s: %v", tc.ref, err)
		}
		want := ""
		for _, g := range n.gpus {
			for _, m := range g.MIG {
				if g.Index == tc.ref.GPU && m.Slot == tc.ref.Slot {
					want = m.UUID
				}
			}
		}
		if got := env(opts)["NVIDIA_VISIBLE_DEVICES"]; got != want || !strings.HasPrefix(got, "MIG-") {
			t.Errorf("MIG device %s: NVIDIA_VISIBLE_DEVICES=%q, want %q", tc.ref, got, want)
		}
		if got := cdiNames(opts); !slices.Equal(got, []string{deviceplugin.DefaultCDIKind + "-mig-1g.10gb=" + tc.ref.String()}) {
			t.Errorf("MIG device %s: CDI devices %v", tc.ref, got)
		}
		var nodes []string
		for _, d := range opts.Devices {
			nodes = append(nodes, d.PathOnHost)
		}
		if !slices.Contains(nodes, tc.node) || slices.ContainsFunc(nodes, func(s string) bool {
			return strings.HasPrefix(s, "/dev/nvidia") && s != tc.node && !strings.HasPrefix(s, "/dev/nvidia-") && s != "/dev/nvidiactl"
		}) {
			t.Errorf("MIG device %s: device nodes %v, want its GPU's %s and no other GPU", tc.ref, nodes, tc.node)
		}
	}
	rogue := n.bindParts(res, 1, map[string]string{apiv1.AnnotationAllocated: alloc(0), apiv1.AnnotationGPUIDs: "0"})
	if _, err := n.admit(rogue); err == nil || !strings.Contains(err.Error(), apiv1.AnnotationMIGDevices) {
		t.Fatalf("a pod without the mig-devices annotation: %v, want refused naming %s", err, apiv1.AnnotationMIGDevices)
	}
}

// TestSharedPodGetsItsGPUAndLimits: the Shared plugin advertises each of GPUs 4-7 (not in MIG
// mode) as 4 replicas; two pods sharing GPU 5 are each handed GPU 5 with their own MPS limits,
// a pod without an allocation is refused.
func TestSharedPodGetsItsGPUAndLimits(t *testing.T) {
	res := corev1.ResourceName(deviceplugin.SharedResourceName)
	n := partsNode(t, func(c *deviceplugin.Config) { c.Mode, c.Replicas = deviceplugin.ModeShared, 4 })
	n.waitFor(res, 16)
	ann := func(share string) map[string]string {
		return map[string]string{
			apiv1.AnnotationAllocated: apiv1.Allocation{Node: nodeName, IDs: []int{5}}.String(), apiv1.AnnotationGPUIDs: "5",
			apiv1.AnnotationShare: share,
		}
	}
	for _, tc := range []struct {
		share      string
		mem, trhds string
	}{{"memoryMiB=20480,computePercent=25", "0=20480M", "25"}, {"memoryMiB=40960", "0=40960M", ""}} {
		pod := n.bindParts(res, 1, ann(tc.share))
		opts, err := n.admit(pod)
		if err != nil {
			t.Fatalf("admitting a Shared pod (%s): %v", tc.share, err)
		}
		e := env(opts)
		if e["NVIDIA_VISIBLE_DEVICES"] != n.gpus[5].UUID {
			t.Errorf("%s: NVIDIA_VISIBLE_DEVICES=%q, want GPU 5's %s", tc.share, e["NVIDIA_VISIBLE_DEVICES"], n.gpus[5].UUID)
		}
		if e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != tc.mem || e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != tc.trhds {
			t.Errorf("%s: MPS limits %q / %q, want %q / %q", tc.share, e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], tc.mem, tc.trhds)
		}
		if got := cdiNames(opts); !slices.Equal(got, []string{deviceplugin.DefaultCDIKind + "-shared=5"}) {
			t.Errorf("%s: CDI devices %v, want GPU 5 only", tc.share, got)
		}
	}
	rogue := n.bindParts(res, 1, nil)
	if _, err := n.admit(rogue); err == nil {
		t.Fatal("a Shared pod without an allocation was admitted")
	}
}

// TestSharedPodUnderMPSGetsItsGPUsDaemon: with the agent running MPS, a Shared pod's container
// is handed its GPU's MPS control daemon, started for that GPU only (a stand-in
// nvidia-cuda-mps-control records how it was run): the pipe directory mounted and named by
// CUDA_MPS_PIPE_DIRECTORY, the daemons' shared memory as /dev/shm, beside its limits. A pod
// sharing two GPUs is refused: a CUDA process reaches one daemon.
func TestSharedPodUnderMPSGetsItsGPUsDaemon(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	script := "#!/bin/sh\n[ \"$1\" = -f ] || exit 0\necho \"$* $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY\" >> " + log +
		"\ntouch \"$CUDA_MPS_PIPE_DIRECTORY/control\"\nexec sleep 600\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	root := filepath.Join(dir, "mps")
	m := mps.New(ctx, mps.Config{Control: bin, Root: root, QuitTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { cancel(); m.Wait() })

	res := corev1.ResourceName(deviceplugin.SharedResourceName)
	n := partsNode(t, func(c *deviceplugin.Config) {
		c.Mode, c.Replicas, c.MPS = deviceplugin.ModeShared, 4, mps.Plugin(m)
	})
	n.waitFor(res, 16)
	pod := n.bindParts(res, 1, map[string]string{
		apiv1.AnnotationAllocated: apiv1.Allocation{Node: nodeName, IDs: []int{5}}.String(), apiv1.AnnotationGPUIDs: "5",
		apiv1.AnnotationShare: "memoryMiB=20480",
	})
	opts, err := n.admit(pod)
	if err != nil {
		t.Fatalf("admitting a Shared pod under MPS: %v", err)
	}
	pipe := filepath.Join(root, n.gpus[5].UUID, "pipe")
	e := env(opts)
	if e["CUDA_MPS_PIPE_DIRECTORY"] != pipe || e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=20480M" {
		t.Errorf("CUDA_MPS_PIPE_DIRECTORY=%q, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q; want %q and 0=20480M", e["CUDA_MPS_PIPE_DIRECTORY"], e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], pipe)
	}
	mounts := map[string]string{}
	for _, mt := range opts.Mounts {
		mounts[mt.ContainerPath] = mt.HostPath
	}
	if mounts[pipe] != pipe || mounts["/dev/shm"] != filepath.Join(root, "shm") {
		t.Errorf("mounts %v, want the pipe directory %s and %s as /dev/shm", mounts, pipe, filepath.Join(root, "shm"))
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := "-f " + n.gpus[5].UUID + " " + pipe + "\n"; string(b) != want {
		t.Errorf("daemons run: %q, want one for GPU 5 only: %q", b, want)
	}

	two := n.bindParts(res, 2, map[string]string{
		apiv1.AnnotationAllocated: apiv1.Allocation{Node: nodeName, IDs: []int{6, 7}}.String(), apiv1.AnnotationGPUIDs: "6,7",
	})
	if _, err := n.admit(two); err == nil || !strings.Contains(err.Error(), "cannot share 2 GPUs") {
		t.Fatalf("a pod sharing two GPUs under MPS: %v, want refused", err)
	}
}
