package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

var (
	podKind        = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	bindingKind    = metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}
	podsResource   = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	admissionGVK   = admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
	errEmptyReview = errors.New("AdmissionReview has no request")
)

// bindingsResource is the older namespaced bindings resource
// (POST /api/v1/namespaces/{ns}/bindings). The apiserver binds through the same code as for
// pods/binding and copies the Binding's annotations onto the pod.
var bindingsResource = metav1.GroupVersionResource{Version: "v1", Resource: "bindings"}

// Admitter decides admission requests. It holds no state besides its configuration and is
// safe for concurrent use.
type Admitter struct {
	Mode      EnvMode
	Scheduler SchedulerIdentity
	// SchedulerName is the pods' spec.schedulerName this release mutates (gpuv1.SchedulerName
	// when empty).
	SchedulerName string
	// Resource, when its Name is set, adds the GPU resource to claim pods (resource.go).
	Resource ResourceConfig
	// SiblingSchedulerNames are the schedulerNames of other releases whose own guards judge
	// their pods' Bindings (Config.SiblingSchedulerNames); SiblingPod reads a pod's
	// schedulerName. Both empty: every Binding with the allocation is this release's to judge.
	SiblingSchedulerNames []string
	SiblingPod            func(ctx context.Context, namespace, name string) (schedulerName string, err error)
	// RefuseOtherSchedulers refuses a pod that names a claim or a claim template but asks for a
	// scheduler that is neither this release's, a sibling's nor the default (SchedulerNamePatch).
	RefuseOtherSchedulers bool
}

// Outcome is what a request did, for metrics and logs.
type Outcome struct {
	// Mutated: a non-empty patch was returned. Replaced: a user-set variable was replaced.
	Mutated, Replaced bool
	// DenyReason is set when the request was denied.
	DenyReason string
}

// DecodeReview decodes an AdmissionReview request body. Only admission.k8s.io/v1 is accepted:
// the rendered configurations ask for nothing else.
func DecodeReview(data []byte) (*admissionv1.AdmissionReview, error) {
	review := &admissionv1.AdmissionReview{}
	// Case-sensitive, as the apiserver decodes: "UID" must not be read as "uid".
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, review); err != nil {
		return nil, fmt.Errorf("decode AdmissionReview: %w", err)
	}
	if gvk := review.GroupVersionKind(); gvk != admissionGVK {
		return nil, fmt.Errorf("decode AdmissionReview: got apiVersion %q kind %q, want %s", review.APIVersion, review.Kind, admissionGVK.GroupVersion().String()+" AdmissionReview")
	}
	if review.Request == nil {
		return nil, errEmptyReview
	}
	if review.Request.UID == "" {
		return nil, errors.New("decode AdmissionReview: request has no uid")
	}
	return review, nil
}

// Mutate answers a /mutate request.
func (a *Admitter) Mutate(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, Outcome) {
	if req.Resource == jobsResource && req.SubResource == "" {
		return a.mutateJob(ctx, req)
	}
	if req.Resource != podsResource || req.Kind != podKind || (req.SubResource != "" && req.SubResource != "ephemeralcontainers") {
		return errorResponse(req, http.StatusBadRequest, fmt.Errorf("mutate: expected a v1 Pod, got %s (resource %s, subresource %q)", kindString(req.Kind), resourceString(req.Resource), req.SubResource)), Outcome{}
	}
	var (
		pod = &corev1.Pod{}
		m   Mutation
	)
	switch {
	case req.SubResource == "" && req.Operation == admissionv1.Create:
		if err := decodeObject(req.Object.Raw, pod); err != nil {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("mutate pod %s/%s: %w", req.Namespace, req.Name, err)), Outcome{}
		}
		if raw, ok := pod.Annotations[gpuv1.AnnotationSchedulingMap]; ok {
			// A malformed placement map is refused at creation, with its line: the scheduler
			// could only leave the pod Pending later.
			if _, err := gpuv1.ParseSchedulingMap(raw); err != nil {
				return errorResponse(req, http.StatusUnprocessableEntity, fmt.Errorf("pod %s/%s: annotation %s: %w", req.Namespace, podName(req, pod), gpuv1.AnnotationSchedulingMap, err)), Outcome{DenyReason: ReasonInvalid}
			}
		}
		if keys := UnknownAnnotations(pod); len(keys) > 0 {
			return errorResponse(req, http.StatusUnprocessableEntity, fmt.Errorf("pod %s/%s: %w", req.Namespace, podName(req, pod), unknownAnnotationsError(keys))), Outcome{DenyReason: ReasonInvalid}
		}
		sched, err := SchedulerNamePatch(pod, a.SchedulerName, a.SiblingSchedulerNames, a.RefuseOtherSchedulers)
		if err != nil {
			return errorResponse(req, http.StatusUnprocessableEntity, fmt.Errorf("pod %s/%s: %w", req.Namespace, podName(req, pod), err)), Outcome{DenyReason: ReasonInvalid}
		}
		m = MutatePod(pod, a.Mode, a.SchedulerName)
		m.Patch = append(sched, m.Patch...)
		if a.Resource.Name != "" {
			ops, err := a.Resource.mutateResource(ctx, pod)
			if err != nil {
				return errorResponse(req, http.StatusForbidden, fmt.Errorf("pod %s/%s: %w", req.Namespace, podName(req, pod), err)), Outcome{DenyReason: ReasonDeviceAccess}
			}
			m.Patch = append(m.Patch, ops...)
		}
	case req.SubResource == "ephemeralcontainers" && req.Operation == admissionv1.Update:
		old := &corev1.Pod{}
		if err := decodeObject(req.Object.Raw, pod); err != nil {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("mutate ephemeral containers of pod %s/%s: %w", req.Namespace, req.Name, err)), Outcome{}
		}
		if err := decodeObject(req.OldObject.Raw, old); err != nil {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("mutate ephemeral containers of pod %s/%s: old object: %w", req.Namespace, req.Name, err)), Outcome{}
		}
		if a.Resource.Name != "" {
			if err := a.Resource.checkEphemeral(ctx, old, pod); err != nil {
				return errorResponse(req, http.StatusForbidden, fmt.Errorf("pod %s/%s: %w", req.Namespace, req.Name, err)), Outcome{DenyReason: ReasonDeviceAccess}
			}
		}
		m = MutateEphemeralContainers(old, pod, a.Mode, a.SchedulerName)
	default:
		// The spec is immutable after creation: there is nothing to add on other operations.
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, Outcome{}
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Warnings: m.Warnings}
	if len(m.Patch) == 0 {
		return resp, Outcome{}
	}
	patch, err := json.Marshal(m.Patch)
	if err != nil {
		return errorResponse(req, http.StatusInternalServerError, fmt.Errorf("mutate pod %s/%s: encode patch: %w", req.Namespace, podName(req, pod), err)), Outcome{}
	}
	resp.Patch = patch
	resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	klog.FromContext(ctx).V(4).Info("Pointing containers at the GPU allocation", "pod", klog.KRef(req.Namespace, podName(req, pod)), "operations", len(m.Patch), "replaced", len(m.Warnings))
	return resp, Outcome{Mutated: true, Replaced: len(m.Warnings) > 0}
}

// Validate answers a /validate request.
func (a *Admitter) Validate(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, Outcome) {
	if req.Resource != podsResource && req.Resource != bindingsResource {
		return errorResponse(req, http.StatusBadRequest, fmt.Errorf("validate: expected resource pods or bindings, got %s", resourceString(req.Resource))), Outcome{}
	}
	var d Decision
	switch {
	case isBinding(req) && req.Operation == admissionv1.Create:
		if req.Kind != bindingKind {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("validate %s: expected a v1 Binding, got %s", bindingPath(req), kindString(req.Kind))), Outcome{}
		}
		b := &corev1.Binding{}
		if err := decodeObject(req.Object.Raw, b); err != nil {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("validate binding of pod %s/%s: %w", req.Namespace, req.Name, err)), Outcome{}
		}
		fillNamespace(&b.ObjectMeta, req)
		d = ValidateBinding(b, req.UserInfo, a.Scheduler)
		if !d.Allowed && d.Reason == ReasonBinding && len(a.SiblingSchedulerNames) > 0 {
			d = a.siblingBinding(ctx, b, d)
		}
	case req.Resource == podsResource && (req.SubResource == "" || req.SubResource == "status") && (req.Operation == admissionv1.Create || req.Operation == admissionv1.Update):
		if req.Kind != podKind {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("validate: expected a v1 Pod, got %s", kindString(req.Kind))), Outcome{}
		}
		pod := &corev1.Pod{}
		if err := decodeObject(req.Object.Raw, pod); err != nil {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("validate pod %s/%s: %w", req.Namespace, req.Name, err)), Outcome{}
		}
		fillNamespace(&pod.ObjectMeta, req)
		if req.Operation == admissionv1.Create {
			d = ValidatePodCreate(pod)
			break
		}
		old := &corev1.Pod{}
		if err := decodeObject(req.OldObject.Raw, old); err != nil {
			return errorResponse(req, http.StatusBadRequest, fmt.Errorf("validate pod %s/%s: old object: %w", req.Namespace, req.Name, err)), Outcome{}
		}
		d = ValidatePodUpdate(old, pod, req.UserInfo, a.Scheduler)
	default:
		// Not an operation that can write the allocation.
		d = allow
	}
	if d.Allowed {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, Outcome{}
	}
	klog.FromContext(ctx).V(2).Info("Denied a write of the GPU allocation", "pod", klog.KRef(req.Namespace, req.Name),
		"resource", req.Resource.Resource, "subresource", req.SubResource, "operation", req.Operation, "user", req.UserInfo.Username, "reason", d.Reason)
	return &admissionv1.AdmissionResponse{
		UID:     req.UID,
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusForbidden,
			Reason:  metav1.StatusReasonForbidden,
			Message: d.Message,
		},
	}, Outcome{DenyReason: d.Reason}
}

// siblingBinding lets through a Binding that this release's guard refused when its pod belongs
// to a sibling release's scheduler: a Binding carries no schedulerName, so without this each
// release's guard refuses the other scheduler's Bindings. The sibling's own guard, which
// receives the same request, still refuses it unless its scheduler posts it. A pod of this
// release's scheduler, of no listed sibling, or that cannot be read is refused as before.
func (a *Admitter) siblingBinding(ctx context.Context, b *corev1.Binding, refused Decision) Decision {
	if a.SiblingPod == nil {
		return refused
	}
	name, err := a.SiblingPod(ctx, b.Namespace, b.Name)
	if err != nil {
		return deny(ReasonBinding, "%s (reading the pod to tell a sibling release's Binding: %v)", refused.Message, err)
	}
	own := a.SchedulerName
	if own == "" {
		own = gpuv1.SchedulerName
	}
	if name == own || !slices.Contains(a.SiblingSchedulerNames, name) {
		return refused
	}
	klog.FromContext(ctx).V(4).Info("Left a sibling release's Binding to its own guard", "pod", klog.KRef(b.Namespace, b.Name), "schedulerName", name)
	return allow
}

// isBinding reports whether req posts a Binding: to pods/binding, or to the older namespaced
// bindings resource, which the apiserver handles alike (both copy the Binding's annotations onto
// the pod), so the webhook judges both alike.
func isBinding(req *admissionv1.AdmissionRequest) bool {
	return (req.Resource == podsResource && req.SubResource == "binding") ||
		(req.Resource == bindingsResource && req.SubResource == "")
}

// bindingPath names the resource a Binding was posted to, for messages.
func bindingPath(req *admissionv1.AdmissionRequest) string {
	if req.Resource == bindingsResource {
		return "bindings"
	}
	return "pods/binding"
}

func decodeObject(raw []byte, into any) error {
	if len(raw) == 0 {
		return errors.New("request carries no object")
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, into); err != nil {
		return fmt.Errorf("decode object: %w", err)
	}
	return nil
}

// errorResponse refuses a request the webhook cannot judge. With failurePolicy Fail the
// apiserver would refuse it anyway; answering keeps the reason readable for the user.
func errorResponse(req *admissionv1.AdmissionRequest, code int32, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		UID:     req.UID,
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    code,
			Reason:  metav1.StatusReasonBadRequest,
			Message: err.Error(),
		},
	}
}

// fillNamespace sets the namespace that the object of a CREATE may omit.
func fillNamespace(meta *metav1.ObjectMeta, req *admissionv1.AdmissionRequest) {
	if meta.Namespace == "" {
		meta.Namespace = req.Namespace
	}
	if meta.Name == "" && isBinding(req) {
		meta.Name = req.Name
	}
}

func podName(req *admissionv1.AdmissionRequest, pod *corev1.Pod) string {
	if req.Name != "" {
		return req.Name
	}
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName
}

func kindString(k metav1.GroupVersionKind) string {
	return schema.GroupVersionKind(k).String()
}

func resourceString(r metav1.GroupVersionResource) string {
	return schema.GroupVersionResource(r).String()
}
