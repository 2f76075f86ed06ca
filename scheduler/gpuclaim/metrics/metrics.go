// Package metrics holds the GpuClaimPlugin's domain metrics. The framework already times every
// plugin call; these count what only the plugin knows. Register them once with Register.
package metrics

import (
	"sort"
	"strconv"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
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
	// AdmitWait is how long PreBind waited for the kubelet to admit the pod before it of the
	// same GPU count on the node (device-plugin mode only).
	AdmitWait = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "admit_wait_duration_seconds",
		Help:           "Time a pod waited in PreBind for its node's kubelet to admit the pod bound before it with the same GPU count (device-plugin mode).",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 18),
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
	// Placements counts the outcomes of the plugin's scheduling attempts: result bound (reason
	// allocated), unschedulable (with the reason the pod waits) or error (API failures, lost
	// lease races). Reasons are a short fixed set (Reason* constants), never free text.
	Placements = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "placements_total",
		Help:           "Scheduling attempts of GPU pods, by result (bound, unschedulable, error) and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result", "reason"})
	// AllocationDuration is the end-to-end latency an operator feels: from the pod's creation
	// to its GPUs locked and the pod bound (queueing, gang waits and retries included).
	AllocationDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "allocation_duration_seconds",
		Help:           "Time from a GPU pod's creation to its binding with GPUs allocated.",
		Buckets:        metrics.ExponentialBuckets(0.01, 2, 16),
		StabilityLevel: metrics.ALPHA,
	})
	// GangWait is how long a placed gang member held its GPUs in Permit waiting for the rest
	// of its gang: allowed when the gang completed, rejected when it timed out or a mate failed.
	GangWait = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "gang_wait_duration_seconds",
		Help:           "Time a placed gang member waited in Permit for its gang, by result (allowed, rejected).",
		Buckets:        metrics.ExponentialBuckets(0.01, 2, 17),
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	// StaleLeases is what the last orphan sweep found: GPU leases past their grace period
	// whose holder pods are gone. They are released as found; a value that stays above 0
	// means releasing them fails.
	StaleLeases = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "stale_leases",
		Help:           "GPU leases whose holder pod is gone, found by the last orphan sweep (released as found).",
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

// Placement results.
const (
	ResultBound         = "bound"
	ResultUnschedulable = "unschedulable"
	ResultError         = "error"
)

// Placement reasons.
const (
	ReasonAllocated = "allocated"
	// ReasonInvalidPod: the pod's own annotations are wrong (empty claim name, bad strategy, a bad
	// gpu-scheduling-map entry).
	ReasonInvalidPod = "invalid_pod"
	// ReasonClaimNotFound: the claim is missing, not yet made from its template, not the
	// pod's, or being deleted.
	ReasonClaimNotFound = "claim_not_found"
	ReasonInvalidClaim  = "invalid_claim"
	ReasonClaimInUse    = "claim_in_use"
	// ReasonGangIncomplete: the gang lacks claims or pods, or room for all its members.
	ReasonGangIncomplete = "gang_incomplete"
	// ReasonNoFit: no node has the GPUs free (or fresh status) for the claim.
	ReasonNoFit = "no_fit"
	// ReasonFiltered: nodes had the GPUs but another filter (taint, selector) refused them.
	ReasonFiltered      = "filtered"
	ReasonLeaseConflict = "lease_conflict"
	ReasonAPI           = "api_error"
	// ReasonAdmitWait: the node's kubelet did not admit the pod before it of the same GPU
	// count in time (device-plugin mode binds those one at a time).
	ReasonAdmitWait = "admit_wait"
)

// reasons are the label pairs placements_total starts with at 0, so that rates and alerts
// over them exist before the first event.
var reasons = [][2]string{
	{ResultBound, ReasonAllocated},
	{ResultUnschedulable, ReasonInvalidPod}, {ResultUnschedulable, ReasonClaimNotFound},
	{ResultUnschedulable, ReasonInvalidClaim}, {ResultUnschedulable, ReasonClaimInUse},
	{ResultUnschedulable, ReasonGangIncomplete}, {ResultUnschedulable, ReasonNoFit},
	{ResultUnschedulable, ReasonFiltered},
	{ResultError, ReasonLeaseConflict}, {ResultError, ReasonAPI}, {ResultError, ReasonAdmitWait},
}

// GPUCount is one gauge sample of gpu_scheduler_gpus: the ledger counts them.
type GPUCount = ledger.GPUCount

// GPU states of gpu_scheduler_gpus.
const (
	StateFree      = ledger.StateFree
	StateAllocated = ledger.StateAllocated
	StateUnhealthy = ledger.StateUnhealthy
)

// Sources is what the fleet gauges read at each scrape: the scheduler process's plugin state.
type Sources interface {
	// GPUCounts is gpu_scheduler_gpus: the GPUs by model and state.
	GPUCounts() []GPUCount
	// PartCounts is gpu_scheduler_shared_gpus and gpu_scheduler_mig_devices: the Shared GPUs by
	// model and sharers, the MIG devices by model, profile and state.
	PartCounts() ([]ledger.SharerCount, []ledger.MIGCount)
	// Pending is how many GPU pods the plugin turned away still wait and how long the oldest
	// has existed; ok is false before the plugin exists.
	Pending() (count int, oldestSeconds float64, ok bool)
	// Peers is how many gpu-scheduler processes serve the profile (this one included) and how
	// many GPU pods this one leaves to the others (scheduler/peers); ok is false without peers.
	Peers() (size, leftToPeers int, ok bool)
}

var gpusDesc = metrics.NewDesc("gpu_scheduler_gpus",
	"GPUs the scheduler sees, by model (the agent's product name) and state: free (healthy, unheld), allocated (held by a pod), unhealthy (not Healthy).",
	[]string{"model", "state"}, nil, metrics.ALPHA, "")

var (
	sharedGPUsDesc = metrics.NewDesc("gpu_scheduler_shared_gpus",
		"GPUs held by Shared pods, by model and number of sharers (the pods sharing each; bounded by maxSharersPerGPU).",
		[]string{"model", "sharers"}, nil, metrics.ALPHA, "")
	migDevicesDesc = metrics.NewDesc("gpu_scheduler_mig_devices",
		"MIG devices the agents publish, by model, profile and state: free (healthy, unused), allocated (in use by a pod), unhealthy.",
		[]string{"model", "profile", "state"}, nil, metrics.ALPHA, "")
	pendingDesc = metrics.NewDesc("gpu_scheduler_pending_claims",
		"GPU pods (one claim each) the scheduler turned away that still wait for GPUs.",
		nil, nil, metrics.ALPHA, "")
	pendingAgeDesc = metrics.NewDesc("gpu_scheduler_pending_claims_max_age_seconds",
		"Age of the oldest GPU pod that still waits for GPUs; 0 when none waits.",
		nil, nil, metrics.ALPHA, "")
	peersDesc = metrics.NewDesc("gpu_scheduler_peers",
		"gpu-scheduler processes that serve this profile and divide its GPU pods among them, this one included (1: it schedules them all).",
		nil, nil, metrics.ALPHA, "")
	leftToPeersDesc = metrics.NewDesc("gpu_scheduler_pods_left_to_peers",
		"Pending GPU pods this process leaves to the peer that owns them.",
		nil, nil, metrics.ALPHA, "")
)

// fleetCollector computes gpu_scheduler_gpus, the pending-claims and the peer gauges at scrape
// time from the plugin's state, so they are never stale and cost nothing between scrapes.
type fleetCollector struct {
	metrics.BaseStableCollector
	src Sources
}

func (*fleetCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- gpusDesc
	ch <- sharedGPUsDesc
	ch <- migDevicesDesc
	ch <- pendingDesc
	ch <- pendingAgeDesc
	ch <- peersDesc
	ch <- leftToPeersDesc
}

func (c *fleetCollector) CollectWithStability(ch chan<- metrics.Metric) {
	if c.src == nil {
		return
	}
	if n, left, ok := c.src.Peers(); ok {
		ch <- metrics.NewLazyConstMetric(peersDesc, metrics.GaugeValue, float64(n))
		ch <- metrics.NewLazyConstMetric(leftToPeersDesc, metrics.GaugeValue, float64(left))
	}
	if n, age, ok := c.src.Pending(); ok {
		ch <- metrics.NewLazyConstMetric(pendingDesc, metrics.GaugeValue, float64(n))
		ch <- metrics.NewLazyConstMetric(pendingAgeDesc, metrics.GaugeValue, age)
	}
	counts := c.src.GPUCounts()
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].Model != counts[j].Model {
			return counts[i].Model < counts[j].Model
		}
		return counts[i].State < counts[j].State
	})
	for _, c := range counts {
		ch <- metrics.NewLazyConstMetric(gpusDesc, metrics.GaugeValue, float64(c.Count), c.Model, c.State)
	}
	shared, mig := c.src.PartCounts()
	for _, s := range shared {
		ch <- metrics.NewLazyConstMetric(sharedGPUsDesc, metrics.GaugeValue, float64(s.Count), s.Model, strconv.Itoa(s.Sharers))
	}
	for _, m := range mig {
		ch <- metrics.NewLazyConstMetric(migDevicesDesc, metrics.GaugeValue, float64(m.Count), m.Model, m.Profile, m.State)
	}
}

var once sync.Once

// Register registers the metrics with the legacy registry the scheduler serves on /metrics;
// the fleet gauges read src at each scrape (nil: they are left out). Only the first call
// registers.
func Register(src Sources) {
	once.Do(func() {
		legacyregistry.MustRegister(Allocations, LeaseConflicts, AllocationLatency, AdmitWait, MultiGPUAllocations, IslandLocalAllocations, LeasesReleased,
			Placements, AllocationDuration, GangWait, StaleLeases)
		legacyregistry.CustomMustRegister(&fleetCollector{src: src})
		for _, r := range reasons {
			Placements.WithLabelValues(r[0], r[1])
		}
		GangWait.WithLabelValues("allowed")
		GangWait.WithLabelValues("rejected")
	})
}

// Placement counts one attempt's outcome.
func Placement(result, reason string) { Placements.WithLabelValues(result, reason).Inc() }
