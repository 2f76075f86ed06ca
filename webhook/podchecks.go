package webhook

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// UnknownAnnotations returns the keys of pod's annotations under gpuv1.LabelPrefix that are not
// in gpuv1.PodAnnotations, sorted. Nothing reads such a key: a misspelt claim annotation would
// leave the pod placed without GPUs and with no word of why.
func UnknownAnnotations(pod *corev1.Pod) []string {
	var out []string
	for k := range pod.Annotations {
		if strings.HasPrefix(k, gpuv1.LabelPrefix) && !slices.Contains(gpuv1.PodAnnotations, k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// unknownAnnotationsError names the unknown keys and the keys that are known.
func unknownAnnotationsError(keys []string) error {
	return fmt.Errorf("metadata.annotations: unknown key %s under %s: known keys are %s",
		strings.Join(quoteAll(keys), ", "), gpuv1.LabelPrefix, strings.Join(gpuv1.PodAnnotations, ", "))
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// SchedulerNamePatch makes a pod that names a GpuClaim or a GpuClaimTemplate go to this release's
// scheduler, release (gpuv1.SchedulerName when empty). A pod that keeps the default scheduler
// (spec.schedulerName empty or default-scheduler) gets release: the default scheduler would place
// it with no GPU, or leave it Pending with no event. A pod that names this release's scheduler or
// one of siblings (other gpu-scheduler releases) needs nothing. With refuseOthers, a pod that
// names any other scheduler is refused with both names; without, it is left alone. A pod that
// names no claim needs nothing.
func SchedulerNamePatch(pod *corev1.Pod, release string, siblings []string, refuseOthers bool) ([]PatchOp, error) {
	annotation, ok := claimAnnotation(pod)
	if !ok {
		return nil, nil
	}
	if release == "" {
		release = gpuv1.SchedulerName
	}
	switch name := pod.Spec.SchedulerName; {
	case name == "" || name == corev1.DefaultSchedulerName:
		// "add" replaces a member that is there and adds one that is not.
		return []PatchOp{{Op: "add", Path: Pointer("spec", "schedulerName"), Value: release}}, nil
	case name == release || slices.Contains(siblings, name) || !refuseOthers:
		return nil, nil
	default:
		return nil, fmt.Errorf("spec.schedulerName: the pod names %s in annotation %s, which only the scheduler %q places, but asks for scheduler %q: set spec.schedulerName to %q or leave it empty",
			claimKind(annotation), annotation, release, name, release)
	}
}

// claimAnnotation is the annotation through which pod names its claim, claims.Name's order.
func claimAnnotation(pod *corev1.Pod) (string, bool) {
	if !namesClaim(pod) {
		return "", false
	}
	if _, ok := pod.Annotations[gpuv1.AnnotationClaim]; ok {
		return gpuv1.AnnotationClaim, true
	}
	return gpuv1.AnnotationClaimTemplate, true
}

func claimKind(annotation string) string {
	if annotation == gpuv1.AnnotationClaim {
		return "a GpuClaim"
	}
	return "a GpuClaimTemplate"
}
