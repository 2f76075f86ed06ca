package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=gct,categories=gpu
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.spec.devices.count`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.spec.devices.policy`
// +kubebuilder:printcolumn:name="Gang",type=string,JSONPath=`.spec.spec.gangRef`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuClaimTemplate is the blueprint of the GpuClaims made for pods: a pod (or the pod template of a
// Job, Deployment or StatefulSet) names it with the gpu.scheduling/claim-template annotation, and
// one GpuClaim is made per pod from it (by the scheduler, when it binds the pod), named by
// ClaimNameForPod and owned by the pod so that the garbage collector deletes it with the pod.
type GpuClaimTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GpuClaimTemplateSpec `json:"spec"`
}

// GpuClaimTemplateSpec is what every claim made from the template gets. Its spec may set
// gangTopology without gangRef: the claims of the pods of a PodGroup take the group's gang
// (gangRef <api group>/<group name>), so such a template serves the pods of PodGroups, and a pod
// of no group is not placed with it (a claim with gangTopology needs a gang).
type GpuClaimTemplateSpec struct {
	// Metadata holds the labels and annotations copied onto every claim made from the template.
	// +optional
	Metadata ClaimTemplateMetadata `json:"metadata,omitempty"`
	// Spec is copied as is into every claim; it is validated exactly like a claim's spec.
	// +required
	Spec GpuClaimSpec `json:"spec"`
}

// ClaimTemplateMetadata is the part of a claim's metadata a template may set.
type ClaimTemplateMetadata struct {
	// Labels are put on every claim made from the template.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are put on every claim made from the template.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// +kubebuilder:object:root=true
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GpuClaimTemplateList is a list of GpuClaimTemplates.
type GpuClaimTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GpuClaimTemplate `json:"items"`
}
