//go:build integration

package fleet_test

import (
	"context"
	"flag"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuinformers "github.com/gpu-scheduler/gpu-scheduler/api/generated/informers/externalversions"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
)

var (
	rateNodes  = flag.Int("fleet.nodes", 100, "BenchmarkFleetStatusWriteRate: simulated nodes")
	rateWindow = flag.Duration("fleet.window", 2*time.Minute, "BenchmarkFleetStatusWriteRate: how long writes are counted")
	rateBudget = flag.Float64("fleet.telemetry-writes-per-minute", 2, "BenchmarkFleetStatusWriteRate: the agents' telemetry write budget")
)

// BenchmarkFleetStatusWriteRate measures the GpuNodeStatus writes of a fleet of DGX H100 nodes
// whose simulated load moves by itself, with the agent's production defaults (telemetry read
// every 10s, written within the per-node budget, heartbeat every 3m): it watches every status
// for --fleet.window once all nodes have published, and reports writes per node per minute and
// writes per second for the fleet. docs/node.md has the figures. It is a measurement, run by
// hand (it runs for minutes):
//
//	go test -tags integration ./sim/fleet -run '^$' -bench FleetStatusWriteRate -benchtime 1x -timeout 30m -fleet.nodes 500
func BenchmarkFleetStatusWriteRate(b *testing.B) {
	for range b.N {
		measureWriteRate(b)
	}
}

func measureWriteRate(b *testing.B) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), *rateWindow+15*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Name: "fleet-write-rate"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			b.Errorf("stopping the cluster: %v", err)
		}
	}()
	if err := c.InstallCRDs(ctx, filepath.Join("..", "..", "charts", "gpu-scheduler", "crds")); err != nil {
		b.Fatal(err)
	}
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 2000, 4000
	kube := kubernetes.NewForConfigOrDie(cfg)
	gpus := versioned.NewForConfigOrDie(cfg)
	if err := c.CreateNodePool(ctx, cluster.NodePool{Name: "h100", Count: *rateNodes, GPUsPerNode: 8, Topology: mock.DGXH100}); err != nil {
		b.Fatal(err)
	}
	f, err := fleet.New(fleet.Config{
		KubeClient: kube, GPUClient: gpus,
		Agent: agent.Config{TelemetryWritesPerMinute: *rateBudget},
		// Far above what the fleet asks for: the budget, not the shared limiter, is measured.
		WriteQPS: 5000, WriteBurst: 10000,
	})
	if err != nil {
		b.Fatal(err)
	}
	fctx, stopFleet := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- f.Run(fctx) }()
	defer func() {
		stopFleet()
		if err := <-done; err != nil {
			b.Errorf("fleet: %v", err)
		}
	}()

	// An informer, not a bare watch: the API server ends watches now and then, and the
	// informer resumes where it left off, so no write goes uncounted.
	var mu sync.Mutex
	perNode := map[string]int{}
	total, counting := 0, false
	factory := gpuinformers.NewSharedInformerFactory(gpus, 0)
	inf := factory.Gpu().V1().GpuNodeStatuses().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		o, ok := obj.(metav1.Object)
		mu.Lock()
		defer mu.Unlock()
		if ok && counting {
			perNode[o.GetName()]++
			total++
		}
	}}); err != nil {
		b.Fatal(err)
	}
	ictx, stopInformer := context.WithCancel(ctx)
	factory.Start(ictx.Done())
	defer factory.Shutdown() // after stopInformer: Shutdown waits for the informer to stop
	defer stopInformer()
	factory.WaitForCacheSync(ictx.Done())
	for len(inf.GetStore().List()) < *rateNodes {
		select {
		case <-ctx.Done():
			b.Fatalf("waiting for %d statuses (have %d): %v", *rateNodes, len(inf.GetStore().List()), ctx.Err())
		case <-time.After(time.Second):
		}
	}
	// The first minute has every node's first writes (labels, first telemetry): count after it.
	select {
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	case <-time.After(time.Minute):
	}
	mu.Lock()
	counting = true
	mu.Unlock()
	began := time.Now()
	select {
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	case <-time.After(*rateWindow):
	}
	mu.Lock()
	counting = false
	mu.Unlock()
	minutes := time.Since(began).Minutes()
	most := 0
	for _, n := range perNode {
		most = max(most, n)
	}
	b.ReportMetric(float64(total)/float64(*rateNodes)/minutes, "writes/node/min")
	b.ReportMetric(float64(most)/minutes, "max-writes/node/min")
	b.ReportMetric(float64(total)/time.Since(began).Seconds(), "writes/s")
	b.Logf("%d nodes, budget %.1f/min: %d status writes in %s (%d nodes wrote at all)", *rateNodes, *rateBudget, total, time.Since(began).Round(time.Second), len(perNode))
}
