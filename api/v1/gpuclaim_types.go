package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Policy says how the GPUs of a claim are picked on the chosen node.
// +kubebuilder:validation:Enum=contiguous;spread;preferIds
type Policy string

const (
	// PolicyContiguous picks adjacent GPU IDs, inside one NVLink island when possible.
	PolicyContiguous Policy = "contiguous"
	// PolicySpread spreads the GPUs across islands.
	PolicySpread Policy = "spread"
	// PolicyPreferIDs picks the IDs in preferIds when they are free and healthy, and falls back otherwise.
	PolicyPreferIDs Policy = "preferIds"
)

// Exclusivity says whether a GPU may be shared with other pods.
// +kubebuilder:validation:Enum=Exclusive;Shared;MIG
type Exclusivity string

const (
	// Exclusive dedicates each GPU to one pod.
	Exclusive Exclusivity = "Exclusive"
	// Shared lets several Shared pods use a GPU (no isolation); never one that an Exclusive pod holds.
	Shared Exclusivity = "Shared"
	// MIG asks for MIG devices (Multi-Instance GPU) of one profile (devices.migProfile): each is
	// a hardware partition of a GPU in MIG mode, with its own memory and compute, held by one
	// pod. Whole-GPU claims never take a GPU in MIG mode, and MIG claims take nothing else.
	MIG Exclusivity = "MIG"
)

// TopologyMode says how strongly a claim needs NVLink-local GPUs.
// +kubebuilder:validation:Enum=Required;Preferred;Ignore
type TopologyMode string

const (
	// TopologyRequired fails rather than place GPUs across islands or below minBandwidthGBps.
	TopologyRequired TopologyMode = "Required"
	// TopologyPreferred tries to meet the requirement and falls back when it cannot.
	TopologyPreferred TopologyMode = "Preferred"
	// TopologyIgnore does not consider topology at all.
	TopologyIgnore TopologyMode = "Ignore"
)

// ClaimPhase is where a claim is in its life.
// +kubebuilder:validation:Enum=Pending;Reserved;Bound;Failed
type ClaimPhase string

const (
	// ClaimPending waits for a pod to be scheduled with it (also after its pod went away).
	ClaimPending ClaimPhase = "Pending"
	// ClaimReserved has GPUs chosen and being locked for a pod.
	ClaimReserved ClaimPhase = "Reserved"
	// ClaimBound holds locked GPUs on a node for a pod.
	ClaimBound ClaimPhase = "Bound"
	// ClaimFailed can never be satisfied as written; the message says why.
	ClaimFailed ClaimPhase = "Failed"
)

// MaxGPUsPerNode bounds the GPUs of one node, and so the devices of a GpuNodeStatus (the CRD
// schema's maxItems): no node carries more (the largest hardware preset, scenarios/hardware, has
// 16), and a status listing thousands would slow every placement.
const MaxGPUsPerNode = 64

// MaxGPUID is the largest GPU ID (the NVML index on its node) the project accepts anywhere: in a
// GpuNodeStatus (the schema's maximum), in the ledger, in lease names and in the allocation
// annotations. A node's IDs are 0 to MaxGPUsPerNode-1.
const MaxGPUID = MaxGPUsPerNode - 1

// MaxGPUsPerClaim bounds devices.count; no single node carries more GPUs than this.
const MaxGPUsPerClaim = MaxGPUsPerNode

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=gclaim,categories=gpu
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="GPUs",type=string,JSONPath=`.status.gpuIds`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuClaim is a declarative request for GPUs, named by a pod through the gpu.scheduling/claim
// annotation. One claim serves one live pod at a time.
// +kubebuilder:validation:XValidation:rule="!has(self.spec.gangTopology) || (has(self.spec.gangRef) && size(self.spec.gangRef) > 0)",message="gangTopology places the nodes of a gang together: set spec.gangRef",fieldPath=".spec.gangTopology"
type GpuClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GpuClaimSpec `json:"spec"`
	// +optional
	Status GpuClaimStatus `json:"status,omitempty"`
}

// GpuClaimSpec is what the user asks for.
// +kubebuilder:validation:XValidation:rule="!has(self.topology) || !has(self.topology.mode) || self.topology.mode != 'Required' || self.devices.policy != 'spread'",message="policy spread places GPUs across islands and cannot be combined with topology.mode Required; use Preferred or Ignore"
// +kubebuilder:validation:XValidation:rule="!has(self.gangSize) || (has(self.gangRef) && size(self.gangRef) > 0)",message="gangSize needs gangRef: name the gang the claim belongs to"
type GpuClaimSpec struct {
	// Devices describes the GPUs needed.
	// +required
	Devices DeviceRequest `json:"devices"`
	// Selector restricts the nodes the claim may land on.
	// +optional
	Selector *NodeSelector `json:"selector,omitempty"`
	// Topology states the NVLink needs. Absent means Preferred with no bandwidth minimum.
	// +optional
	Topology *TopologyRequirement `json:"topology,omitempty"`
	// GangRef names the gang (pod group) the claim belongs to: the claims of a namespace with
	// the same gangRef are scheduled all or nothing. No pod of the gang is bound until every
	// member has a pod and all of them have GPUs reserved at once.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	GangRef string `json:"gangRef,omitempty"`
	// GangSize is how many claims (one pod each) the gang has. Absent: the number of claims
	// with this gangRef that exist, so create them all before their pods.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	GangSize *int32 `json:"gangSize,omitempty"`
	// GangTopology places the nodes of the whole gang inside one domain of a topology level:
	// the nodes that share a value of a node label, such as one NVLink domain
	// (nvidia.com/gpu.clique, the same on the 18 trays of a GB200 NVL72 rack) or one rack. The
	// level must be one of the scheduler's topologyLevels. Every claim of the gang should state
	// the same; the first member placed decides for the gang.
	// +optional
	GangTopology *GangTopology `json:"gangTopology,omitempty"`
}

// GangTopology states where the nodes of a gang must, or should, be.
type GangTopology struct {
	// Level is the node label whose value names a domain, for example nvidia.com/gpu.clique.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +required
	Level string `json:"level"`
	// Mode is Required (the gang waits until one domain has room for all its pods, and says
	// which domain has the most) or Preferred (one domain when one has room, else the next
	// broader of the scheduler's topologyLevels, else anywhere).
	// +kubebuilder:default=Preferred
	// +optional
	Mode TopologyMode `json:"mode,omitempty"`
}

// DeviceRequest describes the GPUs of a claim.
// +kubebuilder:validation:XValidation:rule="(has(self.exclusivity) && self.exclusivity == 'MIG') == (has(self.migProfile) && size(self.migProfile) > 0)",message="migProfile is set exactly when exclusivity is MIG: name the MIG profile (for example 1g.10gb) with exclusivity: MIG"
// +kubebuilder:validation:XValidation:rule="!has(self.share) || (has(self.exclusivity) && self.exclusivity == 'Shared')",message="share is only used with exclusivity: Shared"
// +kubebuilder:validation:XValidation:rule="!(has(self.exclusivity) && self.exclusivity == 'MIG') || !has(self.policy) || self.policy != 'preferIds'",message="policy preferIds names whole GPUs; a MIG claim cannot use it"
// +kubebuilder:validation:XValidation:rule="self.policy != 'preferIds' || (has(self.preferIds) && size(self.preferIds) > 0)",message="preferIds must list at least one GPU ID when policy is preferIds"
// +kubebuilder:validation:XValidation:rule="!has(self.preferIds) || size(self.preferIds) == 0 || self.policy == 'preferIds'",message="preferIds is only used with policy: preferIds; set policy: preferIds or remove preferIds"
type DeviceRequest struct {
	// Count is the number of GPUs needed, on one node.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +required
	Count int32 `json:"count"`
	// Policy is the allocation strategy on the node.
	// +kubebuilder:default=contiguous
	// +optional
	Policy Policy `json:"policy,omitempty"`
	// PreferIDs are the GPU IDs to try first with policy preferIds.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Minimum=0
	// +kubebuilder:validation:items:Maximum=63
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="preferIds must not repeat a GPU ID"
	// +listType=atomic
	// +optional
	PreferIDs []int32 `json:"preferIds,omitempty"`
	// Exclusivity is the sharing mode.
	// +kubebuilder:default=Exclusive
	// +optional
	Exclusivity Exclusivity `json:"exclusivity,omitempty"`
	// MigProfile is the MIG profile of each of the count MIG devices, as NVIDIA names it
	// ("<compute slices>g.<memory>gb", for example 1g.10gb or 3g.40gb on an H100 80GB). Set
	// exactly when exclusivity is MIG. The devices are taken from the layout the node's
	// operator made (docs/sharing.md); on one node, possibly on several of its GPUs.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[1-8]g\.[0-9]+gb(\+[a-z]+)?$`
	// +optional
	MigProfile string `json:"migProfile,omitempty"`
	// Share is how much of each GPU a Shared claim uses: the scheduler never lets the shares of
	// a GPU's holders add up to more than its memory or 100 % of its compute. Absent: the claim
	// reserves no memory or compute and only counts as one of the GPU's sharers (bounded by the
	// scheduler's maxSharersPerGPU). Only with exclusivity Shared.
	// +optional
	Share *GPUShare `json:"share,omitempty"`
}

// GPUShare is a Shared claim's part of each of its GPUs. The container is told its limits
// (CUDA MPS's pinned memory limit and active thread percentage); docs/sharing.md says what is
// enforced and what is only accounted.
// +kubebuilder:validation:XValidation:rule="!(has(self.memoryMiB) && has(self.memoryPercent))",message="state the memory share once: memoryMiB or memoryPercent, not both"
// +kubebuilder:validation:XValidation:rule="has(self.memoryMiB) || has(self.memoryPercent) || has(self.computePercent)",message="share states memoryMiB, memoryPercent or computePercent"
type GPUShare struct {
	// MemoryMiB is the GPU memory the claim uses on each GPU, in MiB.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// MemoryPercent is the GPU memory the claim uses on each GPU, as a percentage of the GPU's
	// memory (resolved to MiB against the chosen GPU).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MemoryPercent int32 `json:"memoryPercent,omitempty"`
	// ComputePercent is the share of each GPU's streaming multiprocessors the claim uses.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	ComputePercent int32 `json:"computePercent,omitempty"`
}

// NodeSelector targets nodes by label.
type NodeSelector struct {
	// MatchLabels must all be present with these values on the node.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// TopologyRequirement states the NVLink needs of a claim.
type TopologyRequirement struct {
	// Mode is how strongly the requirement holds.
	// +kubebuilder:default=Preferred
	// +optional
	Mode TopologyMode `json:"mode,omitempty"`
	// MinBandwidthGBps is the minimum interconnect bandwidth of every chosen GPU to its island peers.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinBandwidthGBps int32 `json:"minBandwidthGBps,omitempty"`
}

// GpuClaimStatus reflects the scheduler's progress.
type GpuClaimStatus struct {
	// Phase is Pending, Reserved, Bound or Failed.
	// +optional
	Phase ClaimPhase `json:"phase,omitempty"`
	// NodeName is the node the GPUs are on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// GpuIDs are the allocated GPU IDs.
	// +listType=atomic
	// +optional
	GpuIDs []int32 `json:"gpuIds,omitempty"`
	// Allocated is "node:id,id", the same value as the pod's gpu.scheduling/allocated annotation.
	// +optional
	Allocated string `json:"allocated,omitempty"`
	// MigDevices are the MIG devices allocated to a MIG claim, "<gpu id>:<slot>" each, the same
	// value as the pod's gpu.scheduling/mig-devices annotation. GpuIDs then lists the GPU of
	// each.
	// +listType=atomic
	// +optional
	MigDevices []string `json:"migDevices,omitempty"`
	// Message says what happened, or what is wrong, in words.
	// +optional
	Message string `json:"message,omitempty"`
	// PodName is the pod that holds the claim.
	// +optional
	PodName string `json:"podName,omitempty"`
	// PodUID is the UID of the pod that holds the claim.
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// ObservedGeneration is the spec generation the status was written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuClaimList is a list of GpuClaims.
type GpuClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GpuClaim `json:"items"`
}
