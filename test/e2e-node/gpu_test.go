//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gpuResource is the chart's devicePlugin.resourceName: the extended resource the agent's device
// plugin serves and the webhook adds to claim pods.
const gpuResource = corev1.ResourceName("gpu.scheduling/gpu")

// devScript prints the GPU device nodes the container has and its visible-devices variables,
// then stays up for exec.
const devScript = `echo "devs=$(cd /dev && ls -d nvidia[0-9]* 2>/dev/null | tr '\n' ' ')"; ` +
	`echo "ctl=$(ls /dev/nvidiactl 2>/dev/null)"; echo "nvidia=$NVIDIA_VISIBLE_DEVICES"; echo "cuda=$CUDA_VISIBLE_DEVICES"; sleep 3600`

// claimPod is a testbox pod of gpu-scheduler naming claim.
func claimPod(ns, name, claim string) *corev1.Pod {
	p := testboxPod(name, devScript)
	p.Namespace = ns
	p.Spec.NodeName = ""
	p.Spec.SchedulerName = "gpu-scheduler"
	p.Annotations = map[string]string{"gpu.scheduling/claim": claim}
	return p
}

// containerView is what a container reported about its GPUs.
type containerView struct {
	minors []int
	ctl    bool
	nvidia string
	cuda   string
}

var devLine = regexp.MustCompile(`(?m)^devs=(.*)$`)

func viewOf(t *testing.T, ns, name string) (containerView, error) {
	t.Helper()
	var logs string
	var err error
	for i := 0; i < 60; i++ {
		logs, err = kubectl(t, "logs", "-n", ns, name)
		if err == nil && strings.Contains(logs, "cuda=") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(logs, "cuda=") {
		return containerView{}, fmt.Errorf("pod %s/%s: no report in its log (%w): %q", ns, name, err, logs)
	}
	var v containerView
	if m := devLine.FindStringSubmatch(logs); m != nil {
		for _, f := range strings.Fields(m[1]) {
			minor, err := strconv.Atoi(strings.TrimPrefix(f, "nvidia"))
			if err == nil {
				v.minors = append(v.minors, minor)
			}
		}
	}
	slices.Sort(v.minors)
	for _, l := range strings.Split(logs, "\n") {
		switch {
		case strings.HasPrefix(l, "ctl="):
			v.ctl = strings.TrimPrefix(l, "ctl=") != ""
		case strings.HasPrefix(l, "nvidia="):
			v.nvidia = strings.TrimPrefix(l, "nvidia=")
		case strings.HasPrefix(l, "cuda="):
			v.cuda = strings.TrimPrefix(l, "cuda=")
		}
	}
	return v, nil
}

// chosenGPUs are the GPU IDs the scheduler wrote into the pod.
func chosenGPUs(p *corev1.Pod) []int {
	var ids []int
	for _, f := range strings.Split(p.Annotations["gpu.scheduling/gpu-ids"], ",") {
		if id, err := strconv.Atoi(f); err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// A 2-GPU claim pod's container has exactly the device nodes of its two GPUs (checked from
// inside the container), the visible-devices variables name two GPUs, and the kubelet counts
// them: allocatable 8, and kubectl describe node shows 2 in use. A pod without a claim sees none.
func TestTwoGPUPodSeesExactlyItsDevices(t *testing.T) {
	ns := "e2e-two"
	ensureNamespace(t, ns)
	createClaim(t, ns, "two", 2)
	ctx := context.Background()
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, claimPod(ns, "two", "two"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the claim pod: %v", err)
	}
	defer deleteNamespace(t, ns)
	p := waitPod(t, ns, "two", 3*time.Minute, "Running", running)
	if p.Spec.NodeName != env.node.Name() {
		t.Fatalf("the pod runs on %q, want the real node %s", p.Spec.NodeName, env.node.Name())
	}
	want := chosenGPUs(p)
	if len(want) != 2 {
		t.Fatalf("gpu.scheduling/gpu-ids = %q: want two GPUs", p.Annotations["gpu.scheduling/gpu-ids"])
	}
	v, err := viewOf(t, ns, "two")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v.minors, want) {
		t.Errorf("the container has /dev/nvidia%v, want exactly the scheduler's GPUs %v", v.minors, want)
	}
	if !v.ctl {
		t.Errorf("the container has no /dev/nvidiactl")
	}
	if n := len(strings.Split(v.nvidia, ",")); v.nvidia == "" || n != 2 {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q: want the two GPUs", v.nvidia)
	}
	node, err := env.cs.CoreV1().Nodes().Get(ctx, env.node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := node.Status.Allocatable[gpuResource]; q.Cmp(resource.MustParse("8")) != 0 {
		t.Errorf("the kubelet's allocatable %s = %s, want 8", gpuResource, q.String())
	}
	desc, err := kubectl(t, "describe", "node", env.node.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(string(gpuResource)) + `\s+2\s+2\s*$`).MatchString(desc[strings.Index(desc, "Allocated resources"):]) {
		t.Errorf("kubectl describe node does not show 2 %s in use:\n%s", gpuResource, desc[strings.Index(desc, "Allocated resources"):])
	}

	plain := testboxPod("no-claim", devScript)
	plain.Namespace = ns
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the pod without a claim: %v", err)
	}
	waitPod(t, ns, "no-claim", 2*time.Minute, "Running", running)
	nv, err := viewOf(t, ns, "no-claim")
	if err != nil {
		t.Fatal(err)
	}
	if len(nv.minors) > 0 || nv.ctl || nv.nvidia != "" {
		t.Errorf("a pod without a claim sees GPUs: /dev/nvidia%v ctl=%v NVIDIA_VISIBLE_DEVICES=%q", nv.minors, nv.ctl, nv.nvidia)
	}
}

// ResourceQuota on the GPU resource refuses the pod that would exceed it.
func TestResourceQuotaRefusesTheGPUPodOverIt(t *testing.T) {
	ns := "e2e-quota"
	ensureNamespace(t, ns)
	ctx := context.Background()
	defer deleteNamespace(t, ns)
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gpus", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests." + gpuResource: resource.MustParse("2")}},
	}
	if _, err := env.cs.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota controller must have computed the status before admission counts against it.
	waitQuota(t, ns, "gpus")
	createClaim(t, ns, "two", 2)
	createClaim(t, ns, "one", 1)
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, claimPod(ns, "two", "two"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the 2-GPU pod within the quota was refused: %v", err)
	}
	_, err := env.cs.CoreV1().Pods(ns).Create(ctx, claimPod(ns, "one", "one"), metav1.CreateOptions{})
	if err == nil {
		t.Fatalf("a third GPU was admitted past a quota of 2")
	}
	if !strings.Contains(err.Error(), "exceeded quota") || !strings.Contains(err.Error(), string(gpuResource)) {
		t.Errorf("refused, but not by the GPU quota: %v", err)
	}
}

func waitQuota(t *testing.T, ns, name string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		q, err := env.cs.CoreV1().ResourceQuotas(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && len(q.Status.Hard) > 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("ResourceQuota %s/%s has no status", ns, name)
}
