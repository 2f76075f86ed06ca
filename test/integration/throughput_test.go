//go:build integration

package integration

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// BenchmarkSchedulingThroughput schedules the same batch of pods with gpu-scheduler (claims)
// and with the stock kube-scheduler (nvidia.com/gpu requests) on the same cluster in the same
// run, and reports pods/s for each and the API writes per pod that the gpu-scheduler adds
// (leases, bindings, claim statuses). Run with -benchtime=1x; the batch size is the pods per
// iteration.
//
//	go test -tags integration -run '^$' -bench SchedulingThroughput -benchtime 1x ./test/integration/
func BenchmarkSchedulingThroughput(b *testing.B) {
	ctx := b.Context()
	const nodes, pods, gpusPerPod = 500, 1000, 2
	pool := cluster.NodePool{Name: "bench", Count: nodes, GPUsPerNode: 8, Topology: "dgx-a100"}
	if err := env.c.CreateNodePool(ctx, pool); err != nil {
		b.Fatal(err)
	}
	if err := env.c.WaitNodesReady(ctx, cluster.PoolSelector(pool.Name), nodes, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < nodes; i++ {
		if err := publishStatus(ctx, cluster.NodeName(pool.Name, i), pool.Topology); err != nil {
			b.Fatal(err)
		}
	}
	if err := env.c.StartStockScheduler(ctx); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		ours := runBatch(b, "bench-gpu", pods, gpusPerPod, true)
		stock := runBatch(b, "bench-stock", pods, gpusPerPod, false)
		b.ReportMetric(ours.podsPerSec, "gpu-scheduler-pods/s")
		b.ReportMetric(stock.podsPerSec, "stock-pods/s")
		b.ReportMetric(ours.podsPerSec/stock.podsPerSec, "ratio")
		b.ReportMetric(ours.schedulerWritesPerPod, "gpu-scheduler-writes/pod")
		b.ReportMetric(stock.schedulerWritesPerPod, "stock-writes/pod")
	}
}

type batchResult struct {
	podsPerSec            float64
	schedulerWritesPerPod float64
}

// runBatch creates pods (with claims when gpu is set) in a fresh namespace, waits until all are
// bound, and measures the rate from the first create to the last binding.
func runBatch(b *testing.B, ns string, pods, gpus int, gpu bool) batchResult {
	ctx := b.Context()
	if err := ensureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()
	if gpu {
		for i := 0; i < pods; i++ {
			_, err := env.gpu.GpuV1().GpuClaims(ns).Create(ctx, &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%04d", i)},
				Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: int32(gpus)}, Selector: onPool("bench")}}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	before := schedulerWrites(b)
	start := time.Now()
	// Create concurrently, so that the rate measured is the scheduler's, not the client's.
	work := make(chan int)
	errs := make(chan error, pods)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := env.kube.CoreV1().Pods(ns).Create(ctx, benchPod(i, gpus, gpu), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < pods; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	var last time.Time
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		last = time.Now()
		return bound == pods, nil
	})
	if err != nil {
		b.Fatalf("%s: not all %d pods bound: %v", ns, pods, err)
	}
	writes := schedulerWrites(b) - before
	return batchResult{podsPerSec: float64(pods) / last.Sub(start).Seconds(), schedulerWritesPerPod: writes / float64(pods)}
}

func benchPod(i, gpus int, gpu bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%04d", i)},
		Spec: corev1.PodSpec{
			Containers:   []corev1.Container{{Name: "main", Image: "fake"}},
			NodeSelector: map[string]string{cluster.LabelPool: "bench"},
			Tolerations:  []corev1.Toleration{{Key: "type", Operator: corev1.TolerationOpExists}},
		},
	}
	if gpu {
		p.Spec.SchedulerName = apiv1.SchedulerName
		p.Annotations = map[string]string{apiv1.AnnotationClaim: fmt.Sprintf("c%04d", i)}
	} else {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{cluster.ResourceGPU: q}, Limits: corev1.ResourceList{cluster.ResourceGPU: q}}
	}
	return p
}

// schedulerWrites sums the apiserver's counts of the writes a scheduler makes per pod: pod
// bindings, lease creates (GPU locks) and GpuClaim status updates. Pod patches are not counted:
// neither scheduler patches pods (ours puts the allocation into the Binding).
func schedulerWrites(b *testing.B) float64 {
	raw, err := env.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		// Lease creates only: node heartbeats and leader election renew leases with PUT.
		create := strings.Contains(line, `verb="POST"`)
		update := strings.Contains(line, `verb="PUT"`) || strings.Contains(line, `verb="PATCH"`)
		ours := (create && strings.Contains(line, `resource="leases"`)) ||
			(create && strings.Contains(line, `resource="pods"`) && strings.Contains(line, `subresource="binding"`)) ||
			(update && strings.Contains(line, `resource="gpuclaims"`) && strings.Contains(line, `subresource="status"`))
		if !ours {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total
}
