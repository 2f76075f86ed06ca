package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

const gpuRes = corev1.ResourceName("nvidia.com/gpu")

func claimPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p", Annotations: map[string]string{gpuv1.AnnotationClaim: "c"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "main"}, {Name: "side"}},
		},
	}
}

func TestResourcePatch(t *testing.T) {
	pod := claimPod()
	ops, err := ResourcePatch(pod, gpuRes, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[0].Path != "/spec/containers/0/resources/limits" || ops[1].Path != "/spec/containers/0/resources/requests" {
		t.Fatalf("patch %+v; want limits and requests added on containers[0]", ops)
	}
	if got := ops[0].Value.(corev1.ResourceList)[gpuRes]; got.Value() != 2 {
		t.Fatalf("limit %s, want 2", got.String())
	}

	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	ops, err = ResourcePatch(pod, gpuRes, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ops[0].Path != "/spec/containers/0/resources/limits/nvidia.com~1gpu" || ops[0].Value != "2" {
		t.Fatalf("patch %+v; want the GPU added to the existing limits", ops)
	}

	// Already mutated (reinvocation): nothing to do.
	pod.Spec.Containers[0].Resources.Limits[gpuRes] = resource.MustParse("2")
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{gpuRes: resource.MustParse("2")}
	if ops, err = ResourcePatch(pod, gpuRes, 2); err != nil || len(ops) != 0 {
		t.Fatalf("mutated pod: ops %+v err %v; want none", ops, err)
	}

	for name, edit := range map[string]func(*corev1.Pod){
		"spec.containers[0].resources.limits[nvidia.com/gpu]": func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Limits[gpuRes] = resource.MustParse("3") },
		"spec.containers[1].resources.limits[nvidia.com/gpu]": func(p *corev1.Pod) {
			p.Spec.Containers[1].Resources.Limits = corev1.ResourceList{gpuRes: resource.MustParse("1")}
		},
		"spec.initContainers[0].resources.requests[nvidia.com/gpu]": func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Resources.Requests = corev1.ResourceList{gpuRes: resource.MustParse("1")}
		},
	} {
		p := pod.DeepCopy()
		edit(p)
		if _, err := ResourcePatch(p, gpuRes, 2); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v does not name the field", name, err)
		}
	}
}

func TestCheckDeviceAccess(t *testing.T) {
	if err := CheckDeviceAccess(claimPod(), true); err != nil {
		t.Fatalf("plain pod refused: %v", err)
	}
	for field, edit := range map[string]func(*corev1.Pod){
		"spec.containers[1].env[0]: NVIDIA_VISIBLE_DEVICES": func(p *corev1.Pod) {
			p.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		},
		"spec.initContainers[0].env[0]: CUDA_VISIBLE_DEVICES": func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Env = []corev1.EnvVar{{Name: "CUDA_VISIBLE_DEVICES", Value: "0"}}
		},
		"spec.volumes[0].hostPath.path": func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/nvidia3"}}}}
		},
		"spec.volumes[0].hostPath.path: \"/dev/\"": func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/"}}}}
		},
		"spec.containers[0].securityContext.privileged": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		},
	} {
		p := claimPod()
		edit(p)
		if err := CheckDeviceAccess(p, true); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v does not name the field", field, err)
		}
	}
	p := claimPod()
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	if err := CheckDeviceAccess(p, false); err != nil {
		t.Fatalf("privileged pod refused in a namespace that allows it: %v", err)
	}
}

// TestMutateAddsResource goes through the Admitter as the server does.
func TestMutateAddsResource(t *testing.T) {
	counts := map[string]int32{"c": 3}
	a := &Admitter{Mode: EnvModeNone, Resource: ResourceConfig{Name: gpuRes,
		Count: func(_ context.Context, p *corev1.Pod) (int32, bool, error) {
			n, ok := counts[p.Annotations[gpuv1.AnnotationClaim]]
			return n, ok, nil
		}}}
	review := func(p *corev1.Pod) *admissionv1.AdmissionRequest {
		raw, _ := json.Marshal(p)
		return &admissionv1.AdmissionRequest{UID: "u", Kind: podKind, Resource: podsResource, Operation: admissionv1.Create,
			Namespace: p.Namespace, Name: p.Name, Object: runtime.RawExtension{Raw: raw}}
	}
	resp, _ := a.Mutate(context.Background(), review(claimPod()))
	if !resp.Allowed || !strings.Contains(string(resp.Patch), `"nvidia.com/gpu":"3"`) || strings.Contains(string(resp.Patch), "VISIBLE") {
		t.Fatalf("allowed %v patch %s; want nvidia.com/gpu 3 and no variables", resp.Allowed, resp.Patch)
	}
	bad := claimPod()
	bad.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	resp, out := a.Mutate(context.Background(), review(bad))
	if resp.Allowed || out.DenyReason != ReasonDeviceAccess || !strings.Contains(resp.Result.Message, "spec.containers[0].env[0]") {
		t.Fatalf("pod setting NVIDIA_VISIBLE_DEVICES: allowed %v, %+v", resp.Allowed, resp.Result)
	}
	other := claimPod()
	other.Annotations = nil
	if resp, _ := a.Mutate(context.Background(), review(other)); !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("pod without a claim: allowed %v patch %s; want untouched", resp.Allowed, resp.Patch)
	}
}

// TestMutateAddsMIGAndSharedResources: with a Request reader the patch asks for the resource
// the claim names (a MIG profile's, gpu-shared), not whole GPUs.
func TestMutateAddsMIGAndSharedResources(t *testing.T) {
	reqs := map[string]GPURequest{"mig": {Resource: "gpu.scheduling/mig-1g.10gb", Count: 1}, "shared": {Resource: "gpu.scheduling/gpu-shared", Count: 1}}
	a := &Admitter{Mode: EnvModeNone, Resource: ResourceConfig{Name: gpuRes,
		Count: func(context.Context, *corev1.Pod) (int32, bool, error) {
			return 0, false, errors.New("Count must not be used when Request is set")
		},
		Request: func(_ context.Context, p *corev1.Pod) (GPURequest, bool, error) {
			r, ok := reqs[p.Annotations[gpuv1.AnnotationClaim]]
			return r, ok, nil
		}}}
	for claim, want := range map[string]string{"mig": `"gpu.scheduling/mig-1g.10gb":"1"`, "shared": `"gpu.scheduling/gpu-shared":"1"`} {
		p := claimPod()
		p.Annotations[gpuv1.AnnotationClaim] = claim
		raw, _ := json.Marshal(p)
		resp, _ := a.Mutate(context.Background(), &admissionv1.AdmissionRequest{UID: "u", Kind: podKind, Resource: podsResource, Operation: admissionv1.Create,
			Namespace: p.Namespace, Name: p.Name, Object: runtime.RawExtension{Raw: raw}})
		if !resp.Allowed || !strings.Contains(string(resp.Patch), want) || strings.Contains(string(resp.Patch), string(gpuRes)) {
			t.Errorf("%s claim: allowed %v patch %s %v; want %s only", claim, resp.Allowed, resp.Patch, resp.Result, want)
		}
	}
}

// A pod with a malformed gpu-scheduling-map is refused at creation, naming the line and what is
// wrong; a well-formed one passes.
func TestMutateRefusesMalformedSchedulingMap(t *testing.T) {
	a := &Admitter{Mode: EnvModeCUDA}
	review := func(p *corev1.Pod) *admissionv1.AdmissionRequest {
		raw, _ := json.Marshal(p)
		return &admissionv1.AdmissionRequest{UID: "u", Kind: podKind, Resource: podsResource, Operation: admissionv1.Create,
			Namespace: p.Namespace, Name: p.Name, Object: runtime.RawExtension{Raw: raw}}
	}
	bad := claimPod()
	bad.Annotations[gpuv1.AnnotationSchedulingMap] = "0=node-a:0,1\n1=node-b"
	resp, out := a.Mutate(context.Background(), review(bad))
	if resp.Allowed || out.DenyReason != ReasonInvalid || !strings.Contains(resp.Result.Message, `annotation gpu.scheduling/gpu-scheduling-map: scheduling map line 2: allocation "node-b" has no ':'`) {
		t.Fatalf("malformed map: allowed %v, %+v", resp.Allowed, resp.Result)
	}
	good := claimPod()
	good.Annotations[gpuv1.AnnotationSchedulingMap] = "0=node-a:0,1\n1=node-b:2"
	if resp, _ := a.Mutate(context.Background(), review(good)); !resp.Allowed {
		t.Fatalf("well-formed map refused: %+v", resp.Result)
	}
}
