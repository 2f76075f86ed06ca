//go:build integration

package integration

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/kubectlgpu"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from this run")

// runGPU runs one kubectl gpu command against the shared control plane and returns stdout.
func runGPU(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := kubectlgpu.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", env.c.Kubeconfig()}, args...))
	cmd.SetContext(t.Context())
	if err := cmd.Execute(); err != nil {
		t.Fatalf("kubectl gpu %v: %v (stderr %q)", args, err, errOut.String())
	}
	return out.String()
}

// runGPUErr runs one kubectl gpu command that is expected to fail and returns its error.
func runGPUErr(t *testing.T, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	cmd := kubectlgpu.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out})
	cmd.SetArgs(append([]string{"--kubeconfig", env.c.Kubeconfig()}, args...))
	cmd.SetContext(t.Context())
	return cmd.Execute()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run with -update to create it): %v", path, err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestKubectlGPUGolden(t *testing.T) {
	const node = "kgpu-node"
	devs := []apiv1.Device{
		{ID: 0, Island: "nv0", Health: apiv1.Healthy, BandwidthGBps: 900, Product: "NVIDIA H100", UtilizationPercent: ptr.To[int32](37), MemoryMiB: 81559,
			MemoryUsedMiB: ptr.To[int64](20480), TemperatureCelsius: ptr.To[int32](61), PowerWatts: ptr.To[int32](412)},
		{ID: 1, Island: "nv0", Health: apiv1.Healthy, BandwidthGBps: 900, Product: "NVIDIA H100"},
		{ID: 2, Island: "nv1", Health: apiv1.Unhealthy, Reason: "Xid 79", BandwidthGBps: 900, Product: "NVIDIA H100",
			LastTransitionTime: ptr.To(metav1.NewTime(time.Now().Add(-26 * time.Hour))), RecoveryCount: 2},
		{ID: 3, Island: "nv1", Health: apiv1.Healthy, BandwidthGBps: 900, Product: "NVIDIA H100",
			LastTransitionTime: ptr.To(metav1.NewTime(time.Now().Add(-5 * 24 * time.Hour))), RecoveryCount: 1},
	}
	if err := writeStatus(t.Context(), node, devs); err != nil {
		t.Fatal(err)
	}
	holder := "uid-kgpu-train"
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + node + "-1", Labels: map[string]string{
			apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: "1",
			apiv1.LabelPodNamespace: "kgpu", apiv1.LabelPodName: "train",
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	if _, err := env.kube.CoordinationV1().Leases(leaseNamespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating lease %s: %v", l.Name, err)
	}
	// The node's agent renewed its liveness lease two minutes ago.
	live := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + node + "-agent", Labels: map[string]string{apiv1.LabelAgentLiveness: apiv1.SchedulerName}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), RenewTime: &metav1.MicroTime{Time: time.Now().Add(-2 * time.Minute)}},
	}
	if _, err := env.kube.CoordinationV1().Leases(leaseNamespace).Create(t.Context(), live, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating lease %s: %v", live.Name, err)
	}
	t.Cleanup(func() {
		_ = env.kube.CoordinationV1().Leases(leaseNamespace).Delete(t.Context(), l.Name, metav1.DeleteOptions{})
		_ = env.kube.CoordinationV1().Leases(leaseNamespace).Delete(t.Context(), live.Name, metav1.DeleteOptions{})
		_ = env.gpu.GpuV1().GpuNodeStatuses().Delete(t.Context(), node, metav1.DeleteOptions{})
	})
	ns := namespace(t, "kgpu")
	createClaim(t, ns, "wants-two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}})

	golden(t, "kubectl-gpu-nodes", runGPU(t, "nodes", node))
	// The wide table ends in the ages of the status heartbeat (seconds) and of the liveness
	// lease renewal (2m and some seconds): the seconds vary from run to run, and so does the
	// padding, so ages become <age> and columns one space apart.
	ages := regexp.MustCompile(`\b\d+[smhdy](\d+s)?\b`)
	var wide []string
	for _, line := range strings.Split(strings.TrimSpace(runGPU(t, "nodes", node, "-o", "wide")), "\n") {
		wide = append(wide, strings.Join(strings.Fields(ages.ReplaceAllString(line, "<age>")), " "))
	}
	golden(t, "kubectl-gpu-nodes-wide", strings.Join(wide, "\n")+"\n")
	golden(t, "kubectl-gpu-top", runGPU(t, "top", node, "-o", "wide"))
	// health lists every node of the shared cluster: keep only this test's node.
	var mine []string
	for _, line := range strings.Split(runGPU(t, "health"), "\n") {
		if strings.HasPrefix(line, node+" ") {
			mine = append(mine, strings.Join(strings.Fields(line), " "))
		}
	}
	golden(t, "kubectl-gpu-health", strings.Join(mine, "\n")+"\n")
	// Named, with the GPUs that recovered: only this node, so the whole output is stable (the
	// SINCE ages are 26h and 5d for minutes after the status was written).
	golden(t, "kubectl-gpu-health-recovered", runGPU(t, "health", node, "--recovered"))
	// The lease's holder pod kgpu/train does not exist: provably stale; the dry run keeps it.
	var stale []string
	for _, line := range strings.Split(runGPU(t, "leases", "--stale")+runGPU(t, "leases", "--delete-stale"), "\n") {
		if strings.Contains(line, "gpu-"+node+"-") {
			stale = append(stale, strings.Join(strings.Fields(line), " "))
		}
	}
	golden(t, "kubectl-gpu-leases-stale", strings.Join(stale, "\n")+"\n")
	if _, err := env.kube.CoordinationV1().Leases(leaseNamespace).Get(t.Context(), l.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the dry run of --delete-stale removed lease %s: %v", l.Name, err)
	}
	// A lease whose pod exists with that UID and whose allocation names the GPU is held, never
	// stale; --yes deletes the stale one and keeps it.
	held := createHeldLease(t, ns, node, 3)
	explainGolden(t, ns, node)
	out := runGPU(t, "leases", "--delete-stale", "--yes")
	if !strings.Contains(out, "deleted lease "+leaseNamespace+"/"+l.Name+" (holder pod gone)") {
		t.Errorf("--delete-stale --yes did not report deleting %s:\n%s", l.Name, out)
	}
	if strings.Contains(out, held) {
		t.Errorf("--delete-stale --yes touched the held lease %s:\n%s", held, out)
	}
	if _, err := env.kube.CoordinationV1().Leases(leaseNamespace).Get(t.Context(), l.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("stale lease %s still there after --delete-stale --yes (err %v)", l.Name, err)
	}
	if _, err := env.kube.CoordinationV1().Leases(leaseNamespace).Get(t.Context(), held, metav1.GetOptions{}); err != nil {
		t.Errorf("held lease %s was deleted: %v", held, err)
	}
	age := regexp.MustCompile(`\s+\d+[smh]\s+`)
	golden(t, "kubectl-gpu-claims", age.ReplaceAllString(runGPU(t, "claims", "-n", ns), " <age> "))
	submitGolden(t, ns, age)
	completions(t, ns, node)
}

// complete runs cobra's hidden __complete command, as the shell scripts and kubectl's
// kubectl_complete-gpu do, and returns the suggestions and the directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(runGPU(t, append([]string{"__complete"}, args...)...)), "\n")
	last := len(lines) - 1
	if last < 0 || !strings.HasPrefix(lines[last], ":") {
		t.Fatalf("__complete %v printed no directive: %q", args, lines)
	}
	return lines[:last], lines[last]
}

// completions checks that the shell completes resource names from the cluster, not only
// command names.
func completions(t *testing.T, ns, node string) {
	t.Helper()
	noFiles := ":" + strconv.Itoa(int(cobra.ShellCompDirectiveNoFileComp))
	for _, tc := range []struct {
		args []string
		want []string
		// exact: the cluster holds exactly these; else they are among the suggestions.
		exact bool
	}{
		{[]string{"nodes", "kgpu-"}, []string{node}, false},
		{[]string{"top", "kgpu-n"}, []string{node}, false},
		{[]string{"health", node, "kgpu-"}, []string{}, false}, // a node given once is not offered again
		{[]string{"health", "kgpu-"}, []string{node}, false},
		{[]string{"claims", "-n", ns, ""}, []string{"too-big", "wants-two"}, true},
		{[]string{"workloads", "-n", ns, ""}, []string{"train"}, true},
		{[]string{"explain", "-n", ns, "wants"}, []string{"wants-three"}, true},
		{[]string{"explain", "-n", ns, "h"}, []string{"holder"}, true},
		{[]string{"explain", "-n", ns, "claim/"}, []string{"claim/too-big", "claim/wants-two"}, true},
		{[]string{"explain", "-n", ns, "pod/w"}, []string{"pod/wants-three"}, true},
		{[]string{"claims", "-n", ns[:3]}, []string{ns}, false},
		{[]string{"submit", "workload", "x", "-n", ns, "--claim-template", ""}, []string{"two"}, true},
		{[]string{"generate-template", ""}, []string{"claim-template", "workload"}, true},
		{[]string{"status", "-o", ""}, []string{"wide", "json", "yaml", "name", "jsonpath=", "custom-columns="}, true},
	} {
		got, directive := complete(t, tc.args...)
		if directive != noFiles {
			t.Errorf("__complete %q: directive %s, want %s (no file names)", tc.args, directive, noFiles)
		}
		if tc.exact {
			if !slices.Equal(got, tc.want) {
				t.Errorf("__complete %q = %q, want %q", tc.args, got, tc.want)
			}
			continue
		}
		if len(tc.want) == 0 && slices.Contains(got, node) {
			t.Errorf("__complete %q offers %s again: %q", tc.args, node, got)
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("__complete %q = %q, want %q among them", tc.args, got, w)
			}
		}
	}
}

// createHeldLease makes a pod that no scheduler serves, gives it the allocation node:gpu as the
// scheduler would, and a lease on that GPU naming it: a lease that is provably not stale.
func createHeldLease(t *testing.T, ns, node string, gpu int) string {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "holder", Annotations: map[string]string{
			apiv1.AnnotationAllocated: apiv1.Allocation{Node: node, IDs: []int{gpu}}.String()}},
		Spec: corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "main", Image: "registry.example/cuda:fake"}}},
	}
	pod, err := env.kube.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, p.Name, err)
	}
	uid := string(pod.UID)
	name, err := apiv1.LeaseName(node, gpu)
	if err != nil {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: strconv.Itoa(gpu),
			apiv1.LabelPodNamespace: ns, apiv1.LabelPodName: pod.Name, apiv1.LabelPodUID: uid,
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &uid},
	}
	if _, err := env.kube.CoordinationV1().Leases(leaseNamespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating lease %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = env.kube.CoordinationV1().Leases(leaseNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// explainGolden asks explain about a pod whose claim cannot fit kgpu-node (the only node its
// selector matches): GPU 0 free, 1 and 3 held, 2 unhealthy. The number of other nodes in the
// shared cluster varies, so it is replaced by <n>.
func explainGolden(t *testing.T, ns, node string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kgpu-explain": "yes"}}}
	if _, err := env.kube.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node %s: %v", node, err)
	}
	t.Cleanup(func() { _ = env.kube.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	createClaim(t, ns, "too-big", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 3},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired},
		Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{"kgpu-explain": "yes"}}})
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "wants-three", Annotations: map[string]string{apiv1.AnnotationClaim: "too-big"}},
		Spec:       corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "main", Image: "registry.example/cuda:fake"}}},
	}
	if _, err := env.kube.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, p.Name, err)
	}
	others := regexp.MustCompile(`(?m)(on |^  )\d+ (nodes?)( \(|: node does not match)`)
	for _, what := range []string{"wants-three", "claim/too-big"} {
		got := others.ReplaceAllString(runGPU(t, "explain", what, "-n", ns), "$1<n> $2$3")
		golden(t, "kubectl-gpu-explain-"+strings.ReplaceAll(what, "/", "-"), got)
	}
}

// submitGolden creates a GpuClaimTemplate and a GpuWorkload naming it with submit (the API
// server validates and defaults them), checks that --dry-run stores nothing and that the API
// server's refusal reaches the user, and lists the workloads (no controller runs here, so the
// workload stays Pending with no status).
func submitGolden(t *testing.T, ns string, age *regexp.Regexp) {
	t.Helper()
	if out := runGPU(t, "submit", "gct", "two", "--gpus", "2", "--topology", "Required", "-n", ns); out != "gpuclaimtemplate "+ns+"/two created\n" {
		t.Errorf("submit gct: %q", out)
	}
	gct, err := env.gpu.GpuV1().GpuClaimTemplates(ns).Get(t.Context(), "two", metav1.GetOptions{})
	if err != nil || gct.Spec.Spec.Devices.Count != 2 || gct.Spec.Spec.Topology.Mode != apiv1.TopologyRequired {
		t.Errorf("submitted GpuClaimTemplate: %+v, %v", gct, err)
	}
	runGPU(t, "submit", "workload", "dry", "--image", "registry.example/cuda:fake", "--dry-run", "-n", ns)
	if _, err := env.gpu.GpuV1().GpuWorkloads(ns).Get(t.Context(), "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("submit --dry-run stored workload %s/dry (err %v)", ns, err)
	}
	long := strings.Repeat("w", 60)
	if err := runGPUErr(t, "submit", "workload", long, "--image", "i", "-n", ns); err == nil || !strings.Contains(err.Error(), "at most 52 characters") {
		t.Errorf("submit of a workload with a 60-character name: error %v, want the API server's 52-character rule", err)
	}
	runGPU(t, "submit", "workload", "train", "--replicas", "2", "--claim-template", "two", "--image", "registry.example/cuda:fake", "-n", ns)
	golden(t, "kubectl-gpu-workloads", age.ReplaceAllString(runGPU(t, "workloads", "-n", ns, "-o", "wide"), " <age> "))
}
