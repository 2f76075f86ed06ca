package manifests

import (
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
)

// DefaultPodPolicyName names the ValidatingAdmissionPolicy (and its binding) that keeps every
// pod, not only GPU pods, from reaching GPUs around the device plugin.
const DefaultPodPolicyName = "gpu-scheduler-pod-device-access"

// PodPolicyOptions configure the pod device-access policy of the device-plugin mode.
type PodPolicyOptions struct {
	// Name of the policy and its binding; DefaultPodPolicyName when empty.
	Name string
	// ResourceName is the GPU resource the agents' device plugin serves (the webhook's
	// --resource-name): a pod that asks for it must name a GpuClaim.
	ResourceName string
	// Namespace is the release namespace (its agents set NVIDIA_VISIBLE_DEVICES=all to read
	// NVML); it is exempt, with kube-system.
	Namespace string
	// ExemptNamespaces are exempt too: namespaces whose pods may reach GPUs directly, such as
	// NVIDIA's own stack when it serves the resource on nodes this release does not manage.
	ExemptNamespaces []string
}

// Expressions of the pod policy. The containers of each kind are checked by their own
// expression: CEL types containers and ephemeral containers differently, so one list of both
// would not type-check.
var containerLists = []string{"initContainers", "containers", "ephemeralContainers"}

func allContainers(f func(list string) string) string {
	parts := make([]string, len(containerLists))
	for i, l := range containerLists {
		parts[i] = fmt.Sprintf("(!has(object.spec.%[1]s) || object.spec.%[1]s.all(c, %[2]s))", l, f(l))
	}
	return strings.Join(parts, " && ")
}

// PodPolicyValidations are the policy's rules, in order, each with the message the user gets.
func PodPolicyValidations(resource string) []admissionregistrationv1.Validation {
	names := celList([]string{webhook.EnvNVIDIAVisibleDevices, webhook.EnvCUDAVisibleDevices})
	noResource := func(string) string {
		return fmt.Sprintf("!has(c.resources) || ((!has(c.resources.limits) || !('%[1]s' in c.resources.limits)) && (!has(c.resources.requests) || !('%[1]s' in c.resources.requests)))", resource)
	}
	return []admissionregistrationv1.Validation{
		{
			// A pod that asks the kubelet for the resource itself takes GPUs the scheduler gave
			// a claim pod on the same node: the device plugin hands out what the kubelet asks.
			Expression: fmt.Sprintf("request.operation != 'CREATE' || variables.namesClaim || (%s)", allContainers(noResource)),
			Message: fmt.Sprintf("pod requests the GPU resource %s but names no GpuClaim: only the gpu-scheduler hands GPUs out; name a GpuClaim in annotation %s (the gpu-scheduler then adds %s from it), or ask your cluster operator to exempt the namespace",
				resource, gpuv1.AnnotationClaim, resource),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		{
			Expression: "!variables.checksSpec || (" + allContainers(func(string) string {
				return fmt.Sprintf("!has(c.env) || c.env.all(e, !(e.name in %s))", names)
			}) + ")",
			Message: fmt.Sprintf("a container sets %s or %s: they would pick the GPUs the container sees; the GPUs are handed over by the gpu-scheduler's device plugin: remove them",
				webhook.EnvNVIDIAVisibleDevices, webhook.EnvCUDAVisibleDevices),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		{
			// Any spelling of the toolkit's volume-mount device list (.., //, /run or /var/run).
			Expression: "!variables.checksSpec || (" + allContainers(func(string) string {
				return "!has(c.volumeMounts) || c.volumeMounts.all(m, !m.mountPath.contains('nvidia-container-devices'))"
			}) + ")",
			Message: "a container mounts a volume at the NVIDIA toolkit's volume-mount device list (/var/run/nvidia-container-devices), which exposes GPUs around the gpu-scheduler's device plugin: remove the mount",
			Reason:  ptr.To(metav1.StatusReasonForbidden),
		},
		{
			// Created with a CDI annotation, or one added later (the runtime reads them when it
			// creates a container, an ephemeral one included).
			Expression: fmt.Sprintf("!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith('%[1]s') || (request.operation == 'UPDATE' && has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k]))",
				webhook.CDIAnnotationPrefix),
			Message: fmt.Sprintf("annotations %s* make the container runtime inject devices around the gpu-scheduler's device plugin: remove them", webhook.CDIAnnotationPrefix),
			Reason:  ptr.To(metav1.StatusReasonForbidden),
		},
		{
			Expression: fmt.Sprintf("!variables.checksSpec || !(has(namespaceObject.metadata.labels) && '%[1]s' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['%[1]s'] == 'true') || (%[2]s)",
				webhook.LabelForbidPrivileged, allContainers(func(string) string {
					return "!has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged"
				})),
			Message: fmt.Sprintf("privileged containers are forbidden in this namespace (label %s=true): a privileged container sees every GPU", webhook.LabelForbidPrivileged),
			Reason:  ptr.To(metav1.StatusReasonForbidden),
		},
	}
}

func (o *PodPolicyOptions) validate() error {
	var errs []error
	if o.ResourceName == "" {
		errs = append(errs, errors.New("the GPU resource name is required"))
	} else if msgs := validation.IsQualifiedName(o.ResourceName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("resource name %q: %s", o.ResourceName, strings.Join(msgs, "; ")))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("the release namespace is required: its agents are exempt"))
	}
	return errors.Join(errs...)
}

// RenderPodPolicy returns the ValidatingAdmissionPolicy that applies to every pod in the
// device-plugin mode, and its binding. It runs in the apiserver (CEL), so it needs no webhook
// call and a webhook outage blocks no pod it matches. Only checks that no ordinary workload
// trips are in it (docs/webhook.md#every-pod); GPU pods get the webhook's full device-access
// check besides.
func RenderPodPolicy(o PodPolicyOptions) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	if err := o.validate(); err != nil {
		return nil, nil, fmt.Errorf("render pod policy: %w", err)
	}
	name := o.Name
	if name == "" {
		name = DefaultPodPolicyName
	}
	podRule := func(op admissionregistrationv1.OperationType, resource string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{op},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					podRule(admissionregistrationv1.Create, "pods"),
					// Annotations may be added later; the runtime reads CDI ones when it
					// creates a container.
					podRule(admissionregistrationv1.Update, "pods"),
					// kubectl debug adds ephemeral containers through this subresource.
					podRule(admissionregistrationv1.Update, "pods/ephemeralcontainers"),
				},
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			},
			Variables: []admissionregistrationv1.Variable{
				{Name: "namesClaim", Expression: hasAnnotation("object", gpuv1.AnnotationClaim) + " || " + hasAnnotation("object", gpuv1.AnnotationClaimTemplate)},
				// The containers are new on a CREATE and on an ephemeral-container update (where
				// only ephemeral containers change); a plain pod UPDATE cannot change them.
				{Name: "checksSpec", Expression: "request.operation == 'CREATE' || request.subResource == 'ephemeralcontainers'"},
			},
			Validations: PodPolicyValidations(o.ResourceName),
		},
	}
	exempt := dedupe(append([]string{"kube-system", o.Namespace}, o.ExemptNamespaces...))
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: NamespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: exempt,
			}}}},
		},
	}
	return policy, binding, nil
}
