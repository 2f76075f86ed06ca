package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
)

// resourceConfig builds the webhook's device-plugin side: GPU counts are read from the pod's
// GpuClaim or GpuClaimTemplate, and the forbid-privileged label from its namespace, with live
// GETs (one per GPU pod created; no cache to go stale between a claim's creation and its pod's).
func resourceConfig(name string, cfg *rest.Config) (webhook.ResourceConfig, error) {
	gpus, err := versioned.NewForConfig(cfg)
	if err != nil {
		return webhook.ResourceConfig{}, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return webhook.ResourceConfig{}, err
	}
	count := claimCounter(gpus)
	forbids := func(ctx context.Context, namespace string) (bool, error) {
		ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ns.Labels[webhook.LabelForbidPrivileged] == "true", nil
	}
	return webhook.ResourceConfig{Name: corev1.ResourceName(name), Count: count, ForbidsPrivileged: forbids}, nil
}

// claimCounter reads a pod's GPU count from its GpuClaim, or from the GpuClaimTemplate its
// claim will be made from (the claim may not exist yet when the pod is created). Shared and
// MIG claims are refused either way: the kubelet hands a device to one container at a time, so
// GPUs shared by several pods cannot go through the device plugin (docs/node.md, Limits).
func claimCounter(gpus versioned.Interface) webhook.GPUCounter {
	return func(ctx context.Context, pod *corev1.Pod) (int32, bool, error) {
		var (
			spec gpuv1.GpuClaimSpec
			what string
		)
		if claim, ok := pod.Annotations[gpuv1.AnnotationClaim]; ok {
			c, err := gpus.GpuV1().GpuClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
			if err != nil {
				return 0, false, fmt.Errorf("metadata.annotations[%s]: GpuClaim %s/%s: %w", gpuv1.AnnotationClaim, pod.Namespace, claim, err)
			}
			spec, what = c.Spec, fmt.Sprintf("GpuClaim %s/%s: spec.devices", pod.Namespace, claim)
		} else if tmpl, ok := pod.Annotations[gpuv1.AnnotationClaimTemplate]; ok {
			t, err := gpus.GpuV1().GpuClaimTemplates(pod.Namespace).Get(ctx, tmpl, metav1.GetOptions{})
			if err != nil {
				return 0, false, fmt.Errorf("metadata.annotations[%s]: GpuClaimTemplate %s/%s: %w", gpuv1.AnnotationClaimTemplate, pod.Namespace, tmpl, err)
			}
			spec, what = t.Spec.Spec, fmt.Sprintf("GpuClaimTemplate %s/%s: spec.spec.devices", pod.Namespace, tmpl)
		} else {
			return 0, false, nil
		}
		if e := spec.Devices.Exclusivity; e != "" && e != gpuv1.Exclusive {
			return 0, false, fmt.Errorf("%s.exclusivity %s is not supported with the device plugin (--resource-name); use Exclusive", what, e)
		}
		return spec.Devices.Count, true, nil
	}
}
