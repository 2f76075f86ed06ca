// Package scenario reads simulator scenarios (scenarios/*.yaml): a versioned, strictly decoded
// file that states node pools, a workload, faults on a timeline, a seed and the expectations a
// run must meet. Load decodes and validates one file; Expand turns its workload into the exact,
// seeded list of pods a run plays.
package scenario

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
)

// APIVersion and Kind every scenario file starts with.
const (
	APIVersion = "sim.gpu.scheduling/v1alpha1"
	Kind       = "Scenario"
)

// Scenario is one scenario file.
type Scenario struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata names the scenario.
type Metadata struct {
	// Name is a DNS label; reports are written under reports/<name>-<time>/.
	Name string `json:"name"`
	// Description is one or two sentences shown in the report.
	Description string `json:"description,omitempty"`
}

// Spec is what the run does.
type Spec struct {
	// Seed makes the workload reproducible: the same seed gives the same pods, in the same
	// order, with the same claims, arrival times and durations.
	Seed int64 `json:"seed"`
	// NodePools are the kwok GPU nodes, created before the workload starts.
	NodePools []NodePool `json:"nodePools"`
	// Scheduler tunes the gpu-scheduler under test.
	Scheduler SchedulerSpec `json:"scheduler,omitempty"`
	// Workload is the pods and their claims.
	Workload Workload `json:"workload"`
	// Faults happen at offsets from the start of the workload.
	Faults []Fault `json:"faults,omitempty"`
	// Expectations turn the run into an acceptance check.
	Expectations Expectations `json:"expectations,omitempty"`
	// Baseline is the comparison run with the stock kube-scheduler.
	Baseline Baseline `json:"baseline,omitzero"`
	// Timeout bounds the workload phase of each run (default 10m): pods still pending then
	// count as unscheduled.
	Timeout Duration `json:"timeout,omitzero"`
}

// NodePool is a group of identical fake GPU nodes named <name>-<index, 5 digits>.
type NodePool struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	// Topology names a hardware preset (scenarios/hardware/<name>.yaml); Hardware describes the
	// node inline, HardwareFile in a file of its own (relative to the scenario). Give exactly one.
	Topology     string         `json:"topology,omitempty"`
	Hardware     *mock.Hardware `json:"hardware,omitempty"`
	HardwareFile string         `json:"hardwareFile,omitempty"`
	// GPUsPerNode defaults to the topology's GPU count; it may not differ from it.
	GPUsPerNode int               `json:"gpusPerNode,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Taints      []Taint           `json:"taints,omitempty"`
	// CPUMilli and MemoryMiB are each node's capacity (default 128 cores and 1 TiB); a trace's
	// node list sets them.
	CPUMilli  int `json:"cpuMilli,omitempty"`
	MemoryMiB int `json:"memoryMiB,omitempty"`
}

// Taint on every node of a pool.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// SchedulerSpec tunes the gpu-scheduler under test.
type SchedulerSpec struct {
	// NodeStrategy is the plugin's nodeStrategy arg: binpack, spread, least-utilized,
	// round-robin, random or cost-aware.
	NodeStrategy string `json:"nodeStrategy,omitempty"`
	// QPS of the scheduler's API client; default 1000.
	QPS int `json:"qps,omitempty"`
}

// Workload says which pods arrive when. Arrivals come from exactly one of: Arrival (Pods pods
// at a rate), Bursts, Arrival together with Bursts, or Trace (an explicit timed list).
type Workload struct {
	// Namespace of the pods and claims; default "sim".
	Namespace string `json:"namespace,omitempty"`
	// Pods is how many pods Arrival generates.
	Pods int `json:"pods,omitempty"`
	// Arrival is the process that spaces the Pods pods out.
	Arrival *Arrival `json:"arrival,omitempty"`
	// Bursts add groups of pods that all arrive at one instant.
	Bursts []Burst `json:"bursts,omitempty"`
	// Trace is an explicit list, for replaying an external trace; Mix is not used then.
	Trace []TraceEntry `json:"trace,omitempty"`
	// TraceFile replays a pod (and node) list from a CSV or JSON-lines file (trace.go); Load
	// turns it into Trace entries (and node pools).
	TraceFile *TraceFile `json:"traceFile,omitempty"`
	// Mix is the weighted choice of claims (and run times) for generated pods.
	Mix []MixEntry `json:"mix,omitempty"`
	// Deterministic creates one pod at a time and waits until it is bound (or cannot be)
	// before creating the next, so that the same seed also gives the same placements.
	Deterministic bool `json:"deterministic,omitempty"`
	// ClaimTemplates are the GpuClaimTemplates the controllers' pod templates name.
	ClaimTemplates []ClaimTemplate `json:"claimTemplates,omitempty"`
	// Controllers are Jobs and Deployments whose pod template names a claim template:
	// kube-controller-manager stamps out their pods and gpu-controller makes each pod's claim.
	// They replace pods, arrival, bursts, mix and trace.
	Controllers []Controller `json:"controllers,omitempty"`
}

// HasGangTopology tells whether some gang of the workload states gangTopology.
func (w Workload) HasGangTopology() bool {
	for _, m := range w.Mix {
		if m.Gang > 1 && m.Claim.GangTopology != nil {
			return true
		}
	}
	for _, e := range w.Trace {
		if e.Gang != "" && e.Claim != nil && e.Claim.GangTopology != nil {
			return true
		}
	}
	return false
}

// ClaimTemplate is one GpuClaimTemplate of the workload.
type ClaimTemplate struct {
	// Name of the GpuClaimTemplate object.
	Name string `json:"name"`
	// Claim is the spec of every claim made from it (for the stock scheduler: nvidia.com/gpu:
	// count and the selector as a nodeSelector).
	Claim ClaimSpec `json:"claim"`
}

// Controller kinds.
const (
	ControllerJob        = "Job"
	ControllerDeployment = "Deployment"
)

// Controller is one Job or Deployment of the workload.
type Controller struct {
	// Kind is Job or Deployment.
	Kind string `json:"kind"`
	// Name of the object; its pods are named after it by its controller.
	Name string `json:"name"`
	// At is when the object is created, from the start of the workload.
	At Duration `json:"at"`
	// Replicas is a Deployment's replicas, or a Job's completions and parallelism (all its pods
	// run at once).
	Replicas int `json:"replicas"`
	// Indexed makes a Job's completionMode Indexed (each pod gets a completion index).
	Indexed bool `json:"indexed,omitempty"`
	// ClaimTemplate names an entry of claimTemplates.
	ClaimTemplate string `json:"claimTemplate"`
	// Duration is how long each pod of a Job runs (kwok then completes it); 0 runs until the
	// end. A Deployment's pods always run until the end.
	Duration Duration `json:"duration,omitzero"`
}

// Arrival process kinds.
const (
	ArrivalPoisson = "poisson"
	ArrivalUniform = "uniform"
)

// Arrival spaces out Workload.Pods pods.
type Arrival struct {
	// Process is poisson (exponential gaps, the default) or uniform (equal gaps).
	Process string `json:"process,omitempty"`
	// Rate is the mean arrival rate in pods per second.
	Rate float64 `json:"rate"`
	// Start offsets the first arrival.
	Start Duration `json:"start,omitzero"`
}

// Burst is a group of pods arriving at one instant.
type Burst struct {
	At   Duration `json:"at"`
	Pods int      `json:"pods"`
}

// MixEntry is one kind of pod in the generated workload.
type MixEntry struct {
	// Name labels the kind in the report; default "<count>gpu-<policy>".
	Name   string    `json:"name,omitempty"`
	Weight int       `json:"weight"`
	Claim  ClaimSpec `json:"claim"`
	// Duration is how long the pod runs once started (kwok then completes it); a fixed
	// value or a uniform range. Zero means the pod runs until the run ends.
	Duration DurationRange `json:"duration,omitzero"`
	// Gang makes each arrival of this kind a gang of Gang pods (2 or more), created at the
	// same instant, each with its own claim, sharing a gangRef: gpu-scheduler binds them all
	// or none. The stock scheduler places them one by one.
	Gang int `json:"gang,omitempty"`
}

// DurationRange is either fixed (Min only, or Min == Max) or uniform in [Min, Max].
type DurationRange struct {
	Min Duration `json:"min,omitzero"`
	Max Duration `json:"max,omitzero"`
}

// ClaimSpec is the GpuClaim a pod names (for the stock scheduler: nvidia.com/gpu: Count and
// the selector as a nodeSelector).
type ClaimSpec struct {
	Count       int               `json:"count"`
	Policy      string            `json:"policy,omitempty"`
	PreferIDs   []int             `json:"preferIds,omitempty"`
	Exclusivity string            `json:"exclusivity,omitempty"`
	Topology    *TopologySpec     `json:"topology,omitempty"`
	Selector    map[string]string `json:"selector,omitempty"`
	// GangTopology places a gang's nodes inside one domain of a node-label level (the claim's
	// spec.gangTopology); only for pods of a gang. The stock runs cannot express it: the one
	// with baseline.gangPodAffinity gives each member a required podAffinity to its gang on
	// the level instead, the plain one nothing.
	GangTopology *GangTopologySpec `json:"gangTopology,omitempty"`
	// Share is a Shared claim's part of each GPU (the claim's spec.devices.share); the stock
	// runs cannot express it and ask for whole GPUs.
	Share *ShareSpec `json:"share,omitempty"`
}

// ShareSpec is a Shared claim's part of each GPU, in percent.
type ShareSpec struct {
	ComputePercent int `json:"computePercent,omitempty"`
	MemoryPercent  int `json:"memoryPercent,omitempty"`
}

// GangTopologySpec is the gang's locality at a topology level.
type GangTopologySpec struct {
	// Level is the node label whose value names a domain, e.g. nvidia.com/gpu.clique.
	Level string `json:"level"`
	// Mode is Required or Preferred (default).
	Mode string `json:"mode,omitempty"`
}

// TopologySpec is the claim's NVLink requirement.
type TopologySpec struct {
	Mode             string `json:"mode,omitempty"`
	MinBandwidthGBps int    `json:"minBandwidthGBps,omitempty"`
}

// TraceEntry is one pod of an explicit workload.
type TraceEntry struct {
	// Name of the pod; default trace-<index>.
	Name string `json:"name,omitempty"`
	// At is the creation offset.
	At Duration `json:"at"`
	// GPUs is a shorthand for claim.count (with the claim's other fields defaulted).
	GPUs int `json:"gpus,omitempty"`
	// Claim is the full claim; exclusive with GPUs.
	Claim *ClaimSpec `json:"claim,omitempty"`
	// Duration is the run time once started.
	Duration Duration `json:"duration,omitzero"`
	// DeleteAt deletes the pod at this offset, whatever its state.
	DeleteAt *Duration `json:"deleteAt,omitzero"`
	// Gang names the gang the pod belongs to; the entries with the same gang are one gang
	// (at least two), and its size is their number.
	Gang string `json:"gang,omitempty"`
	// CPUMilli and MemoryMiB the pod requests (default 100m and 128Mi).
	CPUMilli  int `json:"cpuMilli,omitempty"`
	MemoryMiB int `json:"memoryMiB,omitempty"`
}

// Fault types.
const (
	FaultGPUUnhealthy     = "GPUUnhealthy"
	FaultGPURecover       = "GPURecover"
	FaultNodeRemoved      = "NodeRemoved"
	FaultSchedulerRestart = "SchedulerRestart"
	FaultRacingScheduler  = "RacingScheduler"
)

// Fault is one event on the timeline.
type Fault struct {
	At   Duration `json:"at"`
	Type string   `json:"type"`
	// Pool and Node (an index in the pool) name the node for GPU and node faults.
	Pool string `json:"pool,omitempty"`
	Node *int   `json:"node,omitempty"`
	// GPU is the GPU index for GPUUnhealthy and GPURecover.
	GPU *int `json:"gpu,omitempty"`
	// Fault is what the mock NVML reports for GPUUnhealthy: xid<code> (default xid79), dbe,
	// lost or remap-failure.
	Fault string `json:"fault,omitempty"`
	// Down is how long the scheduler stays killed for SchedulerRestart (default 5s).
	Down Duration `json:"down,omitzero"`
}

// Expectations a run must meet; unset safety limits default to 0. They apply to the
// gpu-scheduler run; the baseline is reported, not judged.
type Expectations struct {
	MaxDoubleBookedGPUs     *int `json:"maxDoubleBookedGPUs,omitempty"`
	MaxUnhealthyAllocations *int `json:"maxUnhealthyAllocations,omitempty"`
	MaxLeasesLeft           *int `json:"maxLeasesLeft,omitempty"`
	// MaxOvercommittedGPUs: Shared GPUs whose holders' shares summed past the GPU's compute
	// (100 %) or memory, judged twice: at every binding from the bound pods' share
	// annotations, and at every change of a GPU lease from its shares annotation.
	MaxOvercommittedGPUs *int     `json:"maxOvercommittedGPUs,omitempty"`
	MinIslandLocalRatio  *float64 `json:"minIslandLocalRatio,omitempty"`
	// MaxPartialGangs: gangs with some but not all members bound at the end.
	MaxPartialGangs *int `json:"maxPartialGangs,omitempty"`
	// MaxGangIdleGPUSeconds: GPU time gang members held while waiting for their mates.
	MaxGangIdleGPUSeconds *float64 `json:"maxGangIdleGPUSeconds,omitempty"`
	// AllScheduledWithin: every pod is bound by this offset from the start of the workload.
	AllScheduledWithin *Duration `json:"allScheduledWithin,omitzero"`
	// MaxClaimsLeft and MaxPodsLeft: GpuClaims and pods left in the workload's namespace after
	// the run deleted its Jobs and Deployments. Counted, and default 0, for workloads of
	// controllers: a claim made from a template must go with its pod.
	MaxClaimsLeft *int `json:"maxClaimsLeft,omitempty"`
	MaxPodsLeft   *int `json:"maxPodsLeft,omitempty"`
	// MinThroughputVsPremade: the throughput of the bare pods naming the claim templates over
	// that of the same bare pods naming pre-made claims (both runs come with
	// baseline.premadeClaims), e.g. 0.9. Both runs create the same pods at the same times, so
	// they differ by the templates alone, the claim create inside the workload included; the
	// Jobs and Deployments run's ratio to the pre-made one (kube-controller-manager's work on
	// top) is reported beside it, not judged.
	MinThroughputVsPremade *float64 `json:"minThroughputVsPremade,omitempty"`
}

// Baseline configures the comparison runs.
type Baseline struct {
	// Disabled skips the baseline runs (nvidia.com/gpu and DRA).
	Disabled bool `json:"disabled,omitempty"`
	// DRA adds a third run: the stock kube-scheduler allocating the GPUs itself through Dynamic
	// Resource Allocation (ResourceSlices published from the agents' discovery, a
	// ResourceClaimTemplate per claim shape). Off by default: it costs a third cluster.
	DRA bool `json:"dra,omitempty"`
	// PremadeClaims, for a workload of controllers, adds two gpu-scheduler runs of the same
	// pods (count, claims, arrival) as bare pods created by the simulator: one naming claims
	// made before the clock, one naming the claim templates (each claim made while its pod is
	// bound, inside the workload). Together they measure what the claim templates cost against
	// hand-made claims, without kube-controller-manager's Job and ReplicaSet work. Each runs
	// after the run before it removed what it made, on the same control plane and nodes.
	PremadeClaims bool `json:"premadeClaims,omitempty"`
	// GangPodAffinity adds a run of the stock kube-scheduler (nvidia.com/gpu) in which every
	// member of a gang whose claim states gangTopology carries what NVIDIA's ComputeDomain
	// examples put on the workers of one job: a required podAffinity, whose label selector
	// matches the pods of its gang, with topologyKey the gangTopology level. It runs after the
	// plain stock run, on the same control plane and nodes.
	GangPodAffinity bool `json:"gangPodAffinity,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("30s", "1m30s").
type Duration struct{ time.Duration }

// D makes a Duration.
func D(d time.Duration) Duration { return Duration{d} }

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration; write it like \"30s\" or \"1m30s\"", s)
	}
	d.Duration = v
	return nil
}
