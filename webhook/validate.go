package webhook

import (
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// DefaultSchedulerUser is the service account the chart runs the scheduler as.
const DefaultSchedulerUser = "system:serviceaccount:gpu-scheduler:gpu-scheduler"

// ProtectedAnnotations are written by the scheduler only: they decide which GPUs and MIG
// devices a pod's containers see (the device plugin hands over what they name) and the limits
// of a shared GPU (the share), so whoever writes them picks GPUs or widens a share.
var ProtectedAnnotations = []string{gpuv1.AnnotationAllocated, gpuv1.AnnotationGPUIDs, gpuv1.AnnotationMIGDevices, gpuv1.AnnotationShare}

// SchedulerIdentity is who counts as the scheduler: a request is the scheduler's when its
// user name is one of Users or one of its groups is one of Groups.
type SchedulerIdentity struct {
	Users  []string
	Groups []string
}

// Matches reports whether the requesting user is the scheduler.
func (s SchedulerIdentity) Matches(u authenticationv1.UserInfo) bool {
	if u.Username != "" && slices.Contains(s.Users, u.Username) {
		return true
	}
	for _, g := range u.Groups {
		if g != "" && slices.Contains(s.Groups, g) {
			return true
		}
	}
	return false
}

// Decision is the verdict of a validation. Reason is a short, fixed word for metrics.
type Decision struct {
	Allowed bool
	Message string
	Reason  string
}

// Reasons a request is denied, used as the metrics label.
const (
	ReasonCreate  = "create"
	ReasonUpdate  = "update"
	ReasonBinding = "binding"
	ReasonInvalid = "invalid"
	// ReasonDeviceAccess: a claim pod would reach GPUs around the device plugin, or its claim is unreadable.
	ReasonDeviceAccess = "device-access"
)

var allow = Decision{Allowed: true}

func deny(reason, format string, args ...any) Decision {
	return Decision{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ValidatePodCreate denies every pod created with an allocation annotation, whoever creates it:
// the scheduler writes them when it binds an existing pod, never at creation.
func ValidatePodCreate(pod *corev1.Pod) Decision {
	keys := presentKeys(pod.Annotations)
	if len(keys) == 0 {
		return allow
	}
	return deny(ReasonCreate, "pod %s may not be created with %s: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation %s instead",
		podRef(pod), annotationList(keys), gpuv1.AnnotationClaim)
}

// ValidatePodUpdate denies a change (set, change or remove) of an allocation annotation by
// anyone but the scheduler, and a malformed allocation written by the scheduler.
func ValidatePodUpdate(oldPod, newPod *corev1.Pod, user authenticationv1.UserInfo, scheduler SchedulerIdentity) Decision {
	var changed []string
	for _, k := range ProtectedAnnotations {
		ov, ook := oldPod.Annotations[k]
		nv, nok := newPod.Annotations[k]
		if ook != nok || ov != nv {
			changed = append(changed, k)
		}
	}
	if len(changed) == 0 {
		return allow
	}
	if !scheduler.Matches(user) {
		return deny(ReasonUpdate, "user %q may not set, change or remove %s on pod %s: only the gpu-scheduler writes the GPU allocation",
			user.Username, annotationList(changed), podRef(newPod))
	}
	if err := checkAllocation(newPod.Annotations, newPod.Spec.NodeName); err != nil {
		return deny(ReasonInvalid, "pod %s: %v", podRef(newPod), err)
	}
	return allow
}

// ValidateBinding denies a Binding that carries an allocation annotation unless the scheduler
// creates it: the apiserver copies a Binding's annotations onto the pod.
func ValidateBinding(b *corev1.Binding, user authenticationv1.UserInfo, scheduler SchedulerIdentity) Decision {
	keys := presentKeys(b.Annotations)
	if len(keys) == 0 {
		return allow
	}
	ref := b.Namespace + "/" + b.Name
	if !scheduler.Matches(user) {
		return deny(ReasonBinding, "user %q may not bind pod %s with %s: only the gpu-scheduler writes the GPU allocation",
			user.Username, ref, annotationList(keys))
	}
	if err := checkAllocation(b.Annotations, b.Target.Name); err != nil {
		return deny(ReasonInvalid, "binding of pod %s: %v", ref, err)
	}
	return allow
}

// checkAllocation checks the allocation annotations the scheduler writes: each parses, both
// name the same IDs, and the allocation's node is the node the pod is (being) bound to.
func checkAllocation(annotations map[string]string, node string) error {
	alloc, hasAlloc := annotations[gpuv1.AnnotationAllocated]
	ids, hasIDs := annotations[gpuv1.AnnotationGPUIDs]
	var a gpuv1.Allocation
	if hasAlloc {
		var err error
		if a, err = gpuv1.ParseAllocation(alloc); err != nil {
			return fmt.Errorf("annotation %s: %w", gpuv1.AnnotationAllocated, err)
		}
		if node != "" && a.Node != node {
			return fmt.Errorf("annotation %s names node %q but the pod is bound to node %q", gpuv1.AnnotationAllocated, a.Node, node)
		}
	}
	if hasIDs {
		parsed, err := gpuv1.ParseIDs(ids)
		if err != nil {
			return fmt.Errorf("annotation %s: %w", gpuv1.AnnotationGPUIDs, err)
		}
		if hasAlloc && !slices.Equal(parsed, a.IDs) {
			return fmt.Errorf("annotation %s=%q does not match annotation %s=%q", gpuv1.AnnotationGPUIDs, ids, gpuv1.AnnotationAllocated, alloc)
		}
	}
	if v, ok := annotations[gpuv1.AnnotationMIGDevices]; ok {
		refs, err := gpuv1.ParseMIGDevices(v)
		if err != nil {
			return fmt.Errorf("annotation %s: %w", gpuv1.AnnotationMIGDevices, err)
		}
		for _, r := range refs {
			if hasAlloc && !slices.Contains(a.IDs, r.GPU) {
				return fmt.Errorf("annotation %s=%q names GPU %d, which annotation %s=%q does not", gpuv1.AnnotationMIGDevices, v, r.GPU, gpuv1.AnnotationAllocated, alloc)
			}
		}
	}
	if v, ok := annotations[gpuv1.AnnotationShare]; ok {
		if _, err := gpuv1.ParseShare(v); err != nil {
			return fmt.Errorf("annotation %s: %w", gpuv1.AnnotationShare, err)
		}
	}
	return nil
}

func presentKeys(annotations map[string]string) []string {
	var keys []string
	for _, k := range ProtectedAnnotations {
		if _, ok := annotations[k]; ok {
			keys = append(keys, k)
		}
	}
	return keys
}

func annotationList(keys []string) string {
	if len(keys) == 1 {
		return "annotation " + keys[0]
	}
	return "annotations " + strings.Join(keys, " and ")
}

// podRef names a pod for messages; at CREATE a pod may have only a generateName.
func podRef(pod *corev1.Pod) string {
	name := pod.Name
	if name == "" && pod.GenerateName != "" {
		name = pod.GenerateName + "*"
	}
	return pod.Namespace + "/" + name
}
