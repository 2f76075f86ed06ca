package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// GPUCounter tells how many GPUs a pod holds: the count of its GpuClaim (or of the
// GpuClaimTemplate it names). ok is false when the pod names neither.
type GPUCounter func(ctx context.Context, pod *corev1.Pod) (count int32, ok bool, err error)

// GPURequest is the device-plugin resource a claim pod asks for and how many: Resource empty
// is ResourceConfig.Name (whole GPUs).
type GPURequest struct {
	Resource corev1.ResourceName
	Count    int32
}

// GPURequester reads the resource and count of a pod's claim; ok is false when the pod names
// no claim.
type GPURequester func(ctx context.Context, pod *corev1.Pod) (req GPURequest, ok bool, err error)

// ResourceConfig turns on the kubelet-facing side of the webhook (docs/node.md): our pods
// request the GPU resource the agent's device plugin serves, so that the kubelet and
// ResourceQuota count them, and pods may not reach GPUs around the device plugin.
type ResourceConfig struct {
	// Name is the extended resource, e.g. nvidia.com/gpu. Empty: the webhook adds none.
	Name corev1.ResourceName
	// Count reads the pod's GPU count. Required with Name.
	Count GPUCounter
	// Request, when set, is used for pods instead of Count: it also names the resource of a
	// Shared or MIG claim (gpu.scheduling/gpu-shared, gpu.scheduling/mig-<profile>).
	Request GPURequester
	// ForbidsPrivileged tells whether a namespace forbids privileged GPU pods (its
	// LabelForbidPrivileged label). Nil: no namespace does.
	ForbidsPrivileged func(ctx context.Context, namespace string) (bool, error)
}

// mutateResource applies ResourceConfig to a pod being created: it checks the pod's device
// access and returns the patch adding the GPU resource. A pod that names no claim is left alone.
func (rc *ResourceConfig) mutateResource(ctx context.Context, pod *corev1.Pod) ([]PatchOp, error) {
	req, ok, err := rc.request(ctx, pod)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, nil
	}
	forbid := false
	if rc.ForbidsPrivileged != nil {
		if forbid, err = rc.ForbidsPrivileged(ctx, pod.Namespace); err != nil {
			return nil, fmt.Errorf("reading namespace %q: %w", pod.Namespace, err)
		}
	}
	if err := CheckDeviceAccess(pod, forbid); err != nil {
		return nil, err
	}
	return ResourcePatch(pod, req.Resource, req.Count)
}

// request is the resource and count pod asks for: through Request when set (a Shared or MIG
// claim's own resource), else Count's whole GPUs of Name.
func (rc *ResourceConfig) request(ctx context.Context, pod *corev1.Pod) (GPURequest, bool, error) {
	if rc.Request == nil {
		n, ok, err := rc.Count(ctx, pod)
		return GPURequest{Resource: rc.Name, Count: n}, ok, err
	}
	req, ok, err := rc.Request(ctx, pod)
	if req.Resource == "" {
		req.Resource = rc.Name
	}
	return req, ok, err
}

// checkEphemeral checks the ephemeral containers an update of pods/ephemeralcontainers adds to
// a claim pod (kubectl debug) as CheckDeviceAccess checks a claim pod's containers at creation:
// a debug container could otherwise take the variables, privileges or mounts that creation
// refuses.
func (rc *ResourceConfig) checkEphemeral(ctx context.Context, oldPod, pod *corev1.Pod) error {
	if !namesClaim(pod) {
		return nil
	}
	forbid := false
	if rc.ForbidsPrivileged != nil {
		var err error
		if forbid, err = rc.ForbidsPrivileged(ctx, pod.Namespace); err != nil {
			return fmt.Errorf("reading namespace %q: %w", pod.Namespace, err)
		}
	}
	return CheckEphemeralContainers(oldPod, pod, forbid)
}

// namesClaim reports whether the pod names a GpuClaim or a GpuClaimTemplate.
func namesClaim(pod *corev1.Pod) bool {
	_, ok := claims.Name(pod)
	return ok
}

// ResourcePatch gives the first app container a request and limit of count GPUs of resource
// (extended resources need both, equal). The first container holds the pod's GPUs because the
// kubelet hands devices per container and our allocation is per pod; its other containers, and
// init containers, get none. A pod that already asks for the resource must ask for exactly
// count in that container and nowhere else.
func ResourcePatch(pod *corev1.Pod, name corev1.ResourceName, count int32) ([]PatchOp, error) {
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("spec.containers: the pod has no container to hold its %d GPUs", count)
	}
	check := func(field string, i int, c *corev1.Container) error {
		for kind, list := range map[string]corev1.ResourceList{"limits": c.Resources.Limits, "requests": c.Resources.Requests} {
			q, ok := list[name]
			if !ok {
				continue
			}
			if field != "containers" || i != 0 || q.Value() != int64(count) {
				return fmt.Errorf("spec.%s[%d].resources.%s[%s]: %s: the gpu-scheduler sets %s=%d on spec.containers[0] from the pod's GpuClaim; remove it",
					field, i, kind, name, q.String(), name, count)
			}
		}
		return nil
	}
	for i := range pod.Spec.InitContainers {
		if err := check("initContainers", i, &pod.Spec.InitContainers[i]); err != nil {
			return nil, err
		}
	}
	for i := range pod.Spec.Containers {
		if err := check("containers", i, &pod.Spec.Containers[i]); err != nil {
			return nil, err
		}
	}
	c := &pod.Spec.Containers[0]
	q := *resource.NewQuantity(int64(count), resource.DecimalSI)
	var ops []PatchOp
	for kind, list := range map[string]corev1.ResourceList{"limits": c.Resources.Limits, "requests": c.Resources.Requests} {
		if _, ok := list[name]; ok {
			continue
		}
		if list == nil {
			ops = append(ops, PatchOp{Op: "add", Path: Pointer("spec", "containers", "0", "resources", kind), Value: corev1.ResourceList{name: q}})
			continue
		}
		ops = append(ops, PatchOp{Op: "add", Path: Pointer("spec", "containers", "0", "resources", kind, string(name)), Value: q.String()})
	}
	// Map iteration order: sort for a stable patch.
	if len(ops) == 2 && ops[0].Path > ops[1].Path {
		ops[0], ops[1] = ops[1], ops[0]
	}
	return ops, nil
}

// LabelForbidPrivileged on a namespace ("true") refuses privileged containers in its GPU pods.
const LabelForbidPrivileged = gpuv1.LabelPrefix + "forbid-privileged"
