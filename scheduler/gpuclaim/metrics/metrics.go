// Package metrics holds the GpuClaimPlugin's domain metrics. The framework already times every
// plugin call; these count what only the plugin knows. Register them once with Register.
package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const subsystem = "gpu_scheduler"

var (
	// Allocations counts pods given GPUs, by GPU count.
	Allocations = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "allocations_total",
		Help:           "Pods given GPUs, by number of GPUs.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"gpus"})
	// LeaseConflicts counts attempts that lost a GPU lease to another pod.
	LeaseConflicts = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "lease_conflicts_total",
		Help:           "Binding attempts that found a GPU lease already held by another pod.",
		StabilityLevel: metrics.ALPHA,
	})
	// AllocationLatency is the time to lock a pod's GPUs with leases.
	AllocationLatency = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "lease_acquire_duration_seconds",
		Help:           "Time to create the leases of one pod's GPUs.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 14),
		StabilityLevel: metrics.ALPHA,
	})
	// MultiGPUAllocations and IslandLocalAllocations give the island-local ratio.
	MultiGPUAllocations = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "multi_gpu_allocations_total",
		Help:           "Pods given more than one GPU.",
		StabilityLevel: metrics.ALPHA,
	})
	IslandLocalAllocations = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "island_local_allocations_total",
		Help:           "Pods given more than one GPU, all in one island.",
		StabilityLevel: metrics.ALPHA,
	})
	// LeasesReleased counts leases freed because their pod went away or finished.
	LeasesReleased = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "leases_released_total",
		Help:           "GPU leases released because their pod was deleted, finished or vanished.",
		StabilityLevel: metrics.ALPHA,
	})
)

var once sync.Once

// Register registers the metrics with the legacy registry the scheduler serves on /metrics.
func Register() {
	once.Do(func() {
		legacyregistry.MustRegister(Allocations, LeaseConflicts, AllocationLatency, MultiGPUAllocations, IslandLocalAllocations, LeasesReleased)
	})
}
