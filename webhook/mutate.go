package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// EnvMode selects which environment variables the webhook points at the allocated GPU IDs.
// docs/webhook.md explains which one is right for which node setup.
type EnvMode string

const (
	// EnvModeCUDA sets CUDA_VISIBLE_DEVICES to the host GPU IDs. Right when the container sees
	// all of the node's GPUs, numbered as on the host.
	EnvModeCUDA EnvMode = "cuda"
	// EnvModeNVIDIA sets NVIDIA_VISIBLE_DEVICES, so that the NVIDIA container runtime exposes
	// only the allocated GPUs (renumbered from 0 inside the container).
	EnvModeNVIDIA EnvMode = "nvidia"
	// EnvModeBoth sets both variables to the host GPU IDs.
	EnvModeBoth EnvMode = "both"
	// EnvModeNone sets no variable: the agent's device plugin hands the GPUs over (docs/node.md).
	EnvModeNone EnvMode = "none"
)

const (
	// EnvCUDAVisibleDevices restricts which GPUs the CUDA runtime enumerates.
	EnvCUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
	// EnvCUDADeviceOrder is how CUDA numbers GPUs. Its default, FASTEST_FIRST, need not match
	// the host (NVML, PCI bus) numbering the allocation uses; PCI_BUS_ID does.
	EnvCUDADeviceOrder = "CUDA_DEVICE_ORDER"
	// EnvNVIDIAVisibleDevices tells the NVIDIA container runtime which GPUs to expose.
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

	// CUDADeviceOrderPCIBus makes CUDA number GPUs as NVML and the scheduler do.
	CUDADeviceOrderPCIBus = "PCI_BUS_ID"
)

// ParseEnvMode parses the value of --visible-devices-env.
func ParseEnvMode(s string) (EnvMode, error) {
	switch m := EnvMode(s); m {
	case EnvModeCUDA, EnvModeNVIDIA, EnvModeBoth, EnvModeNone:
		return m, nil
	}
	return "", fmt.Errorf("visible devices env %q is not one of %s, %s, %s, %s", s, EnvModeCUDA, EnvModeNVIDIA, EnvModeBoth, EnvModeNone)
}

// Env returns the variables the mode sets, in the order they are injected. Host GPU IDs in
// CUDA_VISIBLE_DEVICES are NVML indices (PCI bus order), so CUDA must count the same way.
func (m EnvMode) Env() []corev1.EnvVar {
	cuda := []corev1.EnvVar{visibleDevicesEnv(EnvCUDAVisibleDevices), {Name: EnvCUDADeviceOrder, Value: CUDADeviceOrderPCIBus}}
	switch m {
	case EnvModeNone:
		return nil
	case EnvModeNVIDIA:
		return []corev1.EnvVar{visibleDevicesEnv(EnvNVIDIAVisibleDevices)}
	case EnvModeBoth:
		return append(cuda, visibleDevicesEnv(EnvNVIDIAVisibleDevices))
	default:
		return cuda
	}
}

// Names returns the names of Env.
func (m EnvMode) Names() []string {
	env := m.Env()
	names := make([]string, len(env))
	for i, e := range env {
		names[i] = e.Name
	}
	return names
}

// GPUIDsFieldPath is the Downward API field path of the annotation the scheduler fills with
// the allocated GPU IDs when it binds the pod. An absent annotation resolves to "", which
// CUDA and the NVIDIA runtime both read as "no GPU": a pod bound without an allocation sees none.
var GPUIDsFieldPath = fmt.Sprintf("metadata.annotations['%s']", gpuv1.AnnotationGPUIDs)

// visibleDevicesEnv is the variable name pointed at the allocation through the Downward API.
// APIVersion is set explicitly: the apiserver would default it to "v1", and a stored pod that
// differs from what the webhook would inject must not look "not yet mutated" on reinvocation.
func visibleDevicesEnv(name string) corev1.EnvVar {
	return corev1.EnvVar{
		Name: name,
		ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: GPUIDsFieldPath},
		},
	}
}

// replacedWarning tells the user why their value of a variable was replaced.
func replacedWarning(field string, i, j int, name string) string {
	why := "the gpu-scheduler sets it to the allocated GPUs"
	if name == EnvCUDADeviceOrder {
		why = "the gpu-scheduler sets PCI_BUS_ID so GPU IDs match the host's"
	}
	return fmt.Sprintf("spec.%s[%d].env[%d]: %s from the pod was replaced: %s", field, i, j, name, why)
}

// WantsGPUs reports whether the webhook mutates the pod: it names a GpuClaim, or a
// GpuClaimTemplate from which its claim is made, or asks for our scheduler, schedulerName
// (gpuv1.SchedulerName when empty; a release with another --scheduler-name leaves the other
// release's pods alone). Pods of the scheduler without a claim get the variables too; they
// resolve to "" (no GPU) because the scheduler allocates nothing for them.
func WantsGPUs(pod *corev1.Pod, schedulerName string) bool {
	return namesClaim(pod) || claims.ScheduledBy(pod.Spec.SchedulerName, schedulerName)
}

// Mutation is what the webhook does to one pod.
type Mutation struct {
	// Patch is empty when the pod needs no change (not a GPU pod, or already mutated).
	Patch []PatchOp
	// Warnings tell the user about values of theirs that were replaced.
	Warnings []string
}

// MutatePod computes, for a pod of schedulerName (see WantsGPUs), the JSON patch that points every container's visible-devices variables at
// the allocation. It is idempotent: a pod it already mutated yields an empty patch, which is what
// makes reinvocation (for containers added by later webhooks) safe.
func MutatePod(pod *corev1.Pod, mode EnvMode, schedulerName string) Mutation {
	var m Mutation
	if !WantsGPUs(pod, schedulerName) {
		return m
	}
	want := mode.Env()
	if len(want) == 0 {
		return m
	}
	for i := range pod.Spec.InitContainers {
		m.container("initContainers", i, pod.Spec.InitContainers[i].Env, want)
	}
	for i := range pod.Spec.Containers {
		m.container("containers", i, pod.Spec.Containers[i].Env, want)
	}
	return m
}

// MutateEphemeralContainers computes the patch for an update of the pods/ephemeralcontainers
// subresource (kubectl debug): the ephemeral containers that oldPod does not have yet get the
// variables. Existing ephemeral containers are left alone: the apiserver refuses any change to
// them, and they were mutated when they were added.
func MutateEphemeralContainers(oldPod, pod *corev1.Pod, mode EnvMode, schedulerName string) Mutation {
	var m Mutation
	if !WantsGPUs(pod, schedulerName) {
		return m
	}
	existing := make(map[string]bool, len(oldPod.Spec.EphemeralContainers))
	for _, ec := range oldPod.Spec.EphemeralContainers {
		existing[ec.Name] = true
	}
	want := mode.Env()
	if len(want) == 0 {
		return m
	}
	for i, ec := range pod.Spec.EphemeralContainers {
		if !existing[ec.Name] {
			m.container("ephemeralContainers", i, ec.Env, want)
		}
	}
	return m
}

// container adds the operations for one container's env list. Three cases, chosen so that the
// common ones produce the smallest patch and no case loses or reorders the user's variables:
//   - no env list (or an empty one): add the whole list;
//   - none of our variables yet: insert ours at the front (a user variable may reference
//     $(CUDA_VISIBLE_DEVICES), and the kubelet expands only variables defined earlier);
//   - a user-set or duplicated variable of ours: replace the list with ours first and the user's
//     other variables after, in their order, and warn about each value replaced.
func (m *Mutation) container(field string, i int, env []corev1.EnvVar, want []corev1.EnvVar) {
	envPath := Pointer("spec", field, index(i), "env")
	if len(env) == 0 {
		m.Patch = append(m.Patch, PatchOp{Op: "add", Path: envPath, Value: want})
		return
	}
	managed := make(map[string]corev1.EnvVar, len(want))
	for _, w := range want {
		managed[w.Name] = w
	}
	seen := make(map[string]int, len(want))
	foreign := false
	for j, e := range env {
		w, ok := managed[e.Name]
		if !ok {
			continue
		}
		seen[e.Name]++
		if !equality.Semantic.DeepEqual(e, w) {
			foreign = true
			m.Warnings = append(m.Warnings, replacedWarning(field, i, j, e.Name))
		}
	}
	if !foreign {
		done := true
		for _, w := range want {
			if seen[w.Name] != 1 {
				done = false
			}
		}
		if done {
			return
		}
	}
	if len(seen) == 0 {
		// Inserting at index 0 in reverse order leaves ours at the front in their order.
		for k := len(want) - 1; k >= 0; k-- {
			m.Patch = append(m.Patch, PatchOp{Op: "add", Path: envPath + "/0", Value: want[k]})
		}
		return
	}
	merged := make([]corev1.EnvVar, 0, len(env)+len(want))
	merged = append(merged, want...)
	for _, e := range env {
		if _, ok := managed[e.Name]; !ok {
			merged = append(merged, e)
		}
	}
	m.Patch = append(m.Patch, PatchOp{Op: "replace", Path: envPath, Value: merged})
}
