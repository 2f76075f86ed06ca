package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func templateJob(template string) *batchv1.Job {
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "train", Labels: map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpuv1.AnnotationClaimTemplate: template}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}, {Name: "side"}}},
		}},
	}
}

func jobReview(t *testing.T, job *batchv1.Job) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{UID: "u", Kind: jobKind, Resource: jobsResource, Operation: admissionv1.Create,
		Namespace: job.Namespace, Name: job.Name, Object: runtime.RawExtension{Raw: raw}}
}

// A Job whose pod template names a GpuClaimTemplate gets the template's GPU count as the
// resource request of its first container, in the template (where Kueue reads it); the pods made
// from it then need no patch and pass the pod webhook's check.
func TestMutateJobAddsResourceToTemplate(t *testing.T) {
	counts := map[string]int32{"x4": 4}
	a := &Admitter{Mode: EnvModeNone, Resource: ResourceConfig{Name: gpuRes,
		Count: func(_ context.Context, p *corev1.Pod) (int32, bool, error) {
			name, ok := p.Annotations[gpuv1.AnnotationClaimTemplate]
			if !ok {
				return 0, false, nil
			}
			if p.Namespace != "team" {
				return 0, false, errors.New("counted in the wrong namespace " + p.Namespace)
			}
			n, ok := counts[name]
			if !ok {
				return 0, false, errors.New("metadata.annotations[gpu.scheduling/claim-template]: GpuClaimTemplate team/" + name + " not found")
			}
			return n, true, nil
		}}}
	job := templateJob("x4")
	resp, out := a.Mutate(context.Background(), jobReview(t, job))
	if !resp.Allowed || !out.Mutated {
		t.Fatalf("allowed %v mutated %v %+v; want the Job mutated", resp.Allowed, out.Mutated, resp.Result)
	}
	raw, _ := json.Marshal(job)
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s: %v", resp.Patch, err)
	}
	got := &batchv1.Job{}
	if err := json.Unmarshal(patched, got); err != nil {
		t.Fatal(err)
	}
	c := got.Spec.Template.Spec.Containers
	if q := c[0].Resources.Requests[gpuRes]; q.Value() != 4 {
		t.Errorf("containers[0] requests %v; want nvidia.com/gpu 4", c[0].Resources.Requests)
	}
	if q := c[0].Resources.Limits[gpuRes]; q.Value() != 4 {
		t.Errorf("containers[0] limits %v; want nvidia.com/gpu 4", c[0].Resources.Limits)
	}
	if q := c[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "1" {
		t.Errorf("containers[0] cpu request %s; want it kept", q.String())
	}
	if len(c[1].Resources.Requests)+len(c[1].Resources.Limits) != 0 {
		t.Errorf("containers[1] got %v; want nothing", c[1].Resources)
	}

	// The Job controller's pod, made from the mutated template, needs nothing more.
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: got.Spec.Template.ObjectMeta, Spec: got.Spec.Template.Spec}
	pod.Namespace, pod.Name = "team", "train-abcde"
	praw, _ := json.Marshal(pod)
	presp, _ := a.Mutate(context.Background(), &admissionv1.AdmissionRequest{UID: "p", Kind: podKind, Resource: podsResource,
		Operation: admissionv1.Create, Namespace: "team", Name: pod.Name, Object: runtime.RawExtension{Raw: praw}})
	if !presp.Allowed || strings.Contains(string(presp.Patch), "nvidia.com") {
		t.Fatalf("pod from the mutated Job: allowed %v patch %s; want allowed with no resource added", presp.Allowed, presp.Patch)
	}

	// A template asking for another count is refused, naming the Job's field.
	wrong := templateJob("x4")
	wrong.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpuRes: resource.MustParse("2")}
	resp, out = a.Mutate(context.Background(), jobReview(t, wrong))
	if resp.Allowed || out.DenyReason != ReasonInvalid || !strings.Contains(resp.Result.Message, "job team/train: spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: 2") {
		t.Fatalf("Job asking for 2 of a 4-GPU template: allowed %v %+v", resp.Allowed, resp.Result)
	}
	// A missing template is refused with the field (its pods would be refused too).
	resp, _ = a.Mutate(context.Background(), jobReview(t, templateJob("missing")))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "job team/train: spec.template.metadata.annotations[gpu.scheduling/claim-template]: GpuClaimTemplate team/missing not found") {
		t.Fatalf("Job naming a missing template: allowed %v %+v", resp.Allowed, resp.Result)
	}
	// A Job naming no claim, an update, and a webhook without the resource leave Jobs alone.
	plain := templateJob("x4")
	plain.Spec.Template.Annotations = nil
	if resp, _ := a.Mutate(context.Background(), jobReview(t, plain)); !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("Job without a claim: allowed %v patch %s; want untouched", resp.Allowed, resp.Patch)
	}
	upd := jobReview(t, templateJob("x4"))
	upd.Operation = admissionv1.Update
	if resp, _ := a.Mutate(context.Background(), upd); !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("Job update: allowed %v patch %s; want untouched", resp.Allowed, resp.Patch)
	}
	off := &Admitter{Mode: EnvModeCUDA}
	if resp, _ := off.Mutate(context.Background(), jobReview(t, templateJob("x4"))); !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("webhook without --resource-name: allowed %v patch %s; want untouched", resp.Allowed, resp.Patch)
	}
}

// A Job whose pod template names a Shared or MIG GpuClaimTemplate is admitted as its pods are:
// its template asks for one gpu.scheduling/gpu-shared per GPU, or for the MIG devices of the
// template's profile, read from the cluster's templates; the pods made from it pass the pod
// webhook unchanged.
func TestMutateJobOfSharedAndMIGTemplates(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "team", Name: name} }
	dev := func(d gpuv1.DeviceRequest) gpuv1.GpuClaimTemplateSpec {
		return gpuv1.GpuClaimTemplateSpec{Spec: gpuv1.GpuClaimSpec{Devices: d}}
	}
	gpus := fake.NewSimpleClientset(
		&gpuv1.GpuClaimTemplate{ObjectMeta: meta("quarter"), Spec: dev(gpuv1.DeviceRequest{Count: 1, Exclusivity: gpuv1.Shared, Share: &gpuv1.GPUShare{MemoryPercent: 25}})},
		&gpuv1.GpuClaimTemplate{ObjectMeta: meta("slices"), Spec: dev(gpuv1.DeviceRequest{Count: 2, Exclusivity: gpuv1.MIG, MigProfile: "1g.10gb"})},
	)
	r := newClusterReader(kubefake.NewSimpleClientset(), gpus, ReaderOptions{Claims: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	a := &Admitter{Mode: EnvModeNone, Resource: ResourceConfig{Name: "gpu.scheduling/gpu", Count: r.Count, Request: r.Request}}
	for _, tc := range []struct {
		template string
		resource corev1.ResourceName
		count    int64
	}{{"quarter", "gpu.scheduling/gpu-shared", 1}, {"slices", "gpu.scheduling/mig-1g.10gb", 2}} {
		job := templateJob(tc.template)
		resp, out := a.Mutate(ctx, jobReview(t, job))
		if !resp.Allowed || !out.Mutated {
			t.Fatalf("Job of template %s: allowed %v mutated %v %+v; want it mutated", tc.template, resp.Allowed, out.Mutated, resp.Result)
		}
		raw, _ := json.Marshal(job)
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := patch.Apply(raw)
		if err != nil {
			t.Fatal(err)
		}
		got := &batchv1.Job{}
		if err := json.Unmarshal(patched, got); err != nil {
			t.Fatal(err)
		}
		c := got.Spec.Template.Spec.Containers[0]
		if q := c.Resources.Limits[tc.resource]; q.Value() != tc.count || len(c.Resources.Limits) != 1 {
			t.Errorf("Job of template %s: containers[0] limits %v, want %s %d only", tc.template, c.Resources.Limits, tc.resource, tc.count)
		}
		if q := c.Resources.Requests[tc.resource]; q.Value() != tc.count {
			t.Errorf("Job of template %s: containers[0] requests %v, want %s %d", tc.template, c.Resources.Requests, tc.resource, tc.count)
		}
		pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: got.Spec.Template.ObjectMeta, Spec: got.Spec.Template.Spec}
		pod.Namespace, pod.Name = "team", "train-abcde"
		praw, _ := json.Marshal(pod)
		presp, _ := a.Mutate(ctx, &admissionv1.AdmissionRequest{UID: "p", Kind: podKind, Resource: podsResource,
			Operation: admissionv1.Create, Namespace: "team", Name: pod.Name, Object: runtime.RawExtension{Raw: praw}})
		if !presp.Allowed || strings.Contains(string(presp.Patch), "gpu.scheduling/") {
			t.Errorf("pod of the Job of template %s: allowed %v patch %s %+v; want allowed with no resource added", tc.template, presp.Allowed, presp.Patch, presp.Result)
		}
	}
}
