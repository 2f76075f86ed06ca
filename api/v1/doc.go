// Package v1 holds the gpu.scheduling/v1 API: GpuClaim (what a pod needs) and GpuNodeStatus
// (what a node has), the pod annotations that tie pods to claims and allocations, and the
// naming of the per-GPU coordination Leases. The contract is the project's API reference; fields
// beyond it are additions that the reference does not forbid.
//
// +k8s:deepcopy-gen=package
// +groupName=gpu.scheduling
// +groupGoName=Gpu
package v1
