// Package metrics holds the agent's Prometheus metrics, registered once in the legacy registry
// that /metrics serves. Until Register is called they are no-ops, which keeps tests hermetic.
package metrics

import (
	"strconv"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// The project's one metric prefix is gpu_scheduler_; the agent's own series are
// gpu_scheduler_agent_*. (Telemetry named after NVIDIA's DCGM exporter keeps DCGM's names, so
// that existing dashboards read it.)
const (
	namespace = "gpu_scheduler"
	subsystem = "agent"
)

var (
	// GPUHealth is 1 for a Healthy GPU, 0 for Unhealthy and -1 for Unknown.
	GPUHealth = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "gpu_health",
		Help:           "Health of each GPU: 1 Healthy, 0 Unhealthy, -1 Unknown.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"node", "gpu"})
	// Events counts the NVML events seen, by kind (xid-critical, xid-ignored, double-bit-ecc, lost).
	Events = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "nvml_events_total",
		Help:           "NVML health events seen, by kind.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	// StatusWrites counts GpuNodeStatus writes, by result (created, updated, conflict, error, and
	// refused: the status is another release's, see status.OwnedError).
	StatusWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "status_writes_total",
		Help:           "GpuNodeStatus writes to the API server, by result.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	// LivenessWrites counts the writes of the agents' liveness Leases, by result (created,
	// renewed, conflict, error): the agent's liveness signal (package agent/liveness).
	LivenessWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "liveness_lease_writes_total",
		Help:           "Writes of the node agent's liveness Lease to the API server, by result.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	// MPSDaemons is how many MPS control daemons the agent runs (one per GPU Shared pods hold,
	// with --mps).
	MPSDaemons = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "mps_daemons",
		Help:           "MPS control daemons the agent runs, one per GPU that Shared pods hold (--mps).",
		StabilityLevel: metrics.ALPHA,
	})
	// MPSRestarts counts MPS control daemons that died and were started again.
	MPSRestarts = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "mps_daemon_restarts_total",
		Help:           "MPS control daemons that died and were started again.",
		StabilityLevel: metrics.ALPHA,
	})
	// NVMLInitFailures counts failed NVML initialisations.
	NVMLInitFailures = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "nvml_init_failures_total",
		Help:           "Failed NVML initialisations; the node's GPUs are Unknown until one succeeds.",
		StabilityLevel: metrics.ALPHA,
	})
	// XidErrors counts Xid errors per GPU and code, critical or not: an operator reads which
	// GPU threw which Xid, and alerts on the rate.
	XidErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "xid_errors_total",
		Help:           "Xid errors reported by NVML, by node, GPU index (unknown when NVML could not say) and Xid code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"node", "gpu", "xid"})
	// ECCErrors counts uncorrectable ECC errors per GPU (NVML reports double-bit errors as
	// events; single-bit ones are corrected and not events).
	ECCErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "ecc_errors_total",
		Help:           "Uncorrectable (double-bit) ECC errors reported by NVML, by node and GPU index.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"node", "gpu", "type"})
	// LabelPatches counts node label patches.
	LabelPatches = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "node_label_patches_total",
		Help:           "Patches of the GPU labels on Node objects.",
		StabilityLevel: metrics.ALPHA,
	})
)

var once sync.Once

// Register registers the metrics in the legacy registry; later calls do nothing.
func Register() {
	once.Do(func() {
		legacyregistry.MustRegister(GPUHealth, Events, XidErrors, ECCErrors, StatusWrites, LivenessWrites, NVMLInitFailures, LabelPatches, MPSDaemons, MPSRestarts)
	})
}

// SetHealth records GPU id's health on node.
func SetHealth(node string, id int32, h apiv1.Health) {
	v := -1.0
	switch h {
	case apiv1.Healthy:
		v = 1
	case apiv1.Unhealthy:
		v = 0
	}
	GPUHealth.WithLabelValues(node, strconv.Itoa(int(id))).Set(v)
}

// GPULabel is the gpu label value of a GPU index; "unknown" when NVML could not say which.
func GPULabel(index int) string {
	if index < 0 {
		return "unknown"
	}
	return strconv.Itoa(index)
}

// ForgetNode drops node's per-GPU series (fleet mode, when a node goes away).
func ForgetNode(node string) {
	for _, v := range []*metrics.GaugeVec{GPUHealth} {
		if v.IsCreated() { // not registered: nothing recorded (component-base's vector is nil until then)
			v.DeletePartialMatch(map[string]string{"node": node})
		}
	}
	for _, v := range []*metrics.CounterVec{XidErrors, ECCErrors} {
		if v.IsCreated() {
			v.DeletePartialMatch(map[string]string{"node": node})
		}
	}
}
