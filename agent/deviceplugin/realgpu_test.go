package deviceplugin_test

// The node side on real hardware: the kubelet's device manager over the GPUs real NVML
// discovers, the CDI device it hands a container resolved with CDI's own code into an OCI spec,
// and nvidia-smi run in a private mount namespace whose /dev holds only that spec's device
// nodes: what a container of the pod would see. Skipped where NVML cannot start (no driver).

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-scheduler/gpu-scheduler/agent/deviceplugin"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
)

// wantUUID replaces the UUID the container must see; it exists to prove on a GPU machine that
// the check fails when the container sees another GPU than expected.
var wantUUID = flag.String("realgpu.want-uuid", "", "expect this UUID in the container instead of the chosen GPU's (to prove the check can fail)")

var (
	uuidRE = regexp.MustCompile(`\(UUID: (GPU-[0-9a-fA-F-]+)\)`)
	// noGPUsRE is nvidia-smi's answer when the driver answers but no GPU is reachable (driver
	// 580 says "No devices found.", older ones "No devices were found").
	noGPUsRE = regexp.MustCompile(`No devices (were )?found`)
)

// TestRealGPUContainerView binds a pod to the node's last GPU (not GPU 0 where there are
// several) with the scheduler's allocation annotation, admits it through the kubelet's device
// manager over real NVML discovery, and checks that its container sees exactly that GPU; a pod
// holding no GPU, and a container given only the node-wide control devices, see none.
func TestRealGPUContainerView(t *testing.T) {
	lib := nvmlgpu.New(nvml.New(), nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Skipf("no NVML here (no NVIDIA driver): %v", err)
	}
	defer func() { _ = lib.Shutdown() }()
	if os.Getuid() != 0 {
		t.Skip("making the container's /dev (mknod) needs root")
	}
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		t.Fatalf("NVML works but nvidia-smi is not on PATH: %v", err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	inv, err := topology.Discover(devs)
	if err != nil {
		t.Fatal(err)
	}
	var gpus []deviceplugin.GPU
	for _, d := range inv {
		if d.Lost != nil {
			t.Fatalf("GPU %d is lost: %v", d.Index, d.Lost)
		}
		t.Logf("NVML GPU %d: %s %s bus %s minor %d", d.Index, d.UUID, d.Product, d.PCIBusID, d.Minor)
		gpus = append(gpus, deviceplugin.GPU{Index: d.Index, UUID: d.UUID, Minor: d.Minor, Healthy: true, NUMANode: -1})
	}
	n := startNode(t, t.Cleanup, gpus, t.TempDir())
	chosen := gpus[len(gpus)-1]
	want := chosen.UUID
	if *wantUUID != "" {
		want = *wantUUID
	}

	pod := n.bind(1, []int{chosen.Index}, time.Now())
	opts, err := n.admit(pod)
	if err != nil {
		t.Fatalf("admitting %s bound to GPU %d: %v", pod.Name, chosen.Index, err)
	}
	var names []string
	for _, d := range opts.CDIDevices {
		names = append(names, d.Name)
	}
	if wantNames := []string{fmt.Sprintf("%s=%d", deviceplugin.DefaultCDIKind, chosen.Index)}; !slices.Equal(names, wantNames) {
		t.Fatalf("the kubelet hands %s CDI devices %v, want %v", pod.Name, names, wantNames)
	}
	if b, err := os.ReadFile(filepath.Join(n.cdiDir, n.plugin.CDISpecFile())); err == nil {
		t.Logf("CDI spec the plugin wrote:\n%s", b)
	}
	reg, err := cdi.NewCache(cdi.WithSpecDirs(n.cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := reg.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI refuses the plugin's spec: %v", errs)
	}
	ociSpec := &oci.Spec{}
	if unresolved, err := reg.InjectDevices(ociSpec, names...); err != nil {
		t.Fatalf("resolving %v (unresolved %v): %v", names, unresolved, err)
	}
	out, _ := containerView(t, smi, ociSpec.Linux.Devices)
	t.Logf("container of %s (GPU %d), nvidia-smi -L:\n%s", pod.Name, chosen.Index, out)
	if got := uuids(out); !slices.Equal(got, []string{want}) {
		t.Fatalf("the container of %s sees GPUs %v, want exactly [%s]", pod.Name, got, want)
	}

	// A pod holding no GPU: the kubelet hands it no device, so its container has none.
	idle := n.bind(1, nil, time.Now())
	idle.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	opts, err = n.admit(idle)
	if err != nil {
		t.Fatalf("admitting %s, which holds no GPU: %v", idle.Name, err)
	}
	if opts != nil && (len(opts.CDIDevices) > 0 || len(opts.Devices) > 0) {
		t.Fatalf("the kubelet hands %s, which holds no GPU, CDI devices %v and device nodes %v", idle.Name, opts.CDIDevices, opts.Devices)
	}
	out, _ = containerView(t, smi, nil)
	t.Logf("container of %s (no GPU), nvidia-smi -L:\n%s", idle.Name, out)
	if got := uuids(out); len(got) > 0 {
		t.Fatalf("the container of %s, which holds no GPU, sees %v", idle.Name, got)
	}

	// Only the control devices every GPU container gets (the spec's common edits): the driver
	// answers, and lists no GPU, since a GPU is reachable only through its own device node.
	spec := reg.GetVendorSpecs("gpu.scheduling")
	if len(spec) != 1 {
		t.Fatalf("%d CDI specs of vendor gpu.scheduling, want 1", len(spec))
	}
	ctl := &oci.Spec{}
	if err := spec[0].ApplyEdits(ctl); err != nil {
		t.Fatal(err)
	}
	out, _ = containerView(t, smi, ctl.Linux.Devices)
	t.Logf("container with the control devices only, nvidia-smi -L:\n%s", out)
	if got := uuids(out); len(got) > 0 || !noGPUsRE.MatchString(out) {
		t.Fatalf("a container with only %s sees GPUs %v (output %q), want none", devicePaths(ctl.Linux.Devices), got, out)
	}
}

// containerView runs nvidia-smi -L in a new mount namespace whose /dev is a read-only tmpfs
// holding the given device nodes and /dev/null (which every OCI runtime adds): what a
// container with those devices sees. Read-only, so that the driver's helper cannot create the
// missing device nodes. It returns the output and the exit error, if any.
func containerView(t *testing.T, smi string, devs []oci.LinuxDevice) (string, error) {
	t.Helper()
	script := []string{"set -e", "mount -t tmpfs -o mode=0755,size=64k container-dev /dev", "mknod -m 0666 /dev/null c 1 3"}
	for _, d := range devs {
		mode := os.FileMode(0o666)
		if d.FileMode != nil {
			mode = *d.FileMode
		}
		script = append(script, fmt.Sprintf("mknod -m %o %s %s %d %d", mode.Perm(), d.Path, d.Type, d.Major, d.Minor))
	}
	script = append(script, "mount -o remount,ro /dev", "echo \"/dev: $(ls /dev | tr '\\n' ' ')\"", "exec "+smi+" -L")
	t.Logf("container /dev: %s", devicePaths(devs))
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", strings.Join(script, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(string(out), "/dev:") {
		t.Fatalf("making the container's /dev failed: %v\n%s", err, out)
	}
	return string(out), err
}

func uuids(out string) []string {
	var got []string
	for _, m := range uuidRE.FindAllStringSubmatch(out, -1) {
		got = append(got, m[1])
	}
	slices.Sort(got)
	return got
}

func devicePaths(devs []oci.LinuxDevice) []string {
	var out []string
	for _, d := range devs {
		out = append(out, fmt.Sprintf("%s (%s %d:%d)", d.Path, d.Type, d.Major, d.Minor))
	}
	return out
}
