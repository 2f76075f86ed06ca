package runner

import (
	"context"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// createIdle is how long the processes' background CPU is sampled before the pre-made claims
// are created: a few seconds of agent writes, node heartbeats and the components' resyncs.
const createIdle = 3 * time.Second

// measureCreates runs create, which makes n objects, and returns what one of them cost each
// process in CPU seconds: the CPU used while create ran, less the background the same
// processes used in an idle window just before, scaled to create's duration.
//
// Why: a pod that names a GpuClaimTemplate costs one GpuClaim create more than a pod whose
// claim was made beforehand, and on two shared cores that create's CPU alone bounds how close
// the templated run's throughput can come to the pre-made run's. Measuring the creates the
// pre-made run makes anyway, before its clock, puts that bound into every report instead of
// leaving it to an estimate from differences between runs. The creates go out 32 at a time,
// faster than the workload makes them, so if anything they cost less here than inside the
// workload and the bound drawn from them is generous.
func measureCreates(ctx context.Context, c *cluster.Cluster, n int, create func() error) (map[string]float64, error) {
	idleFrom, idleStart := markCPU(c), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(createIdle):
	}
	busyFrom, busyStart := markCPU(c), time.Now()
	idle := busyStart.Sub(idleStart)
	if err := create(); err != nil {
		return nil, err
	}
	busy := time.Since(busyStart)
	return perObject(busyFrom.until(markCPU(c)), idleFrom.until(busyFrom), busy, idle, n), nil
}

// perObject is each process's CPU per object: what it spent while busy, less its background
// rate measured over idle times busy, divided by the n objects made. A process's figure may
// come out slightly negative when its background was noisier than its share of the work; the
// values are left as measured so that their sum stays unbiased.
func perObject(spent, background map[string]float64, busy, idle time.Duration, n int) map[string]float64 {
	if n <= 0 || idle <= 0 {
		return nil
	}
	scale := busy.Seconds() / idle.Seconds()
	out := make(map[string]float64, len(spent))
	for name, s := range spent {
		out[name] = (s - background[name]*scale) / float64(n)
	}
	return out
}
