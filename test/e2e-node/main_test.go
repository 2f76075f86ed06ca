//go:build e2enode

// Package e2enode runs the chart on a real node of this machine (package node): a real kubelet
// and containerd, real containers, the chart installed with helm as docs/install.md says, and
// checks from inside the containers. make e2e-node runs it; it needs root and cgroups and skips
// with one line naming what is missing where the machine has neither (a failure when
// GPU_SCHEDULER_REQUIRE_NODE=1, as in CI).
package e2enode

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/test/e2e-node/node"
)

// The release as docs/install.md installs it.
const (
	release   = "gpu-scheduler"
	releaseNS = "gpu-scheduler"
	testNS    = "e2e-node"
	testImage = "gpu-scheduler.local/testbox:dev"
)

var env struct {
	node    *node.Node
	cs      kubernetes.Interface
	root    string
	kubectl string
	helm    string
}

func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	if err := node.CanHost(); err != nil {
		if os.Getenv("GPU_SCHEDULER_REQUIRE_NODE") == "1" {
			fmt.Printf("FAIL e2e-node: %v (GPU_SCHEDULER_REQUIRE_NODE=1: this machine must host the node)\n", err)
			os.Exit(1)
		}
		fmt.Printf("SKIP e2e-node: %v\n", err)
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := klog.NewContext(context.Background(), klog.Background())
	root, err := os.Getwd()
	if err == nil {
		root, err = filepath.Abs(filepath.Join(root, "..", ".."))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node:", err)
		return 1
	}
	env.root = root
	env.kubectl = filepath.Join(root, "_output", "bin", "kubectl")
	env.helm = filepath.Join(root, "_output", "bin", "helm")
	began := time.Now()
	n, err := node.Up(ctx, node.Config{GPUs: node.DefaultGPUs, Labels: map[string]string{
		"nvidia.com/gpu.present": "true",
		"gpu.scheduling/managed": "true",
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node: bringing the node up:", err)
		return 1
	}
	fmt.Printf("e2e-node: node %s Ready in %s\n", n.Name(), time.Since(began).Round(time.Second))
	env.node, env.cs = n, n.Client
	code := m.Run()
	if err := n.Down(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node: tearing the node down:", err)
		code = 1
	}
	if left := n.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e-node: left behind after tear-down:\n  %s\n", strings.Join(left, "\n  "))
		code = 1
	} else {
		fmt.Println("e2e-node: tear-down left nothing behind")
	}
	return code
}

// kubectl runs kubectl against the node's cluster and returns its stdout.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return command(env.kubectl, args...)
}

func command(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.node.Kubeconfig())
	cmd.Dir = env.root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := env.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// testboxPod is a pod on the real node running the test image's shell.
func testboxPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: corev1.PodSpec{
			NodeName:                      env.node.Name(),
			TerminationGracePeriodSeconds: new(int64),
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "box", Image: testImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
}

// waitPod waits until cond holds for the pod, returning it.
func waitPod(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		desc, _ := kubectl(t, "describe", "pod", "-n", ns, name)
		t.Fatalf("pod %s/%s not %s after %s; kubectl describe:\n%s", ns, name, what, timeout, desc)
	}
	return last
}

func running(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}
