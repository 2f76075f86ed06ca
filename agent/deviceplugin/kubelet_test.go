package deviceplugin_test

// These tests run the kubelet's own device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager)
// in the test process against the plugin on mock GPUs, over the real unix-socket registration.
// The manager only serves /var/lib/kubelet/device-plugins/kubelet.sock, so TestMain runs the
// tests in a private mount namespace with a tmpfs over /var/lib: nothing on the machine is touched
// and parallel runs do not meet.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/agent/deviceplugin"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

const nsEnv = "GPU_SCHEDULER_DEVICEPLUGIN_TEST_NS"

func TestMain(m *testing.M) {
	if os.Getenv(nsEnv) == "" {
		args := []string{"--mount", "--propagation", "private"}
		if os.Getuid() != 0 {
			args = append(args, "--user", "--map-root-user")
		}
		cmd := exec.Command("unshare", append(append(args, os.Args[0]), os.Args[1:]...)...)
		cmd.Env = append(os.Environ(), nsEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			fmt.Fprintf(os.Stderr, "running the tests in a private mount namespace (unshare --mount) failed: %v\n", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	if err := syscall.Mount("tmpfs", "/var/lib", "tmpfs", 0, "size=16m"); err != nil {
		fmt.Fprintf(os.Stderr, "mounting a tmpfs over /var/lib in the test's mount namespace: %v\n", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

const (
	nodeName = "node-a"
	resName  = deviceplugin.DefaultResourceName
)

// fataler is what the node harness needs of a test: a *testing.T in the Go tests, a godog
// step's T in the node.feature scenarios (node_feature_test.go).
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// node is one node: the pods bound to it, the kubelet's device manager and our plugin.
type node struct {
	t       fataler
	pods    cache.Indexer
	mu      sync.Mutex
	active  map[types.UID]*corev1.Pod
	gpus    []deviceplugin.GPU
	cdiDir  string
	mgr     *devicemanager.ManagerImpl
	plugin  *deviceplugin.Plugin
	stopPlg context.CancelFunc
	plgDone chan struct{}
}

func newNode(t *testing.T) *node {
	t.Helper()
	return newNodeWith(t, t.Cleanup)
}

// newNodeWith starts a node whose failures go to t; cleanup registers its teardown. Its GPUs
// are the mock pcie-nvlink-pairs server's, whose device minors are not their indexes (GPU 1 is
// /dev/nvidia3), so every admission also checks that a GPU is handed its own device node.
func newNodeWith(t fataler, cleanup func(func())) *node {
	t.Helper()
	srv, err := mock.New(mock.PCIeNVLinkPairs, mock.WithSeed(nodeName))
	if err != nil {
		t.Fatal(err)
	}
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var gpus []deviceplugin.GPU
	for _, d := range devs {
		uuid, err := d.UUID()
		if err != nil {
			t.Fatal(err)
		}
		minor, err := d.Minor()
		if err != nil {
			t.Fatal(err)
		}
		gpus = append(gpus, deviceplugin.GPU{Index: d.Index(), UUID: uuid, Minor: minor, Healthy: true, NUMANode: -1})
	}
	return startNode(t, cleanup, gpus, "")
}

// startNode starts the kubelet's device manager and the plugin over gpus; cdiDir, when set, is
// where the plugin writes its CDI spec.
func startNode(t fataler, cleanup func(func()), gpus []deviceplugin.GPU, cdiDir string) *node {
	t.Helper()
	n := &node{t: t, pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil), active: map[types.UID]*corev1.Pod{}, gpus: gpus, cdiDir: cdiDir}
	n.startKubelet()
	n.startPlugin()
	cleanup(func() {
		n.stopPlugin()
		_ = n.mgr.Stop(klog.Background())
	})
	n.waitAllocatable(len(n.gpus))
	return n
}

func (n *node) startKubelet() {
	mgr, err := devicemanager.NewManagerImpl(nil, topologymanager.NewFakeManager())
	if err != nil {
		n.t.Fatalf("NewManagerImpl: %v", err)
	}
	activePods := func() []*corev1.Pod {
		n.mu.Lock()
		defer n.mu.Unlock()
		out := make([]*corev1.Pod, 0, len(n.active))
		for _, p := range n.active {
			out = append(out, p)
		}
		return out
	}
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := mgr.Start(klog.Background(), activePods, ready, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		n.t.Fatalf("starting the device manager: %v", err)
	}
	n.mgr = mgr
}

func (n *node) startPlugin() { n.startPluginWith(nil) }

// restartPlugin stops the plugin and starts it again with the harness's configuration, changed
// by edit.
func (n *node) restartPlugin(edit func(*deviceplugin.Config)) {
	n.stopPlugin()
	n.waitAllocatable(0) // the kubelet noticed, so that a later wait sees the new plugin
	n.startPluginWith(edit)
}

func (n *node) startPluginWith(edit func(*deviceplugin.Config)) {
	cfg := deviceplugin.Config{
		NodeName: nodeName, Pods: corelisters.NewPodLister(n.pods), RecheckInterval: 10 * time.Millisecond, CDIDir: n.cdiDir,
		UnallocatedWait: unallocatedWait,
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := deviceplugin.New(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := p.SetGPUs(n.gpus); err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.plugin, n.stopPlg, n.plgDone = p, cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = p.Run(ctx)
	}(n.plgDone)
}

func (n *node) stopPlugin() {
	n.stopPlg()
	<-n.plgDone
}

// waitAllocatable waits until the kubelet counts want healthy GPUs.
func (n *node) waitAllocatable(want int) {
	n.t.Helper()
	var got int64
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, alloc, _ := n.mgr.GetCapacity()
		q := alloc[resName]
		got = q.Value()
		return got == int64(want), nil
	})
	if err != nil {
		n.t.Fatalf("kubelet allocatable %s: got %d, want %d", resName, got, want)
	}
}

// unallocatedWait is the plugin's wait for a pod without an allocation to be refused: short,
// since every test that meets one waits it out once.
const unallocatedWait = 300 * time.Millisecond

var podSeq int

// bind makes a pod bound to the node as our scheduler leaves it: the webhook's resource limit on
// its first container and the scheduler's allocation annotations. ids nil: no allocation.
func (n *node) bind(count int, ids []int, boundAt time.Time) *corev1.Pod {
	return n.bindFor(apiv1.SchedulerName, count, ids, boundAt)
}

// bindFor is bind for a pod whose spec.schedulerName is scheduler.
func (n *node) bindFor(scheduler string, count int, ids []int, boundAt time.Time) *corev1.Pod {
	podSeq++
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "team", Name: fmt.Sprintf("pod-%d", podSeq), UID: types.UID(fmt.Sprintf("uid-%d", podSeq)),
			CreationTimestamp: metav1.NewTime(boundAt.Add(-time.Minute)), Annotations: map[string]string{},
		},
		Spec: corev1.PodSpec{NodeName: nodeName, SchedulerName: scheduler, Containers: []corev1.Container{{
			Name: "main",
			Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{resName: *resource.NewQuantity(int64(count), resource.DecimalSI)},
			},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(boundAt),
		}}},
	}
	if ids != nil {
		pod.Annotations[apiv1.AnnotationAllocated] = apiv1.Allocation{Node: nodeName, IDs: ids}.String()
		pod.Annotations[apiv1.AnnotationGPUIDs] = apiv1.FormatIDs(ids)
	}
	if err := n.pods.Add(pod); err != nil {
		n.t.Fatal(err)
	}
	return pod
}

// admit does what the kubelet does when it admits a pod and starts its container: Allocate,
// then the run options the runtime is given.
func (n *node) admit(pod *corev1.Pod) (*devicemanager.DeviceRunContainerOptions, error) {
	n.mu.Lock()
	n.active[pod.UID] = pod
	n.mu.Unlock()
	c := &pod.Spec.Containers[0]
	if err := n.mgr.Allocate(pod, c); err != nil {
		n.mu.Lock()
		delete(n.active, pod.UID)
		n.mu.Unlock()
		return nil, err
	}
	return n.mgr.GetDeviceRunContainerOptions(context.Background(), pod, c)
}

// reject does what the kubelet does with a pod it refused to admit: its status turns Failed
// (the kubelet's first status write, with the start time).
func (n *node) reject(pod *corev1.Pod) {
	n.t.Helper()
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "UnexpectedAdmissionError"
	pod.Status.StartTime = ptr.To(metav1.Now())
	if err := n.pods.Update(pod); err != nil {
		n.t.Fatal(err)
	}
}

// finish ends a pod: it leaves the kubelet's active pods and the node's pod list.
func (n *node) finish(pod *corev1.Pod) {
	n.mu.Lock()
	delete(n.active, pod.UID)
	n.mu.Unlock()
	if err := n.pods.Delete(pod); err != nil {
		n.t.Fatal(err)
	}
}

// handed reads the GPU indexes the container was given, checking that the CDI devices, the
// device nodes (/dev/nvidia<minor>, mapped back to the GPU of that minor) and
// NVIDIA_VISIBLE_DEVICES all name the same GPUs.
func (n *node) handed(opts *devicemanager.DeviceRunContainerOptions) ([]int, error) {
	var cdi []int
	for _, d := range opts.CDIDevices {
		var i int
		if _, err := fmt.Sscanf(d.Name, deviceplugin.DefaultCDIKind+"=%d", &i); err != nil {
			return nil, fmt.Errorf("CDI device %q is not one of ours", d.Name)
		}
		cdi = append(cdi, i)
	}
	var nodes []int
	for _, d := range opts.Devices {
		var minor int
		if _, err := fmt.Sscanf(d.PathOnHost, "/dev/nvidia%d", &minor); err != nil {
			continue
		}
		if d.PathInContainer != d.PathOnHost {
			return nil, fmt.Errorf("device node %s is %s in the container; NVML there looks for the same minor", d.PathOnHost, d.PathInContainer)
		}
		i := slices.IndexFunc(n.gpus, func(g deviceplugin.GPU) bool { return g.Minor == minor })
		if i < 0 {
			return nil, fmt.Errorf("device node %s is no GPU of this node", d.PathOnHost)
		}
		nodes = append(nodes, n.gpus[i].Index)
	}
	var uuids []string
	for _, e := range opts.Envs {
		if e.Name == "NVIDIA_VISIBLE_DEVICES" {
			uuids = strings.Split(e.Value, ",")
		}
	}
	var fromUUID []int
	for _, u := range uuids {
		i := slices.IndexFunc(n.gpus, func(g deviceplugin.GPU) bool { return g.UUID == u })
		if i < 0 {
			return nil, fmt.Errorf("NVIDIA_VISIBLE_DEVICES names %q, not a GPU of this node", u)
		}
		fromUUID = append(fromUUID, n.gpus[i].Index)
	}
	slices.Sort(cdi)
	slices.Sort(nodes)
	slices.Sort(fromUUID)
	if !slices.Equal(cdi, nodes) || !slices.Equal(cdi, fromUUID) {
		return nil, fmt.Errorf("CDI devices %v, device nodes %v and NVIDIA_VISIBLE_DEVICES %v disagree", cdi, nodes, fromUUID)
	}
	return cdi, nil
}

// kubeletIDs is what the kubelet itself recorded for the pod (the pod-resources API's view).
func (n *node) kubeletIDs(pod *corev1.Pod) []int {
	var out []int
	for id := range n.mgr.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name)[resName] {
		var i int
		if _, err := fmt.Sscanf(id, "%d", &i); err != nil {
			n.t.Fatalf("kubelet recorded device %q for pod %s, not a GPU index", id, pod.Name)
		}
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

func (n *node) mustGet(pod *corev1.Pod, want []int) {
	n.t.Helper()
	opts, err := n.admit(pod)
	if err != nil {
		n.t.Fatalf("admitting %s (scheduler chose %v): %v", pod.Name, want, err)
	}
	got, err := n.handed(opts)
	if err != nil {
		n.t.Fatalf("pod %s: %v", pod.Name, err)
	}
	if !slices.Equal(got, want) || !slices.Equal(n.kubeletIDs(pod), want) {
		n.t.Fatalf("pod %s: container got GPUs %v, kubelet recorded %v; the scheduler chose %v", pod.Name, got, n.kubeletIDs(pod), want)
	}
}

// TestTwoPodsAtOnceNeverSwap binds two pods with the same GPU count to the node before the
// kubelet admits either (it admits them in the order they were bound, as its watch delivers
// them), 1,000 times with random scheduler choices: every container must get exactly its
// own pod's GPUs.
func TestTwoPodsAtOnceNeverSwap(t *testing.T) {
	n := newNode(t)
	if swaps, containers := n.twoPodsAtOnce(1000, 0); swaps != 0 {
		t.Fatalf("%d of %d containers got GPUs other than the scheduler's", swaps, containers)
	}
}

// twoPodsAtOnce plays rounds in which two pods of up to count GPUs each (0: 1 to 4) are bound
// before the kubelet admits either, with random scheduler choices, and counts the containers
// handed GPUs other than their pod's.
func (n *node) twoPodsAtOnce(rounds, count int) (swaps, containers int) {
	n.t.Helper()
	rng := rand.New(rand.NewPCG(17, 1))
	t0 := time.Now()
	for i := range rounds {
		c := count
		if c == 0 {
			c = 1 + rng.IntN(4)
		}
		perm := rng.Perm(len(n.gpus))
		a, b := slices.Sorted(slices.Values(perm[:c])), slices.Sorted(slices.Values(perm[c:2*c]))
		at := t0.Add(time.Duration(i) * time.Minute)
		pa := n.bind(c, a, at)
		pb := n.bind(c, b, at.Add(time.Second))
		for _, p := range []struct {
			pod  *corev1.Pod
			want []int
		}{{pa, a}, {pb, b}} {
			opts, err := n.admit(p.pod)
			if err != nil {
				n.t.Fatalf("round %d: admitting %s: %v", i, p.pod.Name, err)
			}
			got, err := n.handed(opts)
			if err != nil {
				n.t.Fatalf("round %d: %v", i, err)
			}
			containers++
			if !slices.Equal(got, p.want) || !slices.Equal(n.kubeletIDs(p.pod), p.want) {
				swaps++
			}
		}
		n.finish(pa)
		n.finish(pb)
	}
	return swaps, containers
}

// TestAgentRestartMidAllocation restarts the plugin between two pods' admissions: the new
// plugin has no memory of what it handed out, yet the second pod gets its own GPUs.
func TestAgentRestartMidAllocation(t *testing.T) {
	n := newNode(t)
	now := time.Now()
	pa := n.bind(2, []int{0, 1}, now)
	pb := n.bind(2, []int{4, 5}, now.Add(time.Second))
	n.mustGet(pa, []int{0, 1})
	n.stopPlugin()
	// The kubelet notices the plugin is gone (its GPUs turn unhealthy) before the new one
	// registers; a pod admitted in that gap is refused by the kubelet itself.
	n.waitAllocatable(0)
	n.startPlugin()
	n.waitAllocatable(len(n.gpus))
	n.mustGet(pb, []int{4, 5})
}

// TestKubeletRestartMidAllocation restarts the device manager (a kubelet restart): it wipes the
// plugin's socket, the plugin registers again, the first pod keeps its GPUs from the kubelet's
// checkpoint and the second gets its own.
func TestKubeletRestartMidAllocation(t *testing.T) {
	n := newNode(t)
	now := time.Now()
	pa := n.bind(2, []int{2, 3}, now)
	pb := n.bind(2, []int{6, 7}, now.Add(time.Second))
	n.mustGet(pa, []int{2, 3})
	if err := n.mgr.Stop(klog.Background()); err != nil {
		t.Fatal(err)
	}
	n.startKubelet()
	n.waitAllocatable(len(n.gpus))
	if got := n.kubeletIDs(pa); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("after the kubelet restart pod %s holds %v, want [2 3] from the checkpoint", pa.Name, got)
	}
	n.mustGet(pb, []int{6, 7})
}

// TestPodWithoutAllocationRefused admits a pod asking for GPUs that carries no allocation of
// ours (its claim vanished, or another scheduler placed it): the kubelet gets a clear error.
func TestPodWithoutAllocationRefused(t *testing.T) {
	n := newNode(t)
	pod := n.bind(1, nil, time.Now())
	_, err := n.admit(pod)
	if err == nil {
		t.Fatalf("pod %s without an allocation was admitted", pod.Name)
	}
	if !strings.Contains(err.Error(), "it carries no "+apiv1.AnnotationAllocated+" annotation") {
		t.Fatalf("error does not say why: %v", err)
	}
	n.reject(pod)
	// The same pod once the scheduler's allocation is there again is served.
	pod2 := n.bind(1, []int{3}, time.Now())
	n.mustGet(pod2, []int{3})
}

// TestOtherSchedulersPodRefused admits a pod of another release's scheduler that carries an
// allocation annotation for this node: that scheduler holds no lease on our GPUs, so the pod
// gets nothing, however exactly its annotation names free GPUs. A pod of ours with the same
// GPUs is then served.
func TestOtherSchedulersPodRefused(t *testing.T) {
	n := newNode(t)
	foreign := n.bindFor("gpu-canary", 2, []int{0, 1}, time.Now().Add(-time.Minute))
	if _, err := n.admit(foreign); err == nil {
		t.Fatalf("pod %s of scheduler gpu-canary was handed GPUs by the %s release's plugin", foreign.Name, apiv1.SchedulerName)
	} else if !strings.Contains(err.Error(), "not scheduled by "+apiv1.SchedulerName) {
		t.Fatalf("error does not say why: %v", err)
	}
	n.finish(foreign)
	n.mustGet(n.bind(2, []int{0, 1}, time.Now()), []int{0, 1})
}

// TestUnhealthyGPU marks a GPU unhealthy: ListAndWatch streams it, the kubelet's allocatable
// drops and it lists the GPU among the unhealthy ones; recovery brings it back.
func TestUnhealthyGPU(t *testing.T) {
	n := newNode(t)
	sick := slices.Clone(n.gpus)
	sick[5].Healthy = false
	if err := n.plugin.SetGPUs(sick); err != nil {
		t.Fatal(err)
	}
	n.waitAllocatable(len(n.gpus) - 1)
	healthy := n.mgr.GetAllocatableDevices()[resName]
	if _, ok := healthy["5"]; ok {
		t.Fatalf("kubelet still lists GPU 5 as allocatable: %v", healthy)
	}
	if err := n.plugin.SetGPUs(n.gpus); err != nil {
		t.Fatal(err)
	}
	n.waitAllocatable(len(n.gpus))
}

// TestRoguePodRefused binds a claim pod (GPUs 0,1) to the node and, before the kubelet admits
// it, a pod that names no claim and asks for 2 GPUs itself (placed by the default scheduler).
// The kubelet admits the rogue pod first: its request names no pod and is for 2 GPUs, exactly
// what the claim pod's allocation is. It must be refused, naming the pod and why; once the
// kubelet has failed it, the claim pod gets its own GPUs.
func TestRoguePodRefused(t *testing.T) {
	n := newNode(t)
	now := time.Now()
	claim := n.bind(2, []int{0, 1}, now)
	rogue := n.bindFor("default-scheduler", 2, nil, now.Add(time.Second))
	opts, err := n.admit(rogue)
	if err == nil {
		got, _ := n.handed(opts)
		t.Fatalf("pod %s, which names no claim, was handed GPUs %v (the kubelet recorded %v) while %s holds 0,1", rogue.Name, got, n.kubeletIDs(rogue), claim.Name)
	}
	for _, want := range []string{"team/" + rogue.Name, "not scheduled by " + apiv1.SchedulerName, "without an allocation"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal does not say %q: %v", want, err)
		}
	}
	n.reject(rogue)
	n.mustGet(claim, []int{0, 1})
}

// TestClaimPodWaitsOutRefusedRogue: the kubelet refused the rogue pod a moment ago and admits
// the claim pod while the rogue pod's Failed status has not reached the agent yet. The plugin
// waits for it and serves the claim pod.
func TestClaimPodWaitsOutRefusedRogue(t *testing.T) {
	n := newNode(t)
	now := time.Now()
	claim := n.bind(2, []int{4, 5}, now)
	rogue := n.bindFor(apiv1.SchedulerName, 2, nil, now.Add(time.Second)) // spec.nodeName, our scheduler's name, no claim
	if _, err := n.admit(rogue); err == nil {
		t.Fatalf("pod %s, which names no claim, was handed GPUs", rogue.Name)
	}
	go func() {
		time.Sleep(unallocatedWait / 3)
		n.reject(rogue)
	}()
	n.mustGet(claim, []int{4, 5})
}

// TestRogueOfOtherSizeDoesNotBlock: a pending pod without an allocation that asks for 3 GPUs
// cannot be the pod a request for 2 is for; the claim pod is served at once.
func TestRogueOfOtherSizeDoesNotBlock(t *testing.T) {
	n := newNode(t)
	now := time.Now()
	n.bindFor("default-scheduler", 3, nil, now)
	claim := n.bind(2, []int{2, 3}, now.Add(time.Second))
	start := time.Now()
	n.mustGet(claim, []int{2, 3})
	if d := time.Since(start); d >= unallocatedWait {
		t.Fatalf("the claim pod waited %v for a pod asking for 3 GPUs", d)
	}
}

// TestCopiedAllocationRefused: a pod created with spec.nodeName and a copy of a claim pod's
// allocation annotation (past a webhook that should have refused it) is bound before the
// kubelet admits the claim pod. Neither may get the GPUs while both claim them: the plugin
// cannot tell which allocation the scheduler wrote.
func TestCopiedAllocationRefused(t *testing.T) {
	n := newNode(t)
	now := time.Now()
	claim := n.bind(2, []int{6, 7}, now)
	copied := n.bind(2, []int{6, 7}, now.Add(-time.Second))
	opts, err := n.admit(copied)
	if err == nil {
		got, _ := n.handed(opts)
		t.Fatalf("pod %s, carrying a copy of %s's allocation, was handed GPUs %v", copied.Name, claim.Name, got)
	}
	if !strings.Contains(err.Error(), "both carry an allocation of GPU 6") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
	n.finish(copied)
	n.mustGet(claim, []int{6, 7})
}

// standIn is another GPU device plugin, like NVIDIA's: it registers resource over socket with
// the kubelet and lists count healthy devices.
type standIn struct {
	pluginapi.UnimplementedDevicePluginServer
	count int
}

func (s *standIn) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (s *standIn) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for i := range s.count {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: fmt.Sprintf("GPU-standin-%d", i), Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// startStandIn serves a stand-in GPU device plugin for resource on socket and registers it.
func startStandIn(t *testing.T, resource, socket string, count int) {
	t.Helper()
	path := filepath.Join(pluginapi.DevicePluginPath, socket)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, &standIn{count: count})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socket, ResourceName: resource,
	}); err != nil {
		t.Fatalf("registering the stand-in plugin for %s: %v", resource, err)
	}
}

// nodeObject is the Node as the kubelet reports it: its capacity is the device manager's.
func (n *node) nodeObject() (*corev1.Node, error) {
	capacity, _, _ := n.mgr.GetCapacity()
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Status: corev1.NodeStatus{Capacity: capacity}}, nil
}

// TestOtherGPUPluginStopsOurs: a stand-in for NVIDIA's device plugin registers nvidia.com/gpu
// on the node, over a socket named like no NVIDIA socket: the node's capacity shows it, our
// plugin stops serving (the kubelet's allocatable of our resource drops to 0, and a claim pod is
// refused by the kubelet itself), says why, and serves again only when told the GPUs are split.
func TestOtherGPUPluginStopsOurs(t *testing.T) {
	n := newNode(t)
	var mu sync.Mutex
	var refusals []string
	n.restartPlugin(func(c *deviceplugin.Config) {
		c.Node = n.nodeObject
		c.OnRefusal = func(r string) {
			mu.Lock()
			defer mu.Unlock()
			refusals = append(refusals, r)
		}
	})
	n.waitAllocatable(len(n.gpus))
	startStandIn(t, "nvidia.com/gpu", "stand-in.sock", 8)
	n.waitAllocatable(0)
	reason := n.plugin.Refusal()
	if !strings.Contains(reason, "nvidia.com/gpu: 8") {
		t.Fatalf("the plugin's refusal does not name the other plugin's resource: %q", reason)
	}
	mu.Lock()
	if len(refusals) != 1 || refusals[0] != reason {
		t.Errorf("OnRefusal was called with %q, want once with %q", refusals, reason)
	}
	mu.Unlock()
	if _, err := n.admit(n.bind(1, []int{0}, time.Now())); err == nil {
		t.Fatal("a claim pod was handed GPUs while another GPU plugin serves the node")
	}

	// The operator says the node's GPUs are split between the plugins.
	n.restartPlugin(func(c *deviceplugin.Config) { c.Node, c.AllowOtherGPUPlugins = n.nodeObject, true })
	n.waitAllocatable(len(n.gpus))
	if r := n.plugin.Refusal(); r != "" {
		t.Fatalf("refusal %q with AllowOtherGPUPlugins", r)
	}
}

// TestOtherGPUPluginSocket: NVIDIA's plugin registering our own resource name replaces ours at
// the kubelet; only its socket shows it. OtherGPUPlugins finds it.
func TestOtherGPUPluginSocket(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"kubelet.sock", "gpu-scheduler.sock", "rdma.sock", "nvidia-gpu.sock"} {
		lis, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
	}
	found, err := deviceplugin.OtherGPUPlugins(nil, dir, resName, "gpu-scheduler.sock", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !strings.Contains(found[0], "nvidia-gpu.sock") {
		t.Fatalf("found %q, want the nvidia-gpu.sock socket alone", found)
	}
}

// TestUnnamableGPUNotAdvertised: a GPU whose index no allocation annotation can carry (beyond
// apiv1.MaxGPUID) could never be handed to a claim pod; the plugin leaves it out of what the
// kubelet counts and says so.
func TestUnnamableGPUNotAdvertised(t *testing.T) {
	n := newNode(t)
	extra := deviceplugin.GPU{Index: apiv1.MaxGPUID + 1, UUID: "GPU-beyond", Minor: 200, Healthy: true, NUMANode: -1}
	err := n.plugin.SetGPUs(append(slices.Clone(n.gpus), extra))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("GPU %d (GPU-beyond)", extra.Index)) {
		t.Fatalf("SetGPUs with GPU %d: %v; want an error naming it", extra.Index, err)
	}
	// With a change the kubelet does see (GPU 0 unhealthy), still without the extra GPU.
	sick := slices.Clone(n.gpus)
	sick[0].Healthy = false
	_ = n.plugin.SetGPUs(append(sick, extra))
	n.waitAllocatable(len(n.gpus) - 1)
	if _, ok := n.mgr.GetAllocatableDevices()[resName][strconv.Itoa(extra.Index)]; ok {
		t.Fatalf("the kubelet counts GPU %d", extra.Index)
	}
}

// TestPodSeenLateByTheAgent admits a pod the agent's informer has not delivered yet: the
// kubelet's watch and the agent's are separate, and on a real node the kubelet asked for its
// preferred allocation before the agent saw the pod bound, got no opinion, picked GPUs of its
// own and the pod was refused. The plugin must wait for the pod rather than have no opinion.
func TestPodSeenLateByTheAgent(t *testing.T) {
	n := newNode(t)
	// The kubelet's own pick, with no opinion, is not these in general; 20 rounds make a
	// lucky pass of the old code unlikely.
	for i := range 20 {
		want := []int{i % len(n.gpus), (i + 3) % len(n.gpus)}
		slices.Sort(want)
		pod := n.bind(2, want, time.Now())
		if err := n.pods.Delete(pod); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			if err := n.pods.Add(pod); err != nil {
				t.Error(err)
			}
		}()
		n.mustGet(pod, want)
		n.finish(pod)
	}
}

// The kubelet has finished a pod (its devices are free again) that this agent still sees
// running, and admits the next pod before the agent sees that one bound: the freed GPUs of the
// finished pod are not proposed for it (the old code did, in its second pass, and the new pod
// got them: seen on the real node in a burst of 200 one-GPU pods).
func TestFinishedPodSeenRunningByTheAgent(t *testing.T) {
	n := newNode(t)
	for i := range 10 {
		done := n.bind(1, []int{i % len(n.gpus)}, time.Now())
		n.mustGet(done, []int{i % len(n.gpus)})
		// The kubelet lets go of it; the agent's informer has not heard yet.
		n.mu.Lock()
		delete(n.active, done.UID)
		n.mu.Unlock()

		want := []int{(i + 1) % len(n.gpus)}
		next := n.bind(1, want, time.Now())
		if err := n.pods.Delete(next); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			if err := n.pods.Add(next); err != nil {
				t.Error(err)
			}
		}()
		n.mustGet(next, want)
		n.finish(next)
		if err := n.pods.Delete(done); err != nil {
			t.Fatal(err)
		}
	}
}
