//go:build integration

package integration

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

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
		{ID: 0, Island: "nv0", Health: apiv1.Healthy, BandwidthGBps: 900, Product: "NVIDIA H100"},
		{ID: 1, Island: "nv0", Health: apiv1.Healthy, BandwidthGBps: 900, Product: "NVIDIA H100"},
		{ID: 2, Island: "nv1", Health: apiv1.Unhealthy, Reason: "Xid 79", BandwidthGBps: 900, Product: "NVIDIA H100"},
		{ID: 3, Island: "nv1", Health: apiv1.Healthy, BandwidthGBps: 900, Product: "NVIDIA H100"},
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
	t.Cleanup(func() {
		_ = env.kube.CoordinationV1().Leases(leaseNamespace).Delete(t.Context(), l.Name, metav1.DeleteOptions{})
		_ = env.gpu.GpuV1().GpuNodeStatuses().Delete(t.Context(), node, metav1.DeleteOptions{})
	})
	ns := namespace(t, "kgpu")
	createClaim(t, ns, "wants-two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}})

	golden(t, "kubectl-gpu-nodes", runGPU(t, "nodes", node))
	golden(t, "kubectl-gpu-nodes-wide", runGPU(t, "nodes", node, "-o", "wide"))
	// health lists every node of the shared cluster: keep only this test's node.
	var mine []string
	for _, line := range strings.Split(runGPU(t, "health"), "\n") {
		if strings.HasPrefix(line, node+" ") {
			mine = append(mine, strings.Join(strings.Fields(line), " "))
		}
	}
	golden(t, "kubectl-gpu-health", strings.Join(mine, "\n")+"\n")
	age := regexp.MustCompile(`\s+\d+[smh]\s+`)
	golden(t, "kubectl-gpu-claims", age.ReplaceAllString(runGPU(t, "claims", "-n", ns), " <age> "))
}
