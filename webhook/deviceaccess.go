package webhook

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// visibleDeviceVars are the variables that pick GPUs inside a container: the NVIDIA container
// runtime hook reads NVIDIA_VISIBLE_DEVICES (with the legacy runtime, or when the toolkit's
// accept-nvidia-visible-devices-envvar-when-unprivileged is left true, the variable alone
// exposes any GPU of the node), and CUDA reads CUDA_VISIBLE_DEVICES.
var visibleDeviceVars = []string{EnvNVIDIAVisibleDevices, EnvCUDAVisibleDevices}

// Paths through which a container reaches GPU device nodes without the device plugin.
const (
	// devDir holds the device nodes (/dev/nvidia0, /dev/nvidiactl, ...).
	devDir = "/dev"
	// NVIDIAContainerDevicesDir is where the NVIDIA toolkit, with
	// accept-nvidia-visible-devices-as-volume-mounts, reads the GPUs to expose from the
	// container's mounts (/var/run/nvidia-container-devices/<id> or /all). /var/run is a link to
	// /run on current distributions, so both spellings count.
	NVIDIAContainerDevicesDir = "/var/run/nvidia-container-devices"
	nvidiaContainerDevicesRun = "/run/nvidia-container-devices"
	// CDIAnnotationPrefix starts the pod annotations through which containerd and CRI-O inject
	// CDI devices (cdi.k8s.io/<name>: nvidia.com/gpu=all) without a device plugin.
	CDIAnnotationPrefix = "cdi.k8s.io/"
)

// dangerousCapabilities open device nodes or mount /dev: CAP_SYS_ADMIN (mount, and most of
// what privileged allows) and ALL, which includes it. The runtime accepts the name with or
// without the CAP_ prefix.
var dangerousCapabilities = []string{"SYS_ADMIN", "ALL"}

// containerRef is one container of any kind, with the path of its field for messages.
type containerRef struct {
	field   string // initContainers, containers or ephemeralContainers
	i       int
	env     []corev1.EnvVar
	envFrom []corev1.EnvFromSource
	sc      *corev1.SecurityContext
	mounts  []corev1.VolumeMount
}

func podContainers(pod *corev1.Pod) []containerRef {
	var all []containerRef
	for i, c := range pod.Spec.InitContainers {
		all = append(all, containerRef{"initContainers", i, c.Env, c.EnvFrom, c.SecurityContext, c.VolumeMounts})
	}
	for i, c := range pod.Spec.Containers {
		all = append(all, containerRef{"containers", i, c.Env, c.EnvFrom, c.SecurityContext, c.VolumeMounts})
	}
	for i, c := range pod.Spec.EphemeralContainers {
		all = append(all, containerRef{"ephemeralContainers", i, c.Env, c.EnvFrom, c.SecurityContext, c.VolumeMounts})
	}
	return all
}

// CheckDeviceAccess refuses, naming the field, a pod that would reach GPUs around the device
// plugin (docs/webhook.md#device-access lists each way and why):
//   - a container (init, app or ephemeral) that sets NVIDIA_VISIBLE_DEVICES or
//     CUDA_VISIBLE_DEVICES itself, or takes variables from a ConfigMap or Secret (envFrom) with
//     a prefix that could make one of those names: the keys are not known at admission, and the
//     source may change after it;
//   - a volume mounted where the NVIDIA toolkit reads its volume-mount device list;
//   - a hostPath volume of /dev, anything under it, or a directory above it (/), in any
//     spelling (//dev, /dev/../dev, /./dev);
//   - a cdi.k8s.io/* pod annotation, which makes the runtime inject CDI devices;
//   - CAP_SYS_ADMIN or ALL in securityContext.capabilities.add;
//   - with forbidPrivileged (the namespace's LabelForbidPrivileged), a privileged container:
//     it sees every device node.
func CheckDeviceAccess(pod *corev1.Pod, forbidPrivileged bool) error {
	for k := range pod.Annotations {
		if strings.HasPrefix(k, CDIAnnotationPrefix) {
			return fmt.Errorf("metadata.annotations[%s]: CDI device annotations make the container runtime inject devices; the GPUs a container sees are handed over by the gpu-scheduler's device plugin: remove it", k)
		}
	}
	for _, c := range podContainers(pod) {
		if err := checkContainer(pod.Namespace, c, forbidPrivileged); err != nil {
			return err
		}
	}
	for i, v := range pod.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		if reason := deviceHostPath(v.HostPath.Path); reason != "" {
			return fmt.Errorf("spec.volumes[%d].hostPath.path: %q %s; the GPUs a container sees are handed over by the gpu-scheduler's device plugin: remove it", i, v.HostPath.Path, reason)
		}
	}
	return nil
}

// CheckEphemeralContainers applies CheckDeviceAccess to the ephemeral containers that pod adds
// to oldPod (an update of pods/ephemeralcontainers, kubectl debug). Existing ones were checked
// when they were added, and the apiserver refuses any change to them.
func CheckEphemeralContainers(oldPod, pod *corev1.Pod, forbidPrivileged bool) error {
	existing := make(map[string]bool, len(oldPod.Spec.EphemeralContainers))
	for _, ec := range oldPod.Spec.EphemeralContainers {
		existing[ec.Name] = true
	}
	for i, c := range pod.Spec.EphemeralContainers {
		if existing[c.Name] {
			continue
		}
		ref := containerRef{"ephemeralContainers", i, c.Env, c.EnvFrom, c.SecurityContext, c.VolumeMounts}
		if err := checkContainer(pod.Namespace, ref, forbidPrivileged); err != nil {
			return err
		}
	}
	return nil
}

func checkContainer(namespace string, c containerRef, forbidPrivileged bool) error {
	for j, e := range c.env {
		for _, v := range visibleDeviceVars {
			if e.Name == v {
				return fmt.Errorf("spec.%s[%d].env[%d]: %s is set by the pod; the GPUs a container sees are handed over by the gpu-scheduler's device plugin: remove it", c.field, c.i, j, v)
			}
		}
	}
	for j, ef := range c.envFrom {
		if v, ok := envFromCouldSet(ef.Prefix); ok {
			source := "configMapRef"
			if ef.SecretRef != nil {
				source = "secretRef"
			}
			return fmt.Errorf("spec.%s[%d].envFrom[%d]: a %s with prefix %q could set %s, which would pick the GPUs the container sees: give it a prefix that no visible-devices variable starts with (e.g. APP_), or set the variables you need one by one in env",
				c.field, c.i, j, source, ef.Prefix, v)
		}
	}
	for j, m := range c.mounts {
		if underAny(path.Clean("/"+m.MountPath), NVIDIAContainerDevicesDir, nvidiaContainerDevicesRun) {
			return fmt.Errorf("spec.%s[%d].volumeMounts[%d].mountPath: %q is where the NVIDIA toolkit reads the GPUs to expose from volume mounts; the GPUs a container sees are handed over by the gpu-scheduler's device plugin: remove it", c.field, c.i, j, m.MountPath)
		}
	}
	if c.sc == nil {
		return nil
	}
	if c.sc.Capabilities != nil {
		for j, capability := range c.sc.Capabilities.Add {
			name := strings.TrimPrefix(strings.ToUpper(string(capability)), "CAP_")
			for _, d := range dangerousCapabilities {
				if name == d {
					return fmt.Errorf("spec.%s[%d].securityContext.capabilities.add[%d]: %s lets the container mount /dev and open every GPU: remove it", c.field, c.i, j, capability)
				}
			}
		}
	}
	if forbidPrivileged && c.sc.Privileged != nil && *c.sc.Privileged {
		return fmt.Errorf("spec.%s[%d].securityContext.privileged: privileged GPU pods are forbidden in namespace %q (label %s): a privileged container sees every GPU", c.field, c.i, namespace, LabelForbidPrivileged)
	}
	return nil
}

// envFromCouldSet reports whether an envFrom with prefix could define a visible-devices
// variable: the prefix is empty or starts one of the names.
func envFromCouldSet(prefix string) (string, bool) {
	for _, v := range visibleDeviceVars {
		if strings.HasPrefix(v, prefix) {
			return v, true
		}
	}
	return "", false
}

// deviceHostPath says why a hostPath reaches device nodes, or "" when it does not. The path is
// cleaned first (a relative path is read from /, as the kubelet would refuse it anyway), so
// every spelling of /dev counts.
func deviceHostPath(p string) string {
	clean := path.Clean("/" + p)
	switch {
	case clean == "/":
		return "mounts the host's root, /dev included"
	case underAny(clean, devDir):
		return "mounts device nodes (/dev)"
	case underAny(clean, NVIDIAContainerDevicesDir, nvidiaContainerDevicesRun):
		return "is the NVIDIA toolkit's volume-mount device list"
	}
	return ""
}

// underAny reports whether the clean absolute path p is one of dirs or below one.
func underAny(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
