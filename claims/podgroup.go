package claims

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Gangs from the ecosystem's gang APIs. A pod that names a GpuClaimTemplate and belongs to a pod
// group, either the coscheduling plugin's PodGroup (scheduling.x-k8s.io/v1alpha1, named by the
// pod's scheduling.x-k8s.io/pod-group label, the way Kubeflow, JobSet, LeaderWorkerSet and Volcano
// express a gang) or Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2, named by the pod's
// spec.schedulingGroup.podGroupName, behind the GenericWorkload feature gate), gets a claim whose
// spec.gangRef is derived from the group (GangRefForGroup) and whose spec.gangSize is the group's
// minimum (minMember, or the gang policy's minCount): the group's pods are then one of our gangs.

// maxGangRefLength is spec.gangRef's MaxLength in the GpuClaim CRD.
const maxGangRefLength = 253

// LabelPodGroup is the coscheduling plugin's pod label naming the pod's PodGroup.
const LabelPodGroup = "scheduling.x-k8s.io/pod-group"

// The API groups of the two PodGroups.
const (
	GroupCoscheduling = "scheduling.x-k8s.io"
	GroupWorkload     = "scheduling.k8s.io"
)

// PodGroupRef names the pod group a pod belongs to.
type PodGroupRef struct {
	// Group is GroupCoscheduling or GroupWorkload.
	Group string
	// Name is the PodGroup's name, in the pod's namespace.
	Name string
}

// String names the group for messages: "PodGroup train (scheduling.x-k8s.io)".
func (r PodGroupRef) String() string {
	return fmt.Sprintf("PodGroup %s (%s)", r.Name, r.Group)
}

// Field says where on the pod the group is named.
func (r PodGroupRef) Field() string {
	if r.Group == GroupWorkload {
		return "spec.schedulingGroup.podGroupName"
	}
	return "label " + LabelPodGroup
}

// PodGroupOf returns the pod group the pod belongs to; ok is false when it belongs to none. A pod
// that names a group both ways, two different groups, is an error: a pod is in one gang.
func PodGroupOf(pod *corev1.Pod) (ref PodGroupRef, ok bool, err error) {
	var refs []PodGroupRef
	if name, named := pod.Labels[LabelPodGroup]; named && name != "" {
		refs = append(refs, PodGroupRef{Group: GroupCoscheduling, Name: name})
	}
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && *sg.PodGroupName != "" {
		refs = append(refs, PodGroupRef{Group: GroupWorkload, Name: *sg.PodGroupName})
	}
	switch len(refs) {
	case 0:
		return PodGroupRef{}, false, nil
	case 1:
		return refs[0], true, nil
	}
	return PodGroupRef{}, false, fmt.Errorf("pod %s/%s names two pod groups, %s through %s and %s through %s; a pod belongs to one gang: keep one of them",
		pod.Namespace, pod.Name, refs[0], refs[0].Field(), refs[1], refs[1].Field())
}

// GangRefForGroup is the spec.gangRef of the claims made for the pods of a group: the group's API
// group and its name, so that it cannot be taken for a gangRef a user chose, and so that the two
// kinds of PodGroup of one name are two gangs.
func GangRefForGroup(ref PodGroupRef) (string, error) {
	g := ref.Group + "/" + ref.Name
	if len(g) > maxGangRefLength {
		return "", fmt.Errorf("%s: the gang it makes, %q, is longer than the %d characters of spec.gangRef; shorten the group's name", ref, g, maxGangRefLength)
	}
	return g, nil
}

// InPodGroup reports whether a pod's claim takes its gang from a pod group: the pod names a
// group (one or, an error the claim's maker reports, two). The scheduler leaves the claims of
// such pods to gpu-controller, which makes every member's claim before the gang is placed.
func InPodGroup(pod *corev1.Pod) bool {
	_, ok, err := PodGroupOf(pod)
	return ok || err != nil
}
