package v1

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// maxClaimName is the longest claim name ClaimNameForPod returns. Claims are plain objects (253
// characters allowed), but we keep names within a label value's 63 so that tools may label by it.
const maxClaimName = validation.DNS1123LabelMaxLength

// ClaimNameForPod is the name of the GpuClaim made for pod podName from template templateName:
// "<pod>-<template>", or, when that is longer than 63 characters, a prefix of it followed by "-"
// and ten hex digits of a SHA-256 over both names, so different pods never share a name. The
// controller that makes the claim and the scheduler that reads it both call it: the name is the
// only link they need besides the claim's owner reference.
func ClaimNameForPod(podName, templateName string) (string, error) {
	if podName == "" {
		return "", fmt.Errorf("claim name for template %q: pod name is empty", templateName)
	}
	if templateName == "" {
		return "", fmt.Errorf("claim name for pod %q: template name is empty", podName)
	}
	name := podName + "-" + templateName
	if len(name) > maxClaimName {
		sum := sha256.Sum256([]byte(podName + "/" + templateName))
		suffix := "-" + hex.EncodeToString(sum[:])[:10]
		prefix := name[:maxClaimName-len(suffix)]
		// A name must not end in '-' or '.' before the suffix; trim them so the result stays valid.
		for len(prefix) > 0 && (prefix[len(prefix)-1] == '-' || prefix[len(prefix)-1] == '.') {
			prefix = prefix[:len(prefix)-1]
		}
		name = prefix + suffix
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("claim name %q for pod %q and template %q is not a valid object name: %v", name, podName, templateName, errs)
	}
	return name, nil
}

// ClaimFromTemplate is the GpuClaim of pod made from tmpl: named by ClaimNameForPod, a copy of
// the template's claim spec, labels and annotations, controlled by the pod (controller and
// blockOwnerDeletion), so that the garbage collector deletes it with the pod and a foreground
// delete of the pod waits for it. gpu-scheduler makes it when it binds a pod of its own;
// gpu-controller makes it for the other pods (see docs/workloads.md). Both make the same object,
// so whichever comes second gets AlreadyExists and uses the first one's.
func ClaimFromTemplate(pod *corev1.Pod, tmpl *GpuClaimTemplate) (*GpuClaim, error) {
	name, err := ClaimNameForPod(pod.Name, tmpl.Name)
	if err != nil {
		return nil, err
	}
	return &GpuClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       pod.Namespace,
			Labels:          maps.Clone(tmpl.Spec.Metadata.Labels),
			Annotations:     maps.Clone(tmpl.Spec.Metadata.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pod, corev1.SchemeGroupVersion.WithKind("Pod"))},
		},
		Spec: *tmpl.Spec.Spec.DeepCopy(),
	}, nil
}

// ClaimMetadata is an empty GpuClaim metadata object to read a claim into from a metadata-only
// cache (controller-runtime's builder.OnlyMetadata): the controllers need a claim's owner and
// nothing else, and reading the whole claim would decode every claim's JSON in the cluster.
func ClaimMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(SchemeGroupVersion.WithKind("GpuClaim"))
	return m
}
