package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
)

// claimTemplates is the GpuClaimTemplate resource, read unstructured so that the webhook
// does not depend on its Go type.
var claimTemplates = schema.GroupVersionResource{Group: gpuv1.GroupName, Version: "v1", Resource: "gpuclaimtemplates"}

// resourceConfig builds the webhook's device-plugin side: GPU counts are read from the pod's
// GpuClaim or GpuClaimTemplate, and the forbid-privileged label from its namespace, with live
// GETs (one per GPU pod created; no cache to go stale between a claim's creation and its pod's).
func resourceConfig(name, kubeconfig string) (webhook.ResourceConfig, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return webhook.ResourceConfig{}, fmt.Errorf("--resource-name %s needs API access: %w", name, err)
	}
	gpus, err := versioned.NewForConfig(cfg)
	if err != nil {
		return webhook.ResourceConfig{}, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return webhook.ResourceConfig{}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return webhook.ResourceConfig{}, err
	}
	count := func(ctx context.Context, pod *corev1.Pod) (int32, bool, error) {
		if claim, ok := pod.Annotations[gpuv1.AnnotationClaim]; ok {
			c, err := gpus.GpuV1().GpuClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
			if err != nil {
				return 0, false, fmt.Errorf("metadata.annotations[%s]: GpuClaim %s/%s: %w", gpuv1.AnnotationClaim, pod.Namespace, claim, err)
			}
			if e := c.Spec.Devices.Exclusivity; e != "" && e != gpuv1.Exclusive {
				// The kubelet hands a device to one container at a time: GPUs shared by
				// several pods cannot go through the device plugin (docs/node.md, Limits).
				return 0, false, fmt.Errorf("GpuClaim %s/%s: spec.devices.exclusivity %s is not supported with the device plugin (--resource-name); use Exclusive", pod.Namespace, claim, e)
			}
			return c.Spec.Devices.Count, true, nil
		}
		if tmpl, ok := pod.Annotations[gpuv1.AnnotationClaimTemplate]; ok {
			u, err := dyn.Resource(claimTemplates).Namespace(pod.Namespace).Get(ctx, tmpl, metav1.GetOptions{})
			if err != nil {
				return 0, false, fmt.Errorf("metadata.annotations[%s]: GpuClaimTemplate %s/%s: %w", gpuv1.AnnotationClaimTemplate, pod.Namespace, tmpl, err)
			}
			return templateCount(u)
		}
		return 0, false, nil
	}
	forbids := func(ctx context.Context, namespace string) (bool, error) {
		ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ns.Labels[webhook.LabelForbidPrivileged] == "true", nil
	}
	return webhook.ResourceConfig{Name: corev1.ResourceName(name), Count: count, ForbidsPrivileged: forbids}, nil
}

// templateCount reads the claim spec's device count from a GpuClaimTemplate (spec.spec, as a
// ResourceClaimTemplate nests its claim's spec).
func templateCount(u *unstructured.Unstructured) (int32, bool, error) {
	n, found, err := unstructured.NestedInt64(u.Object, "spec", "spec", "devices", "count")
	if err != nil || !found {
		return 0, false, fmt.Errorf("GpuClaimTemplate %s/%s: spec.spec.devices.count is missing or not a number (%v)", u.GetNamespace(), u.GetName(), err)
	}
	return int32(n), true, nil
}
