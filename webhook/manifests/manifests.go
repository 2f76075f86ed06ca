// Package manifests renders the MutatingWebhookConfiguration and ValidatingWebhookConfiguration
// that point the kube-apiserver at the gpu-scheduler webhook. The chart, the simulator and the
// integration tests all render them here, so there is one definition of the rules.
package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
)

const (
	// DefaultName names both configuration objects.
	DefaultName = "gpu-scheduler-webhook"
	// MutatingWebhookName is the webhook that injects the visible-devices variables.
	MutatingWebhookName = "visible-devices.gpu.scheduling"
	// ValidatingWebhookName is the webhook that guards the allocation annotations.
	ValidatingWebhookName = "allocation-guard.gpu.scheduling"
	// DefaultTimeoutSeconds is short: with failurePolicy Fail a slow webhook stalls every pod
	// creation it matches, and the work is a few microseconds.
	DefaultTimeoutSeconds int32 = 5
	// NamespaceNameLabel is set on every namespace by the apiserver.
	NamespaceNameLabel = "kubernetes.io/metadata.name"
)

// ServiceRef points at the webhook through a Service in the cluster.
type ServiceRef struct {
	Namespace, Name string
	// Port of the Service; 443 when zero.
	Port int32
}

// Options says where the webhook runs and how to trust it.
type Options struct {
	// Name of both configuration objects; DefaultName when empty.
	Name string
	// Namespace the webhook runs in. It is excluded, with kube-system, so that the webhook
	// never blocks its own pods (a webhook that is down could otherwise never come back).
	Namespace string
	// CABundle (PEM) verifies the webhook's serving certificate.
	CABundle []byte
	// URL is the base URL (https://host:port) of a webhook outside the cluster; PathMutate and
	// PathValidate are appended. Exactly one of URL and Service is set.
	URL string
	// Service is the in-cluster Service in front of the webhook.
	Service *ServiceRef
	// TimeoutSeconds per call; DefaultTimeoutSeconds when zero.
	TimeoutSeconds int32
	// ExcludeNamespaces are skipped too, besides kube-system and Namespace.
	ExcludeNamespaces []string
}

func (o *Options) validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("the webhook's namespace is required: it must be excluded from the webhooks"))
	}
	if len(bytes.TrimSpace(o.CABundle)) == 0 {
		errs = append(errs, errors.New("a CA bundle is required: the apiserver must verify the webhook"))
	}
	switch {
	case o.URL == "" && o.Service == nil:
		errs = append(errs, errors.New("one of URL and Service is required"))
	case o.URL != "" && o.Service != nil:
		errs = append(errs, errors.New("URL and Service are exclusive"))
	case o.URL != "":
		u, err := url.Parse(o.URL)
		if err != nil {
			errs = append(errs, fmt.Errorf("webhook URL %q: %w", o.URL, err))
		} else if u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("webhook URL %q must be https://host[:port] with nothing after it", o.URL))
		}
	case o.Service.Namespace == "" || o.Service.Name == "":
		errs = append(errs, errors.New("the Service needs a namespace and a name"))
	case o.Service.Port < 0 || o.Service.Port > 65535:
		errs = append(errs, fmt.Errorf("service port %d is out of range", o.Service.Port))
	}
	if o.TimeoutSeconds < 0 || o.TimeoutSeconds > 30 {
		errs = append(errs, fmt.Errorf("timeout %ds is outside 1..30 seconds, the range the apiserver accepts", o.TimeoutSeconds))
	}
	return errors.Join(errs...)
}

// CEL match conditions. They keep the webhook off the path of requests it would allow anyway:
// pods that ask for no GPU are never sent to /mutate, and only writes that touch the
// allocation annotations are sent to /validate. Besides the load, this bounds what an outage
// of the webhook (failurePolicy Fail) can block to exactly the requests it guards.
var (
	// MatchGPUPod: the pod names a claim or uses the gpu-scheduler (webhook.WantsGPUs).
	MatchGPUPod = fmt.Sprintf("%s || (has(object.spec.schedulerName) && object.spec.schedulerName == '%s')",
		hasAnnotation("object", gpuv1.AnnotationClaim), gpuv1.SchedulerName)
	// MatchWritesAllocation: a CREATE (pod or Binding) carries an allocation annotation, or an
	// UPDATE sets, changes or removes one.
	MatchWritesAllocation = fmt.Sprintf("request.operation == 'CREATE' ? (%s) : (%s)",
		anyOf(webhook.ProtectedAnnotations, func(k string) string { return hasAnnotation("object", k) }),
		anyOf(webhook.ProtectedAnnotations, changedAnnotation))
)

func hasAnnotation(obj, key string) string {
	return fmt.Sprintf("(has(%[1]s.metadata.annotations) && '%[2]s' in %[1]s.metadata.annotations)", obj, key)
}

// changedAnnotation: present in one object only, or present in both with different values. The
// value comparison is reached only when the key is in both (CEL's && is commutative but absorbs
// the error of the side it does not need), so a missing key never fails the condition.
func changedAnnotation(key string) string {
	return fmt.Sprintf("(%[1]s != %[2]s || (%[1]s && object.metadata.annotations['%[3]s'] != oldObject.metadata.annotations['%[3]s']))",
		hasAnnotation("object", key), hasAnnotation("oldObject", key), key)
}

func anyOf(keys []string, f func(string) string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = f(k)
	}
	return strings.Join(parts, " || ")
}

// Render returns the two configurations.
func Render(o Options) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	if err := o.validate(); err != nil {
		return nil, nil, fmt.Errorf("render webhook configurations: %w", err)
	}
	name := o.Name
	if name == "" {
		name = DefaultName
	}
	timeout := o.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultTimeoutSeconds
	}
	excluded := append([]string{"kube-system", o.Namespace}, o.ExcludeNamespaces...)
	nsSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: NamespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: dedupe(excluded),
	}}}
	podRule := func(ops []admissionregistrationv1.OperationType, resource string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}
	}
	create := []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	update := []admissionregistrationv1.OperationType{admissionregistrationv1.Update}

	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         MutatingWebhookName,
			ClientConfig: o.clientConfig(webhook.PathMutate),
			Rules: []admissionregistrationv1.RuleWithOperations{
				podRule(create, "pods"),
				// kubectl debug adds ephemeral containers through this subresource.
				podRule(update, "pods/ephemeralcontainers"),
			},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(timeout),
			AdmissionReviewVersions: []string{"v1"},
			// Containers that a later mutating webhook adds (sidecars) get the variables too.
			ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchConditions:    []admissionregistrationv1.MatchCondition{{Name: "gpu-pod", Expression: MatchGPUPod}},
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         ValidatingWebhookName,
			ClientConfig: o.clientConfig(webhook.PathValidate),
			Rules: []admissionregistrationv1.RuleWithOperations{
				podRule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, "pods"),
				// pods/status can change metadata too (the status strategy keeps annotations).
				podRule(update, "pods/status"),
				// The apiserver copies a Binding's annotations onto the pod.
				podRule(create, "pods/binding"),
			},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(timeout),
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "writes-allocation", Expression: MatchWritesAllocation}},
		}},
	}
	return mutating, validating, nil
}

// RenderYAML renders both configurations as one YAML stream.
func RenderYAML(o Options) ([]byte, error) {
	m, v, err := Render(o)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for i, obj := range []any{m, v} {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("marshal webhook configuration %s: %w", m.Name, err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(data)
	}
	return out.Bytes(), nil
}

func (o *Options) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	if o.URL != "" {
		cc.URL = ptr.To(strings.TrimSuffix(o.URL, "/") + path)
		return cc
	}
	port := o.Service.Port
	if port == 0 {
		port = 443
	}
	cc.Service = &admissionregistrationv1.ServiceReference{Namespace: o.Service.Namespace, Name: o.Service.Name, Path: ptr.To(path), Port: ptr.To(port)}
	return cc
}

func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
