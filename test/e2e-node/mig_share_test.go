//go:build e2enode

package e2enode

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// partsScript prints the GPU device nodes the container has and the variables the device
// plugin sets for MIG and Shared pods, then stays up. cuda= comes last: readers wait for it.
const partsScript = `echo "devs=$(cd /dev && ls -d nvidia[0-9]* 2>/dev/null | tr '\n' ' ')"; ` +
	`echo "nvidia=$NVIDIA_VISIBLE_DEVICES"; echo "mem=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"; ` +
	`echo "threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"; echo "cuda=$CUDA_VISIBLE_DEVICES"; sleep 3600`

// The node-side "done when": a 1g.10gb MIG claim and a 25 %-memory Shared claim each
// run through the real control plane to a pod handed exactly its device and limits. The agent
// is switched to the dgx-h100-mig preset (GPUs 0-3 in MIG mode, 4-7 whole) with a helm upgrade
// of the release, and switched back at the end, so that the tests after this one find the
// dgx-h100 they expect.
func TestMIGAndSharedPodsGetTheirDeviceAndLimits(t *testing.T) {
	ctx := context.Background()
	gpus, err := versioned.NewForConfig(env.node.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := "e2e-parts"
	original := agentExtraArgs(t)
	switchTopology(t, original, "dgx-h100-mig")
	t.Cleanup(func() {
		deleteNamespace(t, ns)
		switchTopology(t, original, "")
		waitNodeStatus(t, gpus, "no GPU in MIG mode", func(s *apiv1.GpuNodeStatus) bool {
			return !slices.ContainsFunc(s.Status.Devices, func(d apiv1.Device) bool { return d.MIG != nil && d.MIG.Enabled })
		})
		waitResource(t, gpuResource, func(q int64) bool { return q == 8 })
	})
	waitNodeStatus(t, gpus, "GPUs 0-3 in MIG mode with 1g.10gb devices", func(s *apiv1.GpuNodeStatus) bool {
		n := 0
		for _, d := range s.Status.Devices {
			if d.MIG != nil && d.MIG.Enabled && slices.ContainsFunc(d.MIG.Devices, func(m apiv1.MigDevice) bool { return m.Profile == "1g.10gb" && m.UUID != "" }) {
				n++
			}
		}
		return n > 0
	})
	const migResource = corev1.ResourceName("gpu.scheduling/mig-1g.10gb")
	waitResource(t, migResource, func(q int64) bool { return q > 0 })
	waitResource(t, gpuResource, func(q int64) bool { return q == 4 })
	ensureNamespace(t, ns)

	// The MIG pod: the MIG device the scheduler chose, by the UUID the agent published for it,
	// and its parent GPU's device node only.
	createClaimSpec(t, ns, "slice", map[string]any{"count": int64(1), "exclusivity": "MIG", "migProfile": "1g.10gb"})
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, partsPod(ns, "slice", "slice"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the MIG pod: %v", err)
	}
	p := waitPod(t, ns, "slice", 3*time.Minute, "Running", running)
	refs, err := apiv1.ParseMIGDevices(p.Annotations[apiv1.AnnotationMIGDevices])
	if err != nil || len(refs) != 1 {
		t.Fatalf("the MIG pod's %s annotation %q: %v; want one MIG device", apiv1.AnnotationMIGDevices, p.Annotations[apiv1.AnnotationMIGDevices], err)
	}
	ref := refs[0]
	st, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, env.node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mig *apiv1.MigDevice
	for _, d := range st.Status.Devices {
		if int(d.ID) != ref.GPU || d.MIG == nil {
			continue
		}
		for i := range d.MIG.Devices {
			if int(d.MIG.Devices[i].Slot) == ref.Slot {
				mig = &d.MIG.Devices[i]
			}
		}
	}
	if mig == nil || mig.Profile != "1g.10gb" || !strings.HasPrefix(mig.UUID, "MIG-") {
		t.Fatalf("MIG device %s: the GpuNodeStatus lists %+v, want a 1g.10gb device with a MIG- UUID", ref, mig)
	}
	if ids := chosenGPUs(p); !slices.Equal(ids, []int{ref.GPU}) {
		t.Errorf("the MIG pod's %s = %v, want its device's GPU %d", apiv1.AnnotationGPUIDs, ids, ref.GPU)
	}
	v := partsView(t, ns, "slice")
	if v["nvidia"] != mig.UUID {
		t.Errorf("the MIG pod sees NVIDIA_VISIBLE_DEVICES=%q, want its device %s's %s", v["nvidia"], ref, mig.UUID)
	}
	if got := minorsOf(v["devs"]); !slices.Equal(got, []int{ref.GPU}) {
		t.Errorf("the MIG pod has /dev/nvidia%v, want its parent GPU's only: [%d]", got, ref.GPU)
	}

	// The Shared pod: a GPU not in MIG mode, and the memory limit of 25 % of that GPU's memory
	// as the agent publishes it.
	createClaimSpec(t, ns, "quarter", map[string]any{"count": int64(1), "exclusivity": "Shared", "share": map[string]any{"memoryPercent": int64(25)}})
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, partsPod(ns, "quarter", "quarter"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Shared pod: %v", err)
	}
	p = waitPod(t, ns, "quarter", 3*time.Minute, "Running", running)
	ids := chosenGPUs(p)
	if len(ids) != 1 {
		t.Fatalf("the Shared pod's %s = %v, want one GPU", apiv1.AnnotationGPUIDs, ids)
	}
	var gpu *apiv1.Device
	for i := range st.Status.Devices {
		if int(st.Status.Devices[i].ID) == ids[0] {
			gpu = &st.Status.Devices[i]
		}
	}
	if gpu == nil || gpu.MemoryMiB <= 0 || gpu.MIG != nil && gpu.MIG.Enabled {
		t.Fatalf("GPU %d of the Shared pod: %+v, want a whole GPU with its memory published", ids[0], gpu)
	}
	quarter := gpu.MemoryMiB * 25 / 100
	if s, err := apiv1.ParseShare(p.Annotations[apiv1.AnnotationShare]); err != nil || s.MemoryMiB != quarter {
		t.Errorf("the Shared pod's %s = %q (%v), want memoryMiB=%d (25 %% of GPU %d's %d MiB)", apiv1.AnnotationShare, p.Annotations[apiv1.AnnotationShare], err, quarter, ids[0], gpu.MemoryMiB)
	}
	v = partsView(t, ns, "quarter")
	if want := "0=" + strconv.FormatInt(quarter, 10) + "M"; v["mem"] != want {
		t.Errorf("the Shared pod sees CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q, want %q (25 %% of %d MiB)", v["mem"], want, gpu.MemoryMiB)
	}
	if v["threads"] != "" {
		t.Errorf("the Shared pod sees CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q; its claim states no compute share", v["threads"])
	}
	if v["nvidia"] != gpu.UUID {
		t.Errorf("the Shared pod sees NVIDIA_VISIBLE_DEVICES=%q, want GPU %d's %s", v["nvidia"], ids[0], gpu.UUID)
	}
	if got := minorsOf(v["devs"]); !slices.Equal(got, ids) {
		t.Errorf("the Shared pod has /dev/nvidia%v, want its GPU's only: %v", got, ids)
	}
}

// partsPod is a testbox pod of gpu-scheduler naming claim, reporting with partsScript.
func partsPod(ns, name, claim string) *corev1.Pod {
	p := claimPod(ns, name, claim)
	p.Spec.Containers[0].Command = []string{"sh", "-c", partsScript}
	return p
}

// partsView reads a partsPod's report: its key=value lines.
func partsView(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	var logs string
	var err error
	for range 60 {
		logs, err = kubectl(t, "logs", "-n", ns, name)
		if err == nil && strings.Contains(logs, "cuda=") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(logs, "cuda=") {
		t.Fatalf("pod %s/%s: no report in its log (%v): %q", ns, name, err, logs)
	}
	out := map[string]string{}
	for _, l := range strings.Split(logs, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func minorsOf(devs string) []int {
	var out []int
	for _, f := range strings.Fields(devs) {
		if m, err := strconv.Atoi(strings.TrimPrefix(f, "nvidia")); err == nil {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// createClaimSpec creates GpuClaim ns/name with spec.devices devices.
func createClaimSpec(t *testing.T, ns, name string, devices map[string]any) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.node.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	claim := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gpu.scheduling/v1", "kind": "GpuClaim",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"devices": devices},
	}}
	if _, err := dyn.Resource(gpuClaimGVR).Namespace(ns).Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating GpuClaim %s/%s: %v", ns, name, err)
	}
}

// agentExtraArgs are the release's agent.extraArgs as installed.
func agentExtraArgs(t *testing.T) []string {
	t.Helper()
	out, err := command(env.helm, "get", "values", release, "--namespace", releaseNS, "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Agent struct {
			ExtraArgs []string `json:"extraArgs"`
		} `json:"agent"`
	}
	if err := json.Unmarshal([]byte(out), &values); err != nil {
		t.Fatalf("helm get values: %v\n%s", err, out)
	}
	if !slices.ContainsFunc(values.Agent.ExtraArgs, func(a string) bool { return strings.HasPrefix(a, "--mock-topology=") }) {
		t.Fatalf("the release's agent.extraArgs %q have no --mock-topology to switch", values.Agent.ExtraArgs)
	}
	return values.Agent.ExtraArgs
}

// switchTopology upgrades the release with the agent's --mock-topology of args set to preset,
// the rest of its values kept; an empty preset restores args as they were.
func switchTopology(t *testing.T, args []string, preset string) {
	t.Helper()
	next := slices.Clone(args)
	if preset != "" {
		for i, a := range next {
			if strings.HasPrefix(a, "--mock-topology=") {
				next[i] = "--mock-topology=" + preset
			}
		}
	}
	b, err := json.Marshal(next)
	if err != nil {
		t.Fatal(err)
	}
	upgrade := []string{"upgrade", release, "charts/gpu-scheduler", "--namespace", releaseNS, "--reuse-values",
		"--set-json", "agent.extraArgs=" + string(b), "--wait", "--timeout", "5m"}
	if out, err := command(env.helm, upgrade...); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(upgrade, " "), err, out)
	}
	// The DaemonSet's pod is replaced by the upgrade: wait until the running one has the args.
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := env.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil || len(pods.Items) != 1 {
			return false, nil
		}
		p := &pods.Items[0]
		return p.DeletionTimestamp == nil && running(p) && isReady(p) && slices.Equal(extraOf(p.Spec.Containers[0].Args, next), next), nil
	})
	if err != nil {
		pods, _ := kubectl(t, "get", "pods", "-n", releaseNS, "-o", "wide")
		t.Fatalf("the agent did not come back with %q: %v\n%s", next, err, pods)
	}
}

// extraOf are the args of args that are in want, in order (the chart puts extraArgs after its own).
func extraOf(args, want []string) []string {
	var out []string
	for _, a := range args {
		if slices.Contains(want, a) {
			out = append(out, a)
		}
	}
	return out
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitNodeStatus waits until the node's GpuNodeStatus satisfies cond, and returns it.
func waitNodeStatus(t *testing.T, gpus versioned.Interface, what string, cond func(*apiv1.GpuNodeStatus) bool) *apiv1.GpuNodeStatus {
	t.Helper()
	var last *apiv1.GpuNodeStatus
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, env.node.Name(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = s
		return cond(s), nil
	})
	if err != nil {
		t.Fatalf("GpuNodeStatus %s never showed %s: %v\n%s", env.node.Name(), what, err, statusSummary(last))
	}
	return last
}

func statusSummary(s *apiv1.GpuNodeStatus) string {
	if s == nil {
		return "(none read)"
	}
	var b strings.Builder
	for _, d := range s.Status.Devices {
		fmt.Fprintf(&b, "GPU %d %s health %s", d.ID, d.UUID, d.Health)
		if d.MIG != nil {
			fmt.Fprintf(&b, " mig enabled=%v devices=%d", d.MIG.Enabled, len(d.MIG.Devices))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// waitResource waits until the kubelet's allocatable of res satisfies ok.
func waitResource(t *testing.T, res corev1.ResourceName, ok func(int64) bool) {
	t.Helper()
	var got int64
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := env.cs.CoreV1().Nodes().Get(ctx, env.node.Name(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q := n.Status.Allocatable[res]
		got = q.Value()
		return ok(got), nil
	})
	if err != nil {
		t.Fatalf("the kubelet's allocatable %s stayed %d: %v", res, got, err)
	}
}
