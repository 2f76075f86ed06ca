//go:build e2enode

package e2enode

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/test/e2e-node/node"
)

// A plain pod on the real node: it runs, gets an address on our bridge, reaches the apiserver
// through the "kubernetes" Service (kube-proxy's rules), and kubectl logs and exec reach it
// through the kubelet.
func TestPlainPodRunsOnTheRealNode(t *testing.T) {
	ensureNamespace(t, testNS)
	ctx := context.Background()
	pod := testboxPod("plain", "echo started; nc -w 5 10.96.0.1 443 </dev/null && echo apiserver-reachable; sleep 3600")
	if _, err := env.cs.CoreV1().Pods(testNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	defer func() { _ = env.cs.CoreV1().Pods(testNS).Delete(ctx, "plain", metav1.DeleteOptions{}) }()
	p := waitPod(t, testNS, "plain", 2*time.Minute, "Running", running)

	_, subnet, _ := net.ParseCIDR(node.DefaultSubnet)
	if ip := net.ParseIP(p.Status.PodIP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("pod IP %q is not on the node's bridge subnet %s", p.Status.PodIP, node.DefaultSubnet)
	}
	var logs string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		logs, _ = kubectl(t, "logs", "-n", testNS, "plain")
		if strings.Contains(logs, "apiserver-reachable") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(logs, "started") {
		t.Errorf("kubectl logs did not reach the container: %q", logs)
	}
	if !strings.Contains(logs, "apiserver-reachable") {
		t.Errorf("the pod did not reach the apiserver through the kubernetes Service (10.96.0.1:443); logs: %q", logs)
	}
	out, err := kubectl(t, "exec", "-n", testNS, "plain", "--", "cat", "/etc/hostname")
	if err != nil || strings.TrimSpace(out) != "plain" {
		t.Errorf("kubectl exec: %q, %v; want the pod's hostname", out, err)
	}
}
