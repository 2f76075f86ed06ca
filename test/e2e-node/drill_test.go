//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// assertNoLeakedLeases fails for every GPU lease whose pod no longer exists (or is finished):
// the lease is the lock on the GPU, so a leaked one keeps a GPU from everyone.
func assertNoLeakedLeases(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	// Give the scheduler's cleanup a moment after the last pod went away.
	var leaked []string
	_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		leaked = leaked[:0]
		leases, err := env.cs.CoordinationV1().Leases(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "gpu.scheduling/node"})
		if err != nil {
			return false, nil
		}
		for _, l := range leases.Items {
			ns, name := l.Labels["gpu.scheduling/pod-namespace"], l.Labels["gpu.scheduling/pod-name"]
			if ns == "" || name == "" {
				continue // a shared lease names no single pod
			}
			p, err := env.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || string(p.UID) != l.Labels["gpu.scheduling/pod-uid"] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				leaked = append(leaked, fmt.Sprintf("%s (pod %s/%s)", l.Name, ns, name))
			}
		}
		return len(leaked) == 0, nil
	})
	if len(leaked) > 0 {
		t.Errorf("%d leaked GPU leases: %v", len(leaked), leaked)
	}
}

// startGPUPods starts claim pods of the given sizes in ns and waits for them to run.
func startGPUPods(t *testing.T, ns string, sizes ...int) {
	t.Helper()
	ensureNamespace(t, ns)
	for i, size := range sizes {
		name := fmt.Sprintf("g%d", i)
		createClaim(t, ns, name, size)
		if _, err := env.cs.CoreV1().Pods(ns).Create(context.Background(), claimPod(ns, name, name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sizes {
		waitPod(t, ns, fmt.Sprintf("g%d", i), 3*time.Minute, "Running", running)
	}
}

// afterDrill checks what every drill must end with: the running pods still see exactly their
// GPUs, the kubelet agrees, no GPU is held twice and no lease leaked.
func afterDrill(t *testing.T, ns string, pods int) {
	t.Helper()
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("g%d", i)
		p := waitPod(t, ns, name, 2*time.Minute, "Running", running)
		v, err := viewOf(t, ns, name)
		if err != nil {
			t.Error(err)
			continue
		}
		if want := chosenGPUs(p); fmt.Sprint(v.minors) != fmt.Sprint(want) {
			t.Errorf("after the drill pod %s sees /dev/nvidia%v, the scheduler chose %v", name, v.minors, want)
		}
	}
	assertCheckpointMatches(t)
	assertNoLeakedLeases(t)
}

func deleteNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	_ = env.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err != nil, nil
	})
}

// The kubelet restarts with GPU pods running: their allocations survive through its checkpoint
// and a new pod does not get their GPUs.
func TestDrillKubeletRestart(t *testing.T) {
	ns := "e2e-drill-kubelet"
	defer deleteNamespace(t, ns)
	startGPUPods(t, ns, 2, 2)
	restarted := time.Now()
	if err := env.node.RestartKubelet(context.Background()); err != nil {
		t.Fatalf("restarting the kubelet: %v", err)
	}
	// Until the agent's plugin registers again the restarted kubelet holds the resource as
	// unhealthy and refuses any pod asking for it (UnexpectedAdmissionError, "no healthy
	// devices present"); the drill is about the running pods' allocations, so the new pod comes
	// once the kubelet counts the GPUs again.
	waitAllocatable(t, restarted, 8, time.Minute)
	createClaim(t, ns, "g2", 4)
	if _, err := env.cs.CoreV1().Pods(ns).Create(context.Background(), claimPod(ns, "g2", "g2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	afterDrill(t, ns, 3)
}

// containerd restarts under running GPU pods: they keep running with their devices.
func TestDrillContainerdRestart(t *testing.T) {
	ns := "e2e-drill-containerd"
	defer deleteNamespace(t, ns)
	startGPUPods(t, ns, 1, 2)
	if err := env.node.RestartContainerd(context.Background()); err != nil {
		t.Fatalf("restarting containerd: %v", err)
	}
	afterDrill(t, ns, 2)
}

// The agent pod is deleted and its DaemonSet recreates it: the device plugin registers again
// and the running pods' allocations stand.
func TestDrillAgentPodRecreated(t *testing.T) {
	ns := "e2e-drill-agent"
	defer deleteNamespace(t, ns)
	startGPUPods(t, ns, 2)
	ctx := context.Background()
	pods, err := env.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("finding the agent pod: %v (%d found)", err, len(pods.Items))
	}
	old := pods.Items[0].UID
	if err := env.cs.CoreV1().Pods(releaseNS).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := env.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.UID != old && running(&p) {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						return true, nil
					}
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no new Ready agent pod after 3m")
	}
	createClaim(t, ns, "g1", 2)
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, claimPod(ns, "g1", "g1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	afterDrill(t, ns, 2)
}

// Draining the node evicts its GPU pods: their GPUs and leases are freed, nothing leaks.
func TestDrillDrainNode(t *testing.T) {
	ns := "e2e-drill-drain"
	defer deleteNamespace(t, ns)
	startGPUPods(t, ns, 1, 2)
	out, err := kubectl(t, "drain", env.node.Name(), "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--pod-selector", "!app.kubernetes.io/instance", "--timeout=3m")
	defer func() { _, _ = kubectl(t, "uncordon", env.node.Name()) }()
	if err != nil {
		t.Fatalf("kubectl drain: %v\n%s", err, out)
	}
	ctx := context.Background()
	pods, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == env.node.Name() && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			t.Errorf("pod %s still runs on the drained node", p.Name)
		}
	}
	assertNoLeakedLeases(t)
}

// waitAllocatable waits until the real node's allocatable GPU resource is want in a status the
// kubelet posted after since (the status before a restart still shows the old count), logging
// how long that took.
func waitAllocatable(t *testing.T, since time.Time, want int64, timeout time.Duration) {
	t.Helper()
	began := time.Now()
	var got resource.Quantity
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := env.cs.CoreV1().Nodes().Get(ctx, env.node.Name(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = n.Status.Allocatable[gpuResource]
		fresh := false
		for _, c := range n.Status.Conditions {
			fresh = fresh || (c.Type == corev1.NodeReady && c.LastHeartbeatTime.After(since))
		}
		return fresh && got.Value() == want, nil
	})
	if err != nil {
		t.Fatalf("the node's allocatable %s is %s after %s, want %d", gpuResource, got.String(), timeout, want)
	}
	t.Logf("allocatable %s back to %d after %s", gpuResource, want, time.Since(began).Round(100*time.Millisecond))
}

// mockFaultPort is where the agent's simulated server takes faults (--mock-fault-address in
// helmInstallArgs).
const mockFaultPort = 9403

// injectFault makes GPU gpu of the real node's simulated server fail (or recover), through the
// agent pod's --mock-fault-address.
func injectFault(t *testing.T, gpu int, fault string) {
	t.Helper()
	ctx := context.Background()
	pods, err := env.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("finding the agent pod's IP: %v (%d found)", err, len(pods.Items))
	}
	u := fmt.Sprintf("http://%s/fault", net.JoinHostPort(pods.Items[0].Status.PodIP, strconv.Itoa(mockFaultPort)))
	resp, err := http.PostForm(u, url.Values{"gpu": {strconv.Itoa(gpu)}, "fault": {fault}})
	if err != nil {
		t.Fatalf("injecting %s into GPU %d: %v", fault, gpu, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("injecting %s into GPU %d: %s %s", fault, gpu, resp.Status, body)
	}
}

// A GPU turns unhealthy: the kubelet's allocatable drops, a claim that needs it waits with the
// reason, a claim that fits the healthy GPUs runs on them and never on the lost one, and once
// the GPU recovers the waiting claim is placed.
func TestDrillGPUUnhealthy(t *testing.T) {
	ns := "e2e-drill-unhealthy"
	defer deleteNamespace(t, ns)
	ctx := context.Background()
	startGPUPods(t, ns, 1)
	g0, err := env.cs.CoreV1().Pods(ns).Get(ctx, "g0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for slices.Contains(chosenGPUs(g0), bad) {
		bad++
	}
	since := time.Now()
	injectFault(t, bad, "lost")
	recovered := false
	defer func() {
		if !recovered {
			injectFault(t, bad, "recover")
		}
	}()
	waitAllocatable(t, since, 7, 2*time.Minute)

	// 8 GPUs, 1 held by g0, 1 lost: 7 would fit only with the lost one.
	createClaim(t, ns, "seven", 7)
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, claimPod(ns, "seven", "seven"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "seven", time.Minute, "unschedulable, naming healthy GPUs", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "healthy") {
				return true
			}
		}
		return false
	})
	createClaim(t, ns, "six", 6)
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, claimPod(ns, "six", "six"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	six := waitPod(t, ns, "six", 3*time.Minute, "Running", running)
	if slices.Contains(chosenGPUs(six), bad) {
		t.Errorf("pod six was placed on lost GPU %d: %v", bad, chosenGPUs(six))
	}
	if v, err := viewOf(t, ns, "six"); err != nil {
		t.Error(err)
	} else if slices.Contains(v.minors, bad) || !slices.Equal(v.minors, chosenGPUs(six)) {
		t.Errorf("pod six sees /dev/nvidia%v, chosen %v, lost GPU %d", v.minors, chosenGPUs(six), bad)
	}

	// The GPU recovers and six goes away: seven fits, on the recovered GPU among others.
	since = time.Now()
	injectFault(t, bad, "recover")
	recovered = true
	waitAllocatable(t, since, 8, 2*time.Minute)
	if err := env.cs.CoreV1().Pods(ns).Delete(ctx, "six", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	seven := waitPod(t, ns, "seven", 3*time.Minute, "Running", running)
	if !slices.Contains(chosenGPUs(seven), bad) {
		t.Errorf("pod seven got %v after GPU %d recovered; with g0 holding %v it needs the recovered one", chosenGPUs(seven), bad, chosenGPUs(g0))
	}
	if err := env.cs.CoreV1().Pods(ns).Delete(ctx, "seven", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	afterDrill(t, ns, 1)
}

// The scheduler's leader pod is killed in a burst of 200 one-GPU pods: the standby takes over,
// every pod runs on exactly its GPU, no two running pods ever hold one GPU (sampled throughout),
// and no lease is left behind.
func TestDrillSchedulerLeaderKilledInBurst(t *testing.T) {
	ns := "e2e-drill-leader"
	ensureNamespace(t, ns)
	defer deleteNamespace(t, ns)
	ctx := context.Background()
	const pods = 200
	for i := 0; i < pods; i++ {
		createClaim(t, ns, fmt.Sprintf("c%d", i), 1)
	}
	// Sample the running pods' GPUs until the burst is over.
	stopWatch := make(chan struct{})
	watchDone := make(chan []string)
	go func() {
		var doubles []string
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopWatch:
				watchDone <- doubles
				return
			case <-tick.C:
			}
			list, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			holder := map[int]string{}
			for _, p := range list.Items {
				if p.Status.Phase != corev1.PodRunning {
					continue
				}
				for _, id := range chosenGPUs(&p) {
					if other, ok := holder[id]; ok {
						doubles = append(doubles, fmt.Sprintf("GPU %d: %s and %s", id, other, p.Name))
					}
					holder[id] = p.Name
				}
			}
		}
	}()
	errs := make(chan error, pods)
	var wg sync.WaitGroup
	for i := 0; i < pods; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := claimPod(ns, fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i))
			p.Spec.Containers[0].Command = []string{"sh", "-c", devScriptOnce + "; sleep 1"}
			if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Kill the leader once the burst is under way.
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound >= 20, nil
	})
	lock, err := env.cs.CoordinationV1().Leases(releaseNS).Get(ctx, release, metav1.GetOptions{})
	if err != nil || lock.Spec.HolderIdentity == nil {
		t.Fatalf("reading the scheduler's leader-election lease %s/%s: %v", releaseNS, release, err)
	}
	leader, _, _ := strings.Cut(*lock.Spec.HolderIdentity, "_")
	if err := env.cs.CoreV1().Pods(releaseNS).Delete(ctx, leader, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatalf("killing the leader pod %s: %v", leader, err)
	}
	t.Logf("killed the scheduler leader %s", leader)
	var failed []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		done := 0
		failed = failed[:0]
		for _, p := range list.Items {
			switch p.Status.Phase {
			case corev1.PodSucceeded:
				done++
			case corev1.PodFailed:
				done++
				failed = append(failed, fmt.Sprintf("%s (%s: %s)", p.Name, p.Status.Reason, p.Status.Message))
			}
		}
		return done == pods, nil
	})
	close(stopWatch)
	doubles := <-watchDone
	if err != nil {
		out, _ := kubectl(t, "get", "pods", "-n", ns, "-o", "wide")
		t.Fatalf("not all %d pods finished after 10m:\n%s", pods, out)
	}
	if len(failed) > 0 {
		t.Errorf("%d pods failed: %v", len(failed), failed)
	}
	if len(doubles) > 0 {
		t.Errorf("GPUs held by two running pods at once: %v", doubles)
	}
	list, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	swaps := 0
	for _, p := range list.Items {
		v, err := viewOf(t, ns, p.Name)
		if err != nil {
			t.Error(err)
			continue
		}
		if want := chosenGPUs(&p); len(want) != 1 || !slices.Equal(v.minors, want) {
			swaps++
			t.Errorf("pod %s saw /dev/nvidia%v, the scheduler chose %v", p.Name, v.minors, want)
		}
	}
	t.Logf("%d pods through a leader kill: %d double-held GPUs sampled, %d pods on other GPUs than chosen", pods, len(doubles), swaps)
	assertNoLeakedLeases(t)
}
