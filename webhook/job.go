package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

var (
	jobKind      = metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
	jobsResource = metav1.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

// mutateJob gives a Job whose pod template names a GpuClaimTemplate (or a GpuClaim) the GPU
// resource request its pods will get (ResourceConfig), in the template itself. Quota managers
// such as Kueue size a Job's admission from its pod template, before any pod exists: without
// the request there they would count no GPUs for it. The pods made from the template then
// already carry the request, which the pod webhook checks equals the claim's count. A template
// of a Shared or MIG claim gives the resource its pods ask for (ResourceConfig.Request: one
// gpu.scheduling/gpu-shared per GPU, gpu.scheduling/mig-<profile> per MIG device), as a pod's
// does; each pod of the Job still gets its own claim from the template.
//
// A template that names a missing GpuClaimTemplate is refused, as its pods would be.
func (a *Admitter) mutateJob(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, Outcome) {
	if req.Kind != jobKind {
		return errorResponse(req, http.StatusBadRequest, fmt.Errorf("mutate: expected a batch/v1 Job, got %s", kindString(req.Kind))), Outcome{}
	}
	if req.Operation != admissionv1.Create || req.SubResource != "" || a.Resource.Name == "" {
		// A Job's pod template is immutable after creation (but for the scheduling directives
		// of a suspended Job), so there is nothing to add later.
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, Outcome{}
	}
	job := &batchv1.Job{}
	if err := decodeObject(req.Object.Raw, job); err != nil {
		return errorResponse(req, http.StatusBadRequest, fmt.Errorf("mutate job %s/%s: %w", req.Namespace, req.Name, err)), Outcome{}
	}
	name := req.Name
	if name == "" {
		name = job.Name
	}
	if name == "" {
		name = job.GenerateName
	}
	ns := job.Namespace
	if ns == "" {
		ns = req.Namespace
	}
	tmpl := &job.Spec.Template
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Annotations: tmpl.Annotations, Labels: tmpl.Labels}, Spec: tmpl.Spec}
	gr, ok, err := a.Resource.request(ctx, pod)
	if err != nil {
		return errorResponse(req, http.StatusUnprocessableEntity, fmt.Errorf("job %s/%s: spec.template.%w", ns, name, err)), Outcome{DenyReason: ReasonInvalid}
	}
	if !ok {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, Outcome{}
	}
	ops, err := ResourcePatch(pod, gr.Resource, gr.Count)
	if err != nil {
		return errorResponse(req, http.StatusUnprocessableEntity, fmt.Errorf("job %s/%s: spec.template.%w", ns, name, err)), Outcome{DenyReason: ReasonInvalid}
	}
	for i := range ops {
		ops[i].Path = Pointer("spec", "template") + ops[i].Path
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if len(ops) == 0 {
		return resp, Outcome{}
	}
	if resp.Patch, err = json.Marshal(ops); err != nil {
		return errorResponse(req, http.StatusInternalServerError, fmt.Errorf("mutate job %s/%s: encode patch: %w", ns, name, err)), Outcome{}
	}
	resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	klog.FromContext(ctx).V(4).Info("Adding the GPU request to a Job's pod template", "job", klog.KRef(ns, name), "resource", gr.Resource, "count", gr.Count)
	return resp, Outcome{Mutated: true}
}
