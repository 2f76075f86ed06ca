package claims

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Name is the name of the GpuClaim pod uses: the one its claim annotation names, or else the
// one made for it from the GpuClaimTemplate its claim-template annotation names
// (apiv1.ClaimNameForPod). ok is false when the pod names neither: it asks for no GPUs. A
// template name from which no claim name can be made (an empty one) gives an empty name with
// ok true, so that the caller reports the pod's mistake rather than skipping the pod.
func Name(pod *corev1.Pod) (name string, ok bool) {
	if name, ok := pod.Annotations[apiv1.AnnotationClaim]; ok {
		return name, true
	}
	template, ok := pod.Annotations[apiv1.AnnotationClaimTemplate]
	if !ok {
		return "", false
	}
	name, err := apiv1.ClaimNameForPod(pod.Name, template)
	if err != nil {
		return "", true
	}
	return name, true
}

// Template is the GpuClaimTemplate the pod's claim is made from: ok is false when the pod names
// its claim directly (the claim annotation wins over the template annotation) or names none.
func Template(pod *corev1.Pod) (template string, ok bool) {
	if _, named := pod.Annotations[apiv1.AnnotationClaim]; named {
		return "", false
	}
	template, ok = pod.Annotations[apiv1.AnnotationClaimTemplate]
	return template, ok
}

// IsOwnedBy reports whether pod is the claim's controller owner: a claim made from a template
// serves only the pod it was made for, never another one that happens to have the same name.
func IsOwnedBy(claim metav1.Object, pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(claim)
	return ref != nil && ref.Kind == "Pod" && ref.UID == pod.UID
}

// IsOfEarlierPod reports whether the claim is controlled by an earlier pod of pod's name (a
// StatefulSet pod deleted and made again): the garbage collector deletes that claim with its
// pod, after which the claim of the new pod can be made under the same name.
func IsOfEarlierPod(claim metav1.Object, pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(claim)
	return ref != nil && ref.Kind == "Pod" && ref.Name == pod.Name && ref.UID != pod.UID
}

// ScheduledBy reports whether a pod asking for schedulerName (its spec.schedulerName) is
// scheduled by the release whose scheduler is release (apiv1.SchedulerName when empty). The
// names are compared as they are: a pod that names no scheduler is stored by the apiserver
// with default-scheduler, and neither "" nor default-scheduler is ever a gpu-scheduler
// release's pod. This is who places and serves the pod (the webhook's mutation, the device
// plugin's Allocate, whether the scheduler makes a templated pod's claim at PreBind);
// apiv1.ReleaseFor is the other question, which release's controllers look after an object,
// and there default-scheduler and "" mean the default release.
func ScheduledBy(schedulerName, release string) bool {
	if release == "" {
		release = apiv1.SchedulerName
	}
	return schedulerName == release
}

// RequestSizes are the distinct device counts pod's containers (init, then app) ask for of the
// extended resource res: what a device plugin is asked for, one container at a time. Extended
// resources are requested through limits (requests, when given, equal them).
func RequestSizes(pod *corev1.Pod, res corev1.ResourceName) []int {
	var out []int
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			q, ok := cs[i].Resources.Limits[res]
			if !ok {
				q, ok = cs[i].Resources.Requests[res]
			}
			if n := int(q.Value()); ok && n > 0 && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// Key is a claim's "namespace/name", the key the scheduler's ledger and informers index it by.
func Key(namespace, name string) string { return namespace + "/" + name }

// PodFinished reports whether a pod no longer needs its GPUs: it has succeeded or failed.
func PodFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
