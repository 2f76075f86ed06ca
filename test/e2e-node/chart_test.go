//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// helmInstallArgs is docs/install.md's command with the values it gives for a node without
// GPUs ("Try the chart on a real node"): the agent reports a simulated server over the node's
// fake device nodes, and the device plugin (the chart's default mode) hands them out. More --set flags come from
// E2E_NODE_HELM_ARGS (space-separated), so that a documented change is tried without a rebuild.
func helmInstallArgs() []string {
	args := []string{"install", release, "charts/gpu-scheduler", "--namespace", releaseNS, "--create-namespace",
		"--set", "agent.nvml.mode=hostPath", "--set", "agent.extraArgs={--mock-topology=dgx-h100}",
		// Beyond the docs: the unhealthy-GPU drill makes a simulated GPU fail through the agent.
		"--set", "agent.extraArgs={--mock-topology=dgx-h100,--mock-fault-address=:9403}"}
	if extra := strings.Fields(os.Getenv("E2E_NODE_HELM_ARGS")); len(extra) > 0 {
		args = append(args, extra...)
	}
	return args
}

// The chart installed as a user installs it (docs/install.md, with the images of make images
// loaded into the node's containerd): every component a real pod that becomes Ready, the
// scheduler with its two replicas, the agent DaemonSet on the real node.
func TestChartInstalledAsDocumented(t *testing.T) {
	out, err := command(env.helm, helmInstallArgs()...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(helmInstallArgs(), " "), err, out)
	}
	ctx := context.Background()
	var notReady []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		deps, err := env.cs.AppsV1().Deployments(releaseNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range deps.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			if d.Status.ReadyReplicas != want {
				notReady = append(notReady, fmt.Sprintf("deployment %s: %d/%d ready", d.Name, d.Status.ReadyReplicas, want))
			}
		}
		dss, err := env.cs.AppsV1().DaemonSets(releaseNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		if len(dss.Items) == 0 {
			notReady = append(notReady, "no agent DaemonSet")
		}
		for _, d := range dss.Items {
			if d.Status.DesiredNumberScheduled == 0 || d.Status.NumberReady != d.Status.DesiredNumberScheduled {
				notReady = append(notReady, fmt.Sprintf("daemonset %s: %d/%d ready", d.Name, d.Status.NumberReady, d.Status.DesiredNumberScheduled))
			}
		}
		return len(notReady) == 0 && len(deps.Items) > 0, nil
	})
	if err != nil {
		pods, _ := kubectl(t, "get", "pods", "-n", releaseNS, "-o", "wide")
		events, _ := kubectl(t, "get", "events", "-n", releaseNS, "--sort-by=.lastTimestamp")
		t.Fatalf("the release is not Ready after 4m: %s\n%s\n%s", strings.Join(notReady, "; "), pods, lastLines(events, 25))
	}
	scheds, err := env.cs.AppsV1().Deployments(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=scheduler"})
	if err != nil || len(scheds.Items) != 1 {
		t.Fatalf("the scheduler's deployment: %v (%d found)", err, len(scheds.Items))
	}
	if n := scheds.Items[0].Status.ReadyReplicas; n != 2 {
		t.Errorf("scheduler: %d ready replicas, want 2", n)
	}
	pods, err := env.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != env.node.Name() {
			t.Errorf("pod %s runs on %q, not on the real node", p.Name, p.Spec.NodeName)
		}
	}
}

var gpuClaimGVR = schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuclaims"}

func createClaim(t *testing.T, ns, name string, count int) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.node.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	claim := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gpu.scheduling/v1", "kind": "GpuClaim",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"devices": map[string]any{"count": int64(count)}},
	}}
	if _, err := dyn.Resource(gpuClaimGVR).Namespace(ns).Create(context.Background(), claim, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating GpuClaim %s/%s: %v", ns, name, err)
	}
}

// The apiserver reaches the webhook through its Service (kube-proxy's rules on this machine):
// a claim pod comes back from the create already changed by the webhook.
func TestWebhookReachedThroughItsService(t *testing.T) {
	ensureNamespace(t, testNS)
	createClaim(t, testNS, "webhook-probe", 1)
	pod := testboxPod("webhook-probe", "sleep 1")
	pod.Spec.NodeName = ""
	pod.Annotations = map[string]string{"gpu.scheduling/claim": "webhook-probe"}
	pod.Spec.SchedulerName = "gpu-scheduler"
	got, err := env.cs.CoreV1().Pods(testNS).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("creating a claim pod (dry run) through the webhook: %v", err)
	}
	c := got.Spec.Containers[0]
	_, hasGPU := c.Resources.Limits[gpuResource]
	hasEnv := false
	for _, e := range c.Env {
		hasEnv = hasEnv || e.Name == "CUDA_VISIBLE_DEVICES" || e.Name == "NVIDIA_VISIBLE_DEVICES"
	}
	if !hasGPU && !hasEnv {
		t.Errorf("the claim pod came back unchanged: the webhook was not reached (limits %v, env %v)", c.Resources.Limits, c.Env)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
