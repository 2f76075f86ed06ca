package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeStrategy says how the scheduler ranks the nodes that can take a pod's GPUs. The plugin's
// nodeStrategy arg is the default; a pod's gpu.scheduling/node-strategy annotation (which the
// GpuWorkload controller writes from spec.nodeStrategy) overrides it for that pod.
// +kubebuilder:validation:Enum=binpack;spread;least-utilized;round-robin;random;cost-aware;fragmentation
type NodeStrategy string

const (
	// StrategyBinpack fills busy nodes first, keeping whole nodes free for large claims.
	StrategyBinpack NodeStrategy = "binpack"
	// StrategySpread prefers the emptiest nodes.
	StrategySpread NodeStrategy = "spread"
	// StrategyLeastUtilized prefers nodes whose GPUs the agent reports least busy.
	StrategyLeastUtilized NodeStrategy = "least-utilized"
	// StrategyRoundRobin walks the nodes in name order, each pod on the node after the last one
	// the scheduler placed a round-robin pod on.
	StrategyRoundRobin NodeStrategy = "round-robin"
	// StrategyRandom ranks nodes in a pseudo-random order of its own for every pod.
	StrategyRandom NodeStrategy = "random"
	// StrategyCostAware prefers nodes with the lowest gpu.scheduling/cost label; a node
	// without the label (or with a value that is not a number) ranks last.
	StrategyCostAware NodeStrategy = "cost-aware"
	// StrategyFragmentation prefers the placement that fragments the cluster least for the
	// demand seen so far (Fragmentation Gradient Descent, Weng et al., USENIX ATC '23): the
	// node whose expected unusable GPU capacity grows least.
	StrategyFragmentation NodeStrategy = "fragmentation"
)

// NodeStrategies lists every strategy, in the order messages name them.
var NodeStrategies = []NodeStrategy{StrategyBinpack, StrategySpread, StrategyLeastUtilized, StrategyRoundRobin, StrategyRandom, StrategyCostAware, StrategyFragmentation}

// WorkloadPhase is where a GpuWorkload is in its life.
// +kubebuilder:validation:Enum=Pending;Scheduled;Running;Succeeded;Failed
type WorkloadPhase string

const (
	// WorkloadPending has replicas without a node yet (or none asked for).
	WorkloadPending WorkloadPhase = "Pending"
	// WorkloadScheduled has every replica bound to a node, not all of them running yet.
	WorkloadScheduled WorkloadPhase = "Scheduled"
	// WorkloadRunning has every replica running.
	WorkloadRunning WorkloadPhase = "Running"
	// WorkloadSucceeded has every replica finished successfully.
	WorkloadSucceeded WorkloadPhase = "Succeeded"
	// WorkloadFailed ran out of retries; the message says why. It is final.
	WorkloadFailed WorkloadPhase = "Failed"
)

// Condition types of a GpuWorkload.
const (
	// WorkloadConditionScheduled is True when every replica is bound to a node.
	WorkloadConditionScheduled = "Scheduled"
	// WorkloadConditionReady is True when every replica is running and ready.
	WorkloadConditionReady = "Ready"
	// WorkloadConditionFailed is True once the workload gave up.
	WorkloadConditionFailed = "Failed"
)

// MaxWorkloadReplicas bounds spec.replicas (a gang's gangSize has the same bound).
const MaxWorkloadReplicas = 1024

// Defaults the API server fills in; the controller uses the same when a field is absent (an
// object written before the schema had the default).
const (
	DefaultWorkloadReplicas = 1
	DefaultMaxRetries       = 3
	DefaultBackoffSeconds   = 10
)

// WorkloadReplicas is spec.replicas, defaulted.
func (s *GpuWorkloadSpec) WorkloadReplicas() int32 {
	if s.Replicas == nil {
		return DefaultWorkloadReplicas
	}
	return *s.Replicas
}

// Retries is spec.retryPolicy.maxRetries and backoffSeconds, defaulted.
func (s *GpuWorkloadSpec) Retries() (maxRetries, backoffSeconds int32) {
	maxRetries, backoffSeconds = DefaultMaxRetries, DefaultBackoffSeconds
	if p := s.RetryPolicy; p != nil {
		if p.MaxRetries != nil {
			maxRetries = *p.MaxRetries
		}
		if p.BackoffSeconds != nil {
			backoffSeconds = *p.BackoffSeconds
		}
	}
	return maxRetries, backoffSeconds
}

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=gw,categories=gpu
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpus`
// +kubebuilder:printcolumn:name="Nodes",type=string,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: it is a label value on the workload's pods and prefixes their names"
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuWorkload runs replicas of a pod template, each pod with GPUs of its own from one claim
// spec (or a GpuClaimTemplate), optionally as a gang, and recreates failed pods with backoff.
type GpuWorkload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GpuWorkloadSpec `json:"spec"`
	// +optional
	Status GpuWorkloadStatus `json:"status,omitempty"`
}

// GpuWorkloadSpec is what the user asks for.
// +kubebuilder:validation:XValidation:rule="!has(self.gang) || !self.gang || self.replicas > 0",message="a gang needs at least 1 replica",fieldPath=".replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.gang) || !self.gang || has(self.claim.spec)",message="gang: true needs an inline claim.spec (the controller sets its gangRef and gangSize); a GpuClaimTemplate's claims carry the template's own gangRef",fieldPath=".claim"
// +kubebuilder:validation:XValidation:rule="!has(self.claim) || !has(self.claim.spec) || !has(self.claim.spec.gangTopology) || (has(self.gang) && self.gang)",message="claim.spec.gangTopology needs gang: true: it places the nodes of the workload's gang together",fieldPath=".claim"
type GpuWorkloadSpec struct {
	// Replicas is how many pods run, each with its own claim.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// Template is the pod every replica runs. Its schedulerName picks the release whose
	// gpu-controller runs the workload (empty or default-scheduler: the release named
	// gpu-scheduler). That controller sets schedulerName to its release's scheduler, the claim
	// annotation, priorityClassName and the node strategy annotation; restartPolicy defaults to
	// Never so that a failed pod can be retried.
	// +required
	Template corev1.PodTemplateSpec `json:"template"`
	// Claim is the GPUs every replica gets.
	// +required
	Claim WorkloadClaim `json:"claim"`
	// Gang schedules the replicas all or nothing: no pod binds until every one has GPUs, and
	// a failure of one member retries the whole gang.
	// +optional
	Gang bool `json:"gang,omitempty"`
	// PriorityClassName is given to every pod (preemption uses it).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// NodeStrategy ranks the nodes for this workload's pods; absent, the scheduler's default.
	// +optional
	NodeStrategy NodeStrategy `json:"nodeStrategy,omitempty"`
	// RetryPolicy says how often and how soon failed pods are recreated.
	// +kubebuilder:default={}
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`
}

// WorkloadClaim is the claim of every replica: an inline spec or a GpuClaimTemplate's name.
// +kubebuilder:validation:XValidation:rule="has(self.spec) != has(self.templateName)",message="set exactly one of claim.spec and claim.templateName"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.gangRef)",message="claim.spec.gangRef is set by the controller; use gang: true instead",fieldPath=".spec.gangRef"
type WorkloadClaim struct {
	// Spec is the claim every replica's own GpuClaim is made from.
	// +optional
	Spec *GpuClaimSpec `json:"spec,omitempty"`
	// TemplateName names a GpuClaimTemplate in the workload's namespace instead.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	TemplateName string `json:"templateName,omitempty"`
}

// RetryPolicy bounds the recreation of failed pods. The wait before retry n (from 0) is
// backoffSeconds·2ⁿ plus up to 10% jitter, never more than five minutes.
type RetryPolicy struct {
	// MaxRetries is how many pods may be recreated before the workload is Failed.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxRetries *int32 `json:"maxRetries,omitempty"`
	// BackoffSeconds is the wait before the first retry.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	// +optional
	BackoffSeconds *int32 `json:"backoffSeconds,omitempty"`
}

// GpuWorkloadStatus is what the controller saw.
type GpuWorkloadStatus struct {
	// ObservedGeneration is the spec generation the status was written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is Pending, Scheduled, Running, Succeeded or Failed.
	// +optional
	Phase WorkloadPhase `json:"phase,omitempty"`
	// Conditions are Scheduled, Ready and Failed.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Replicas is one entry per replica index.
	// +listType=map
	// +listMapKey=index
	// +optional
	Replicas []ReplicaStatus `json:"replicas,omitempty"`
	// Ready is "ready/replicas", for kubectl get.
	// +optional
	Ready string `json:"ready,omitempty"`
	// ReadyReplicas counts running and ready pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// GPUs counts the GPUs the replicas hold.
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// Nodes are the nodes the replicas run on, sorted.
	// +listType=set
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// Retries counts the pods recreated after a failure (a gang retried counts once).
	// +optional
	Retries int32 `json:"retries,omitempty"`
	// NextRetryTime is when the pending retry happens (microseconds: the jitter of a short
	// backoff is a fraction of a second).
	// +optional
	NextRetryTime *metav1.MicroTime `json:"nextRetryTime,omitempty"`
	// Message says what happened last, or what is wrong, in words.
	// +optional
	Message string `json:"message,omitempty"`
}

// ReplicaStatus is one replica's pod and GPUs.
type ReplicaStatus struct {
	// Index is the replica's number, 0..replicas-1.
	Index int32 `json:"index"`
	// Attempt numbers the replica's pods: 0 for the first, one more for every retry.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Pod is the name of the replica's current pod.
	// +optional
	Pod string `json:"pod,omitempty"`
	// Claim is the name of the pod's GpuClaim.
	// +optional
	Claim string `json:"claim,omitempty"`
	// Phase is the pod's phase.
	// +optional
	Phase corev1.PodPhase `json:"phase,omitempty"`
	// Node is the node the pod is bound to.
	// +optional
	Node string `json:"node,omitempty"`
	// GpuIDs are the GPUs the pod holds on that node.
	// +listType=atomic
	// +optional
	GpuIDs []int32 `json:"gpuIds,omitempty"`
}

// +kubebuilder:object:root=true
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuWorkloadList is a list of GpuWorkloads.
type GpuWorkloadList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GpuWorkload `json:"items"`
}
