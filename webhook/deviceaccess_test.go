package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func hostPathPod(p string) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		pod.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}}}}
	}
}

// Each way around the device plugin that an audit found admitted is refused, naming the field.
func TestCheckDeviceAccessHoles(t *testing.T) {
	cm := func(prefix string) []corev1.EnvFromSource {
		return []corev1.EnvFromSource{{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	}
	for _, tc := range []struct {
		name, want string
		edit       func(*corev1.Pod)
	}{
		{"envFrom configMap without prefix", "spec.containers[0].envFrom[0]: a configMapRef with prefix \"\" could set NVIDIA_VISIBLE_DEVICES", func(p *corev1.Pod) { p.Spec.Containers[0].EnvFrom = cm("") }},
		{"envFrom secret with prefix NVIDIA_", "spec.initContainers[0].envFrom[0]: a secretRef with prefix \"NVIDIA_\" could set NVIDIA_VISIBLE_DEVICES", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: "NVIDIA_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}
		}},
		{"envFrom with prefix CUDA_VISIBLE_", "could set CUDA_VISIBLE_DEVICES", func(p *corev1.Pod) { p.Spec.Containers[1].EnvFrom = cm("CUDA_VISIBLE_") }},
		{"envFrom with the whole name as prefix", "could set NVIDIA_VISIBLE_DEVICES", func(p *corev1.Pod) { p.Spec.Containers[1].EnvFrom = cm("NVIDIA_VISIBLE_DEVICES") }},
		{"ephemeral container variable", "spec.ephemeralContainers[0].env[0]: NVIDIA_VISIBLE_DEVICES", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}}}
		}},
		{"hostPath /dev/", `"/dev/" mounts device nodes`, hostPathPod("/dev/")},
		{"hostPath //dev", `"//dev" mounts device nodes`, hostPathPod("//dev")},
		{"hostPath /dev/../dev", `"/dev/../dev" mounts device nodes`, hostPathPod("/dev/../dev")},
		{"hostPath /./dev", `"/./dev" mounts device nodes`, hostPathPod("/./dev")},
		{"hostPath /dev/dri", `"/dev/dri" mounts device nodes`, hostPathPod("/dev/dri")},
		{"hostPath /", `"/" mounts the host's root`, hostPathPod("/")},
		{"hostPath /tmp/..", `"/tmp/.." mounts the host's root`, hostPathPod("/tmp/..")},
		{"hostPath volume-mount device list", `"/var/run/nvidia-container-devices" is the NVIDIA toolkit's volume-mount device list`, hostPathPod("/var/run/nvidia-container-devices")},
		{"mountPath volume-mount device list", "spec.containers[0].volumeMounts[0].mountPath: \"/var/run/nvidia-container-devices/all\"", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "e", MountPath: "/var/run/nvidia-container-devices/all"}}
		}},
		{"mountPath under /run", "spec.containers[1].volumeMounts[0].mountPath: \"/run//nvidia-container-devices/GPU-1\"", func(p *corev1.Pod) {
			p.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: "e", MountPath: "/run//nvidia-container-devices/GPU-1"}}
		}},
		{"CDI annotation", "metadata.annotations[cdi.k8s.io/gpu]: CDI device annotations", func(p *corev1.Pod) { p.Annotations["cdi.k8s.io/gpu"] = "nvidia.com/gpu=all" }},
		{"SYS_ADMIN", "spec.containers[0].securityContext.capabilities.add[0]: SYS_ADMIN", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}},
		{"CAP_SYS_ADMIN", "capabilities.add[1]: CAP_SYS_ADMIN", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "CAP_SYS_ADMIN"}}}
		}},
		{"ALL", "capabilities.add[0]: ALL", func(p *corev1.Pod) {
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"ALL"}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := claimPod()
			tc.edit(p)
			if err := CheckDeviceAccess(p, false); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// What stays allowed: a safe envFrom prefix, hostPaths elsewhere, harmless capabilities,
	// other annotations, mounts elsewhere.
	p := claimPod()
	p.Annotations["example.com/cdi.k8s.io"] = "x"
	p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: "APP_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "h", MountPath: "/var/run/app"}}
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/models"}}},
		{Name: "d", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/devices"}}},
	}
	if err := CheckDeviceAccess(p, true); err != nil {
		t.Fatalf("safe pod refused: %v", err)
	}
}

// kubectl debug on a claim pod: a new ephemeral container is checked as the pod's containers
// were at creation, privileged included where the namespace forbids it.
func TestMutateChecksEphemeralContainers(t *testing.T) {
	forbid := true
	a := &Admitter{Mode: EnvModeNone, Resource: ResourceConfig{Name: gpuRes,
		Count:             func(context.Context, *corev1.Pod) (int32, bool, error) { return 1, true, nil },
		ForbidsPrivileged: func(context.Context, string) (bool, error) { return forbid, nil },
	}}
	review := func(old, p *corev1.Pod) *admissionv1.AdmissionRequest {
		raw, _ := json.Marshal(p)
		oldRaw, _ := json.Marshal(old)
		return &admissionv1.AdmissionRequest{UID: "u", Kind: podKind, Resource: podsResource, SubResource: "ephemeralcontainers", Operation: admissionv1.Update,
			Namespace: p.Namespace, Name: p.Name, Object: runtime.RawExtension{Raw: raw}, OldObject: runtime.RawExtension{Raw: oldRaw}}
	}
	debug := func(ec corev1.EphemeralContainerCommon) (*corev1.Pod, *corev1.Pod) {
		old := claimPod()
		p := old.DeepCopy()
		ec.Name = "debugger"
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: ec})
		return old, p
	}
	for name, tc := range map[string]struct {
		ec   corev1.EphemeralContainerCommon
		want string
	}{
		"variable":   {corev1.EphemeralContainerCommon{Env: []corev1.EnvVar{{Name: "CUDA_VISIBLE_DEVICES", Value: "0"}}}, "spec.ephemeralContainers[0].env[0]: CUDA_VISIBLE_DEVICES"},
		"envFrom":    {corev1.EphemeralContainerCommon{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{}}}}, "spec.ephemeralContainers[0].envFrom[0]"},
		"privileged": {corev1.EphemeralContainerCommon{SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}, "spec.ephemeralContainers[0].securityContext.privileged: privileged GPU pods are forbidden in namespace \"team\""},
		"mount":      {corev1.EphemeralContainerCommon{VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: "/var/run/nvidia-container-devices"}}}, "spec.ephemeralContainers[0].volumeMounts[0].mountPath"},
	} {
		old, p := debug(tc.ec)
		resp, out := a.Mutate(context.Background(), review(old, p))
		if resp.Allowed || out.DenyReason != ReasonDeviceAccess || !strings.Contains(resp.Result.Message, tc.want) {
			t.Errorf("%s: allowed %v result %+v, want refused with %q", name, resp.Allowed, resp.Result, tc.want)
		}
	}
	old, p := debug(corev1.EphemeralContainerCommon{SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}})
	forbid = false
	if resp, _ := a.Mutate(context.Background(), review(old, p)); !resp.Allowed {
		t.Errorf("privileged debug container where the namespace allows it: refused %+v", resp.Result)
	}
	// A pod without a claim is not a GPU pod of the device plugin: left to the pod policy.
	old, p = debug(corev1.EphemeralContainerCommon{})
	delete(p.Annotations, gpuv1.AnnotationClaim)
	if resp, _ := a.Mutate(context.Background(), review(old, p)); !resp.Allowed {
		t.Errorf("debug container of a pod without a claim: refused %+v", resp.Result)
	}
}
