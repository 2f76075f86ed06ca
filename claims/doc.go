// Package claims holds what every gpu-scheduler component means by a pod's GpuClaim and by a
// GPU lease, written once: which claim a pod uses, whether a claim is the pod's own, whether a
// pod is this release's, and how the GPU leases and the agents' liveness leases read.
//
// It plays the part k8s.io/dynamic-resource-allocation/resourceclaim plays under the in-tree DRA
// plugin, the kubelet plugin and the controllers: the scheduler plugin, the agent, the webhook,
// the controllers and kubectl-gpu import it, and it imports no scheduler framework
// (k8s.io/kube-scheduler, k8s.io/kubernetes/pkg/scheduler), so that a binary that is no
// scheduler links none (test/deps).
package claims
