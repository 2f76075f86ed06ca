package runner

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// faults plays the scenario's fault timeline against one run.
type faults struct {
	c         *cluster.Cluster
	cs        kubernetes.Interface
	fleet     Fleet
	stock     bool
	external  bool // an existing cluster: its kube-scheduler is not ours to kill
	schedOpts launch.SchedulerOptions
	res       *RunResult

	mu       sync.Mutex
	sched    *launch.Scheduler
	restarts int
}

func (f *faults) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res.Notes = append(f.res.Notes, fmt.Sprintf(format, args...))
}

func (f *faults) play(ctx context.Context, list []scenario.Fault, rec *recorder, t0 time.Duration) {
	list = append([]scenario.Fault(nil), list...)
	sort.SliceStable(list, func(i, j int) bool { return list[i].At.Duration < list[j].At.Duration })
	logger := klog.FromContext(ctx)
	for _, fl := range list {
		wait := t0 + fl.At.Duration - rec.now()
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		if err := f.apply(ctx, fl); err != nil && ctx.Err() == nil {
			logger.Error(err, "Fault failed", "type", fl.Type, "at", fl.At.Duration)
			f.note("fault %s at %s failed: %v", fl.Type, fl.At.Duration, err)
		}
	}
}

func (f *faults) apply(ctx context.Context, fl scenario.Fault) error {
	node := ""
	if fl.Node != nil {
		node = cluster.NodeName(fl.Pool, *fl.Node)
	}
	at := fl.At.Duration
	switch fl.Type {
	case scenario.FaultGPUUnhealthy, scenario.FaultGPURecover:
		fault := fl.Fault
		if fl.Type == scenario.FaultGPURecover {
			fault = "recover"
		}
		if err := f.fleet.Inject(ctx, node, *fl.GPU, fault); err != nil {
			return err
		}
		f.note("%s: %s on %s GPU %d", at, fault, node, *fl.GPU)
	case scenario.FaultNodeRemoved:
		if err := f.cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting node %s: %w", node, err)
		}
		f.note("%s: node %s removed", at, node)
	case scenario.FaultSchedulerRestart:
		return f.restart(ctx, fl)
	case scenario.FaultRacingScheduler:
		if f.stock {
			f.note("%s: no racing scheduler for the stock run (one kube-scheduler owns default-scheduler)", at)
			return nil
		}
		opts := f.schedOpts
		opts.Name = "gpu-scheduler-racer"
		if _, err := launch.StartScheduler(ctx, f.c, opts); err != nil {
			return err
		}
		f.note("%s: a second gpu-scheduler started, racing for the same GPUs", at)
	}
	return nil
}

func (f *faults) restart(ctx context.Context, fl scenario.Fault) error {
	down := fl.Down.Duration
	if f.stock && f.external {
		f.note("%s: scheduler restart skipped: the stock kube-scheduler belongs to the existing cluster", fl.At.Duration)
		return nil
	}
	if f.stock {
		for _, p := range f.c.Processes() {
			if p.Name == cluster.ComponentScheduler && p.Running {
				if err := killPID(p.PID); err != nil {
					return fmt.Errorf("killing kube-scheduler (pid %d): %w", p.PID, err)
				}
			}
		}
		if err := sleepCtx(ctx, down); err != nil {
			return err
		}
		// The harness restarts the stock scheduler once it sees the old one gone.
		if err := waitFor(ctx, 30*time.Second, func() bool { return f.c.StartStockScheduler(ctx) == nil }); err != nil {
			return fmt.Errorf("restarting kube-scheduler: %w", err)
		}
		f.note("%s: kube-scheduler killed and restarted after %s", fl.At.Duration, down)
		return nil
	}
	f.mu.Lock()
	s := f.sched
	f.restarts++
	n := f.restarts
	f.mu.Unlock()
	if s != nil {
		if err := s.Kill(); err != nil {
			return fmt.Errorf("killing gpu-scheduler (pid %d): %w", s.PID(), err)
		}
	}
	if err := sleepCtx(ctx, down); err != nil {
		return err
	}
	opts := f.schedOpts
	// The same scheduler comes back, as a restarted container does under its pod's name: it
	// keeps its identity among its peers, and with it its share of the pods.
	opts.Identity = cmp.Or(opts.Identity, opts.Name, "gpu-scheduler")
	opts.Name = fmt.Sprintf("gpu-scheduler-restart%d", n)
	ns, err := launch.StartScheduler(ctx, f.c, opts)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.sched = ns
	f.mu.Unlock()
	f.note("%s: gpu-scheduler killed (SIGKILL) and restarted after %s", fl.At.Duration, down)
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
