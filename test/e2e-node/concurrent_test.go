//go:build e2enode

package e2enode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// checkpointPath is where the kubelet's device manager records which devices it gave which
// container (fixed by the kubelet, like its registration socket).
const checkpointPath = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

// checkpoint is the part of the kubelet's device-manager checkpoint the tests read.
type checkpoint struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID        string
			ContainerName string
			ResourceName  string
			DeviceIDs     map[string][]string
		}
	}
}

// kubeletDevices maps pod UID to the GPU IDs the kubelet's checkpoint records for it.
func kubeletDevices(t *testing.T) map[types.UID][]int {
	t.Helper()
	b, err := os.ReadFile(checkpointPath)
	if err != nil {
		t.Fatalf("reading the kubelet's checkpoint: %v", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatalf("parsing %s: %v", checkpointPath, err)
	}
	out := map[types.UID][]int{}
	for _, e := range cp.Data.PodDeviceEntries {
		if e.ResourceName != string(gpuResource) {
			continue
		}
		for _, ids := range e.DeviceIDs {
			for _, id := range ids {
				n, err := strconv.Atoi(id)
				if err != nil {
					t.Errorf("checkpoint: device ID %q of pod %s is not a GPU index", id, e.PodUID)
					continue
				}
				out[types.UID(e.PodUID)] = append(out[types.UID(e.PodUID)], n)
			}
		}
	}
	for uid := range out {
		slices.Sort(out[uid])
	}
	return out
}

// Fifty pods of mixed sizes created at once, as many as the node's eight GPUs hold at a time:
// every container sees exactly the GPUs the scheduler chose for it (0 swaps), the kubelet's
// checkpoint agrees with the pods' annotations, and no GPU is in two running pods. Reports
// pod create -> container running with its GPUs.
func TestFiftyConcurrentPodsSeeExactlyTheirGPUs(t *testing.T) {
	ns := "e2e-fifty"
	ensureNamespace(t, ns)
	ctx := context.Background()
	defer deleteNamespace(t, ns)
	for i := 0; i < burstPods; i++ {
		createClaim(t, ns, fmt.Sprintf("c%d", i), burstSizes[i%len(burstSizes)])
	}
	started := runBurst(t, ns, func(i int) *corev1.Pod {
		return claimPod(ns, fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i))
	})
	swaps := 0
	list, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		var i int
		if _, err := fmt.Sscanf(p.Name, "p%d", &i); err != nil {
			continue
		}
		want := chosenGPUs(&p)
		v, err := viewOf(t, ns, p.Name)
		if err != nil {
			t.Error(err)
			continue
		}
		if len(want) != burstSizes[i%len(burstSizes)] {
			t.Errorf("pod %s: scheduler chose %v for a claim of %d", p.Name, want, burstSizes[i%len(burstSizes)])
		}
		if !slices.Equal(v.minors, want) {
			swaps++
			t.Errorf("pod %s: container saw /dev/nvidia%v, the scheduler chose %v", p.Name, v.minors, want)
		}
	}
	t.Logf("%d concurrent pods: %d swaps", burstPods, swaps)
	reportStart(fmt.Sprintf("%d pods (gpu-scheduler + its device plugin)", burstPods), started)
}

// The burst both schedulers are measured on: sizes 1, 1, 2, 4 repeating, so that the node
// holds some at a time and the rest wait for the earlier ones, which exit after a few seconds.
var burstSizes = []int{1, 1, 2, 4}

const burstPods = 50

// runBurst creates burstPods pods made by mk at once (each reports its GPUs, then exits after
// a few seconds, freeing them for the pods still waiting), waits for all of them to finish, and
// returns each pod's time from create to its container running.
func runBurst(t *testing.T, ns string, mk func(i int) *corev1.Pod) map[int]time.Duration {
	t.Helper()
	ctx := context.Background()
	created := make([]time.Time, burstPods)
	var wg sync.WaitGroup
	errs := make(chan error, burstPods)
	for i := 0; i < burstPods; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := mk(i)
			p.Spec.Containers[0].Command = []string{"sh", "-c", devScriptOnce + "; sleep 3"}
			created[i] = time.Now()
			if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("creating pod %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	started := map[int]time.Duration{}
	var failed []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		done := 0
		failed = failed[:0]
		for _, p := range list.Items {
			var i int
			if _, err := fmt.Sscanf(p.Name, "p%d", &i); err != nil {
				continue
			}
			if _, ok := started[i]; !ok {
				for _, cs := range p.Status.ContainerStatuses {
					if cs.State.Running != nil {
						started[i] = cs.State.Running.StartedAt.Sub(created[i])
					} else if cs.State.Terminated != nil {
						started[i] = cs.State.Terminated.StartedAt.Sub(created[i])
					}
				}
			}
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				done++
			}
			if p.Status.Phase == corev1.PodFailed {
				failed = append(failed, fmt.Sprintf("%s (%s: %s)", p.Name, p.Status.Reason, p.Status.Message))
			}
		}
		return done == burstPods, nil
	})
	if err != nil {
		out, _ := kubectl(t, "get", "pods", "-n", ns, "-o", "wide")
		t.Fatalf("not all %d pods finished after 8m:\n%s", burstPods, out)
	}
	if len(failed) > 0 {
		t.Errorf("%d pods failed: %v", len(failed), failed)
	}
	return started
}

// reportStart prints the create -> running figures of a burst as a report line (a figure for
// docs/benchmarks.md, not an assertion: the machine's load sets it).
func reportStart(what string, started map[int]time.Duration) {
	var lat []time.Duration
	for _, d := range started {
		lat = append(lat, d)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		fmt.Printf("e2e-node report: pod create -> container running with its GPUs, %s: p50 %s, p90 %s, max %s\n",
			what, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
}

// devScriptOnce is devScript without the final sleep.
const devScriptOnce = `echo "devs=$(cd /dev && ls -d nvidia[0-9]* 2>/dev/null | tr '\n' ' ')"; ` +
	`echo "ctl=$(ls /dev/nvidiactl 2>/dev/null)"; echo "nvidia=$NVIDIA_VISIBLE_DEVICES"; echo "cuda=$CUDA_VISIBLE_DEVICES"`

// The kubelet's checkpoint agrees with the scheduler's annotations for every running GPU pod,
// and no GPU is held by two running pods.
func TestKubeletCheckpointAgreesWithTheAnnotations(t *testing.T) {
	ns := "e2e-checkpoint"
	ensureNamespace(t, ns)
	ctx := context.Background()
	defer deleteNamespace(t, ns)
	for i, size := range []int{1, 2, 4} {
		name := fmt.Sprintf("k%d", i)
		createClaim(t, ns, name, size)
		if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, claimPod(ns, name, name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		waitPod(t, ns, fmt.Sprintf("k%d", i), 3*time.Minute, "Running", running)
	}
	assertCheckpointMatches(t)
}

// assertCheckpointMatches compares the checkpoint with every running GPU pod of the cluster and
// counts GPUs held twice.
func assertCheckpointMatches(t *testing.T) {
	t.Helper()
	cp := kubeletDevices(t)
	list, err := env.cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int]string{}
	for _, p := range list.Items {
		if p.Spec.NodeName != env.node.Name() || p.Status.Phase != corev1.PodRunning || p.Annotations["gpu.scheduling/gpu-ids"] == "" {
			continue
		}
		want := chosenGPUs(&p)
		if got := cp[p.UID]; !slices.Equal(got, want) {
			t.Errorf("pod %s/%s: the kubelet's checkpoint has GPUs %v, the annotation %v", p.Namespace, p.Name, got, want)
		}
		for _, g := range want {
			if o, ok := owner[g]; ok {
				t.Errorf("GPU %d is held by two running pods: %s and %s/%s", g, o, p.Namespace, p.Name)
			}
			owner[g] = p.Namespace + "/" + p.Name
		}
	}
}
