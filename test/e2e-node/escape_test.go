//go:build e2enode

package e2enode

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// refusedOrNothing creates pod and passes when the apiserver refuses it with a message naming
// one of words, or when it runs and its container sees no GPU device node.
func refusedOrNothing(t *testing.T, pod *corev1.Pod, words ...string) {
	t.Helper()
	ctx := context.Background()
	_, err := env.cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		for _, w := range words {
			if strings.Contains(err.Error(), w) {
				t.Logf("refused: %v", err)
				return
			}
		}
		t.Fatalf("refused, but the message names none of %q: %v", words, err)
	}
	waitPod(t, pod.Namespace, pod.Name, 2*time.Minute, "Running", running)
	v, err := viewOf(t, pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.minors) > 0 || v.ctl {
		t.Errorf("pod %s was admitted and its container sees GPUs: /dev/nvidia%v ctl=%v", pod.Name, v.minors, v.ctl)
	}
}

// Ways around the device plugin: none gives a container a GPU it was not allocated.
func TestEscapesAreRefusedOrGetNothing(t *testing.T) {
	ns := "e2e-escapes"
	ctx := context.Background()
	_, err := env.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer deleteNamespace(t, ns)

	t.Run("sets NVIDIA_VISIBLE_DEVICES itself", func(t *testing.T) {
		p := testboxPod("env-all", devScript)
		p.Namespace = ns
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		refusedOrNothing(t, p, "NVIDIA_VISIBLE_DEVICES")
	})
	t.Run("mounts /dev/nvidia0", func(t *testing.T) {
		p := testboxPod("hostpath", devScript)
		p.Namespace = ns
		p.Spec.Volumes = []corev1.Volume{{Name: "gpu", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/nvidia0"}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "gpu", MountPath: "/dev/nvidia0"}}
		// Refused: a hostPath of a GPU's device node is the GPU without an allocation.
		ctx := context.Background()
		_, err := env.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			t.Fatalf("a pod mounting the host's /dev/nvidia0 was admitted")
		}
		if !strings.Contains(err.Error(), "nvidia") && !strings.Contains(err.Error(), "hostPath") {
			t.Errorf("refused, but the message names neither the device nor hostPath: %v", err)
		}
	})
	t.Run("privileged where the namespace forbids it", func(t *testing.T) {
		p := testboxPod("privileged", devScript)
		p.Namespace = ns
		yes := true
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
		_, err := env.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			t.Fatalf("a privileged pod was admitted in a namespace enforcing baseline")
		}
		if !strings.Contains(err.Error(), "privileged") {
			t.Errorf("refused, but not for being privileged: %v", err)
		}
	})
	t.Run("ephemeral container naming GPUs", func(t *testing.T) {
		p := testboxPod("debug-target", "sleep 3600")
		p.Namespace = ns
		if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPod(t, ns, "debug-target", 2*time.Minute, "Running", running)
		got.Spec.EphemeralContainers = append(got.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: testImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", devScript},
				Env:     []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0,1"}},
			},
		})
		_, err := env.cs.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, "debug-target", got, metav1.UpdateOptions{})
		if err != nil {
			if !strings.Contains(err.Error(), "NVIDIA_VISIBLE_DEVICES") && !strings.Contains(err.Error(), "GPU") {
				t.Errorf("refused, but the message names no GPU: %v", err)
			}
			return
		}
		// Admitted: the debug container must see no GPU device.
		var out string
		for i := 0; i < 120; i++ {
			out, err = kubectl(t, "logs", "-n", ns, "debug-target", "-c", "debug")
			if err == nil && strings.Contains(out, "cuda=") {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !strings.Contains(out, "devs= \n") && !strings.Contains(out, "devs=\n") {
			t.Errorf("the ephemeral container sees GPU device nodes: %q", out)
		}
	})
}
