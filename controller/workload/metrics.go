package workload

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The workload counters of seed 004 under the project's one metric prefix, gpu_scheduler_
// (the scheduler plugin's metrics use it too), in controller-runtime's registry so that the
// manager's /metrics serves them.
var (
	scheduledTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_scheduler_workloads_scheduled_total",
		Help: "GpuWorkloads whose replicas all got a node, by node strategy (\"default\" when the workload names none).",
	}, []string{"strategy"})
	failedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_scheduler_workloads_failed_total",
		Help: "GpuWorkloads that ran out of retries, by the reason of the last failure.",
	}, []string{"reason"})
	retriesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpu_scheduler_workload_retries_total",
		Help: "Pods of GpuWorkloads recreated after a failure (a gang retried counts once).",
	})
	reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_scheduler_workload_reconcile_duration_seconds",
		Help:    "Time of one GpuWorkload reconcile, by result (success, error, requeue).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"result"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(scheduledTotal, failedTotal, retriesTotal, reconcileDuration)
	})
}
