//go:build integration

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	gpuclient "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// shared is the one control plane of this package's integration tests (with the stock
// scheduler). Starting one per test would multiply the cost on two cores.
var shared *Cluster

// crashChildEnv makes the test binary act as a caller that starts a cluster and then hangs until
// it is killed (TestCallerCrashLeavesNoOrphans).
const crashChildEnv = "GPU_SIM_TEST_CRASH_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	began := time.Now()
	c, err := Start(ctx, Config{Name: "itest", StockScheduler: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test cluster:", err)
		os.Exit(1)
	}
	fmt.Printf("control plane ready in %s\n", time.Since(began).Round(time.Millisecond))
	shared = c
	code := m.Run()
	if err := stopAndCheck(c); err != nil {
		fmt.Fprintln(os.Stderr, "tearing down the test cluster:", err)
		code = 1
	}
	os.Exit(code)
}

// stopAndCheck stops a cluster and verifies by PID that none of its processes is left and its
// work directory is gone.
func stopAndCheck(c *Cluster) error {
	procs := c.Processes()
	state := c.state
	if err := c.Stop(); err != nil {
		return err
	}
	var errs []error
	for _, p := range state.Processes {
		if alive(p.PID, p.StartTime) {
			errs = append(errs, fmt.Errorf("%s (pid %d) still running after Stop", p.Name, p.PID))
		}
	}
	if len(procs) < 4 {
		errs = append(errs, fmt.Errorf("only %d processes recorded: %+v", len(procs), procs))
	}
	if _, err := os.Stat(c.WorkDir()); !os.IsNotExist(err) {
		errs = append(errs, fmt.Errorf("work dir %s not removed (%w)", c.WorkDir(), err))
	}
	return errors.Join(errs...)
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(shared.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestComponentsRunOnLoopback(t *testing.T) {
	names := map[string]bool{}
	for _, p := range shared.Processes() {
		names[p.Name] = true
		if !p.Running {
			t.Errorf("%s (pid %d) is not running", p.Name, p.PID)
		}
	}
	for _, want := range []string{ComponentEtcd, ComponentAPIServer, ComponentControllerManager, ComponentKwok, ComponentScheduler} {
		if !names[want] {
			t.Errorf("component %s not started", want)
		}
	}
	// Nothing listens on a wildcard address.
	for _, proto := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, port := range []int{shared.ports.apiServer, shared.ports.etcdClient, shared.ports.controllerManager, shared.ports.scheduler, shared.ports.kwok} {
			if listensOnWildcard(t, proto, port) {
				t.Errorf("port %d is bound to a wildcard address (%s)", port, proto)
			}
		}
	}
}

func TestInstallCRDs(t *testing.T) {
	ctx := t.Context()
	if err := shared.InstallCRDs(ctx, filepath.Join("..", "..", "charts", "gpu-scheduler", "crds")); err != nil {
		t.Fatal(err)
	}
	gc, err := gpuclient.NewForConfig(shared.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	claim := &gpuv1.GpuClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "two-gpus", Namespace: metav1.NamespaceDefault},
		Spec:       gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{Count: 2}},
	}
	if _, err := gc.GpuV1().GpuClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a GpuClaim after installing the CRDs: %v", err)
	}
	bad := claim.DeepCopy()
	bad.Name, bad.Spec.Devices.Count = "zero-gpus", 0
	if _, err := gc.GpuV1().GpuClaims(bad.Namespace).Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a claim for 0 GPUs: got %v, want the CRD schema to reject it", err)
	}
}

func TestGPUNodesReadyAndStockSchedulerPlacesPods(t *testing.T) {
	ctx := t.Context()
	const nodes = 200
	pool := NodePool{Name: "itest-a100", Count: nodes, GPUsPerNode: 8, Topology: "dgx-a100",
		Labels: map[string]string{"zone": "z1"}}
	began := time.Now()
	if err := shared.CreateNodePool(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := shared.WaitNodesReady(ctx, PoolSelector(pool.Name), nodes, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d GPU nodes Ready in %s", nodes, time.Since(began).Round(time.Millisecond))

	cs := clientset(t)
	n, err := cs.CoreV1().Nodes().Get(ctx, NodeName(pool.Name, 0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gpus := n.Status.Allocatable[ResourceGPU]; gpus.Value() != 8 {
		t.Errorf("node %s: allocatable %s = %s after kwok initialised it, want 8", n.Name, ResourceGPU, gpus.String())
	}
	if n.Labels[gpuv1.LabelTopology] != "dgx-a100" || n.Labels[LabelPool] != pool.Name {
		t.Errorf("node %s labels %v", n.Name, n.Labels)
	}

	// Plain pods for the stock scheduler: four running ones asking for GPUs and one with a run
	// time, which kwok completes.
	for i := range 4 {
		mustCreatePod(t, cs, gpuPod(fmt.Sprintf("gpu-%d", i), 4, ""))
	}
	mustCreatePod(t, cs, gpuPod("short-job", 1, "2s"))
	for i := range 4 {
		waitPod(t, cs, fmt.Sprintf("gpu-%d", i), "Running on a node", func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning
		})
	}
	waitPod(t, cs, "short-job", "Succeeded after its duration", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded
	})

	// A pod asking for more GPUs than any node has stays Pending, unscheduled.
	mustCreatePod(t, cs, gpuPod("too-big", 9, ""))
	waitPod(t, cs, "too-big", "marked unschedulable", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})

	// Deletion goes through kwok's pod-delete stage: the pod disappears without a kubelet.
	if err := cs.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, "gpu-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "gpu-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("deleted pod gpu-0 still present: %v", err)
	}
}

func gpuPod(name string, gpus int64, duration string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "registry.invalid/cuda:latest",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}},
		}}},
	}
	if duration != "" {
		p.Annotations = map[string]string{AnnotationDuration: duration}
	}
	return p
}

func mustCreatePod(t *testing.T, cs kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
}

func waitPod(t *testing.T, cs kubernetes.Interface, name, what string, cond func(*corev1.Pod) bool) {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		if last != nil {
			t.Fatalf("pod %s not %s: node %q phase %s conditions %+v", name, what, last.Spec.NodeName, last.Status.Phase, last.Status.Conditions)
		}
		t.Fatalf("pod %s not %s: %v", name, what, err)
	}
}

func TestPortInUseIsReported(t *testing.T) {
	_, err := Start(t.Context(), Config{Name: "clash", APIServerPort: shared.ports.apiServer})
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("starting on the shared cluster's apiserver port: got %v, want ErrPortInUse", err)
	}
}

// A second cluster runs beside the first (as two test packages do) and stops cleanly.
func TestSecondClusterCoexistsAndStopsCleanly(t *testing.T) {
	c, err := Start(t.Context(), Config{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ports.apiServer == shared.ports.apiServer || c.WorkDir() == shared.WorkDir() {
		t.Errorf("second cluster shares port %d or dir %s with the first", c.ports.apiServer, c.WorkDir())
	}
	if err := c.CreateNodePool(t.Context(), NodePool{Name: "second", Count: 3, GPUsPerNode: 4}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodesReady(t.Context(), PoolSelector("second"), 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := stopAndCheck(c); err != nil {
		t.Fatal(err)
	}
	// The first cluster did not notice.
	if _, err := clientset(t).Discovery().ServerVersion(); err != nil {
		t.Errorf("shared cluster unhealthy after the second stopped: %v", err)
	}
}

// Between two simulated runs etcd and kube-apiserver are restarted on the same data: the nodes
// are still there and Ready, the apiserver answers again, kube-controller-manager and kwok keep
// their processes, and Stop ends the new ones.
func TestRestartEtcdAndAPIServerKeepsTheData(t *testing.T) {
	c, err := Start(t.Context(), Config{Name: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	if err := c.CreateNodePool(t.Context(), NodePool{Name: "kept", Count: 3, GPUsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodesReady(t.Context(), PoolSelector("kept"), 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	pids := func() map[string]int {
		m := map[string]int{}
		for _, p := range c.Processes() {
			if p.Running {
				m[p.Name] = p.PID
			}
		}
		return m
	}
	before := pids()
	if err := c.RestartEtcdAndAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	after := pids()
	for _, name := range []string{ComponentEtcd, ComponentAPIServer} {
		if after[name] == 0 || after[name] == before[name] {
			t.Errorf("%s: pid %d before, %d after the restart: want a new running process", name, before[name], after[name])
		}
	}
	for _, name := range []string{ComponentControllerManager, ComponentKwok} {
		if after[name] != before[name] {
			t.Errorf("%s: pid %d before, %d after: want the same process", name, before[name], after[name])
		}
	}
	if len(c.Processes()) != len(before) {
		t.Errorf("%d processes listed after the restart, want %d (the same slots)", len(c.Processes()), len(before))
	}
	// The data survived, and the restarted apiserver serves it.
	if err := c.WaitNodesReady(t.Context(), PoolSelector("kept"), 3, time.Minute); err != nil {
		t.Fatalf("nodes after the restart: %v", err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("writing after the restart: %v", err)
	}
	if err := stopAndCheck(c); err != nil {
		t.Fatal(err)
	}
}

// The caller of Start is killed with SIGKILL: its components die with it (parent-death signal)
// and the next Start clears the directory it left.
func TestCallerCrashLeavesNoOrphans(t *testing.T) {
	dir := filepath.Join(tempBase(), tempDirPrefix+"crash-"+strconv.Itoa(os.Getpid()))
	_ = os.RemoveAll(dir)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+dir)
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	defer func() { _ = child.Process.Kill(); <-exited }()

	var st *State
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("crash child exited before its cluster was ready")
		default:
		}
		s, err := ReadState(dir)
		if err != nil || !s.Ready {
			return false, nil
		}
		st = s
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range st.Processes {
			if alive(p.PID, p.StartTime) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for _, p := range st.Processes {
			if alive(p.PID, p.StartTime) {
				t.Errorf("%s (pid %d) outlived its killed caller", p.Name, p.PID)
				_ = killRecorded(p.PID, p.StartTime, time.Second)
			}
		}
	}
	sweepStale(t.Context(), tempBase())
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("work dir %s of the crashed caller not cleaned up: %v", dir, err)
		_ = os.RemoveAll(dir)
	}
}

// crashChild starts a cluster in dir and waits to be killed.
func crashChild(dir string) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	// The directory name carries the temp prefix, so the parent's sweep finds it.
	if _, err := Start(ctx, Config{Name: "crash", WorkDir: dir}); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(1)
	}
	select {}
}

// listensOnWildcard reports whether /proc/net/tcp{,6} shows a listener on port at 0.0.0.0 or ::.
func listensOnWildcard(t *testing.T, procFile string, port int) bool {
	t.Helper()
	b, err := os.ReadFile(procFile)
	if err != nil {
		return false
	}
	hexPort := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" { // 0A: LISTEN
			continue
		}
		local := f[1]
		if len(local) >= 5 && local[len(local)-5:] == hexPort {
			addr := local[:len(local)-5]
			if addr == "00000000" || addr == "00000000000000000000000000000000" {
				return true
			}
		}
	}
	return false
}
