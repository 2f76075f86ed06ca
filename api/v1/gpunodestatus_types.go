package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Health is the state of one GPU as the agent sees it.
// +kubebuilder:validation:Enum=Healthy;Unhealthy;Unknown
type Health string

const (
	// Healthy GPUs may be allocated.
	Healthy Health = "Healthy"
	// Unhealthy GPUs had a critical error (Xid, double-bit ECC, lost) and are never allocated.
	Unhealthy Health = "Unhealthy"
	// Unknown GPUs could not be read (NVML failed) and are never allocated.
	Unknown Health = "Unknown"
)

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gns,categories=gpu
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.total`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.healthy`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.free`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuNodeStatus is the GPU inventory and health of one node, written by the node agent and
// named after the node.
type GpuNodeStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec GpuNodeStatusSpec `json:"spec,omitempty"`
	// +optional
	Status GpuNodeStatusStatus `json:"status,omitempty"`
}

// GpuNodeStatusSpec names the node.
type GpuNodeStatusSpec struct {
	// NodeName is the Kubernetes node name.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// GpuNodeStatusStatus is what the agent read from the hardware.
type GpuNodeStatusStatus struct {
	// Devices lists the node's GPUs, at most 64 (MaxGPUsPerNode).
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=id
	// +optional
	Devices []Device `json:"devices,omitempty"`
	// Total is the number of GPUs on the node.
	// +optional
	Total int32 `json:"total,omitempty"`
	// Healthy is the number of Healthy GPUs.
	// +optional
	Healthy int32 `json:"healthy,omitempty"`
	// Free is the number of Healthy GPUs nobody holds.
	// +optional
	Free int32 `json:"free,omitempty"`
	// LastHeartbeatTime is when the agent last wrote or confirmed this status. The agent writes
	// on change, and at least once per refresh interval (30 minutes by default); its liveness is
	// its Lease gpu-{node}-agent, renewed every few minutes. The scheduler ignores nodes whose
	// heartbeat and lease renewal are both older than its freshness limit.
	// +optional
	LastHeartbeatTime metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// TelemetryTime is when the utilisation, memory, temperature, power and error counters of
	// the devices were read. They are published at a bounded rate (the agent's
	// --telemetry-writes-per-minute), so they may be that much older than the heartbeat's
	// health.
	// +optional
	TelemetryTime *metav1.Time `json:"telemetryTime,omitempty"`
	// Message explains a node-wide problem, such as NVML failing to initialise.
	// +optional
	Message string `json:"message,omitempty"`
	// Fabric is the multi-node NVLink domain the node's GPUs belong to, as NVML reports it
	// (GB200 NVL72 and alike); absent on nodes whose GPUs are in none.
	// +optional
	Fabric *Fabric `json:"fabric,omitempty"`
}

// Fabric is a node's place in a multi-node NVLink domain (NVML's GPU fabric info).
type Fabric struct {
	// ClusterUUID identifies the NVLink domain (the same on every node of, for example, one
	// NVL72 rack).
	// +optional
	ClusterUUID string `json:"clusterUUID,omitempty"`
	// CliqueID is the partition of the domain the GPUs are in: only GPUs of one clique reach
	// each other over NVLink.
	// +optional
	CliqueID int64 `json:"cliqueID,omitempty"`
	// Clique is "<clusterUUID>.<cliqueID>", the value of the node label nvidia.com/gpu.clique
	// (LabelGPUClique) that names the domain to the scheduler's topology levels.
	// +optional
	Clique string `json:"clique,omitempty"`
	// State is the fabric's registration state: NotSupported, NotStarted, InProgress or
	// Completed. GPUs reach their peers over NVLink only when it is Completed.
	// +optional
	State string `json:"state,omitempty"`
}

// Device is one GPU.
type Device struct {
	// ID is the GPU's index on the node (NVML index), 0 to 63 (MaxGPUID).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	ID int32 `json:"id"`
	// InUseBy lists the UIDs of the pods holding this GPU.
	// +listType=atomic
	// +optional
	InUseBy []string `json:"inUseBy,omitempty"`
	// Health is Healthy, Unhealthy or Unknown.
	// +optional
	Health Health `json:"health,omitempty"`
	// BandwidthGBps is the interconnect bandwidth to the GPU's island peers.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BandwidthGBps int32 `json:"bandwidthGBps,omitempty"`
	// Island names the group of GPUs joined by a fast interconnect (NVLink, NVSwitch or one PCIe switch).
	// +optional
	Island string `json:"island,omitempty"`
	// UUID is the GPU's NVML UUID.
	// +optional
	UUID string `json:"uuid,omitempty"`
	// Product is the GPU's name, such as "NVIDIA H100 80GB HBM3".
	// +optional
	Product string `json:"product,omitempty"`
	// MemoryMiB is the GPU's total memory.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// PCIBusID is the GPU's PCI bus ID.
	// +optional
	PCIBusID string `json:"pciBusId,omitempty"`
	// UtilizationPercent is the GPU's recent utilization, when the agent reads it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	UtilizationPercent *int32 `json:"utilizationPercent,omitempty"`
	// MemoryUtilizationPercent is how busy the GPU's memory interface was recently (NVML's
	// memory utilization), when the agent reads it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MemoryUtilizationPercent *int32 `json:"memoryUtilizationPercent,omitempty"`
	// MemoryUsedMiB is the GPU memory in use (of MemoryMiB), when the agent reads it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryUsedMiB *int64 `json:"memoryUsedMiB,omitempty"`
	// TemperatureCelsius is the GPU's core temperature, when the agent reads it.
	// +optional
	TemperatureCelsius *int32 `json:"temperatureCelsius,omitempty"`
	// PowerWatts is the GPU's power draw, when the agent reads it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PowerWatts *int32 `json:"powerWatts,omitempty"`
	// XidErrors counts the Xid errors NVML reported for this GPU since the agent started.
	// +kubebuilder:validation:Minimum=0
	// +optional
	XidErrors int64 `json:"xidErrors,omitempty"`
	// LastXid is the code of the last Xid error NVML reported for this GPU.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LastXid int64 `json:"lastXid,omitempty"`
	// ECCCorrectedErrors is the GPU's volatile (since driver load) count of corrected ECC
	// errors, when the GPU reports ECC.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ECCCorrectedErrors *int64 `json:"eccCorrectedErrors,omitempty"`
	// ECCUncorrectedErrors is the GPU's volatile count of uncorrected ECC errors, when the GPU
	// reports ECC.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ECCUncorrectedErrors *int64 `json:"eccUncorrectedErrors,omitempty"`
	// Reason says why the GPU is not Healthy.
	// +optional
	Reason string `json:"reason,omitempty"`
	// LastTransitionTime is when Health last changed to its current value, as the agent saw it
	// (for a GPU first seen by the agent: when it was first seen). Unset when the agent that
	// published the status did not record it.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// RecoveryCount is how many times the GPU became Healthy again after being Unhealthy,
	// counted by the agents on this node since the GpuNodeStatus was created (a restarted
	// agent carries it over). A return from Unknown alone (NVML unavailable) is not a recovery.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RecoveryCount int32 `json:"recoveryCount,omitempty"`
	// MIG is the GPU's MIG mode and the MIG devices made on it; absent on GPUs that do not
	// support MIG. A GPU in MIG mode is never allocated whole: only its MIG devices are.
	// +optional
	MIG *DeviceMIG `json:"mig,omitempty"`
	// Shares is what the Shared pods holding the GPU use of it, as their leases record; absent
	// while no Shared pod holds it.
	// +optional
	Shares *DeviceShares `json:"shares,omitempty"`
}

// DeviceMIG is a GPU's Multi-Instance GPU state, as NVML reports it.
type DeviceMIG struct {
	// Enabled is whether the GPU is in MIG mode (the current mode, not a pending one).
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// Slices is the number of memory slices the GPU divides into (8 on A100 and H100): the
	// slots MIG devices start at and span.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +optional
	Slices int32 `json:"slices,omitempty"`
	// Devices are the MIG devices (a GPU instance with one compute instance spanning it) that
	// exist on the GPU, at most 8 (MaxMIGDevicesPerGPU).
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=slot
	// +optional
	Devices []MigDevice `json:"devices,omitempty"`
}

// MaxMIGDevicesPerGPU bounds the MIG devices of one GPU (7 on A100 and H100) and so a
// DeviceMIG's devices.
const MaxMIGDevicesPerGPU = 8

// MaxMIGSlot is the largest MIG slot (placement start) the project accepts.
const MaxMIGSlot = 15

// MigDevice is one MIG device: a GPU instance at a placement, with its compute instance.
type MigDevice struct {
	// Slot is the GPU instance's placement start: the first memory slice it spans. It names
	// the device on its GPU (the lease gpu-{node}-{id}-mig{slot}).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=15
	Slot int32 `json:"slot"`
	// Size is how many memory slices the device spans.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	Size int32 `json:"size,omitempty"`
	// Profile is the device's profile, such as 1g.10gb.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Profile string `json:"profile,omitempty"`
	// UUID is the MIG device's UUID (MIG-...), what NVIDIA_VISIBLE_DEVICES names.
	// +optional
	UUID string `json:"uuid,omitempty"`
	// MemoryMiB is the device's memory.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// Health is Healthy, Unhealthy or Unknown; a device of an unhealthy GPU is unhealthy too.
	// +optional
	Health Health `json:"health,omitempty"`
	// Reason says why the device is not Healthy.
	// +optional
	Reason string `json:"reason,omitempty"`
	// InUseBy lists the UIDs of the pods holding this device (at most one).
	// +listType=atomic
	// +optional
	InUseBy []string `json:"inUseBy,omitempty"`
}

// DeviceShares sums the shares of a GPU's Shared holders.
type DeviceShares struct {
	// Sharers is how many pods share the GPU.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Sharers int32 `json:"sharers,omitempty"`
	// MemoryMiB is the memory their shares reserve, of the GPU's MemoryMiB.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// ComputePercent is the compute their shares reserve, of 100.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ComputePercent int32 `json:"computePercent,omitempty"`
}

// +kubebuilder:object:root=true
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuNodeStatusList is a list of GpuNodeStatus.
type GpuNodeStatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GpuNodeStatus `json:"items"`
}
