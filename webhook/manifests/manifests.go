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
	"unicode"
	"unicode/utf8"

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
	// JobWebhookName is the webhook that adds the GPU resource to the pod template of a Job
	// that names a claim (Options.JobResource).
	JobWebhookName = "job-gpu-request.gpu.scheduling"
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
	// SchedulerName is the spec.schedulerName whose pods are sent to /mutate (the webhook's
	// --scheduler-name); gpuv1.SchedulerName when empty.
	SchedulerName string
	// Scheduler is the identity the webhook process lets write the allocation (its
	// --scheduler-users and --scheduler-groups, or webhook.Config.Scheduler): pass the same
	// one. The scheduler's Bindings are not sent to the webhook (see matchNotSchedulerBinding).
	// Users [webhook.DefaultSchedulerUser] when it names no user and no group, as the webhook's
	// own default.
	Scheduler webhook.SchedulerIdentity
	// JobResource also sends the creation of batch/v1 Jobs whose pod template names a claim or
	// a claim template to /mutate, where the webhook adds the GPU resource request to the
	// template (webhook.Admitter.Resource): quota managers such as Kueue admit a Job by its pod
	// template, before any pod exists. Set it with the webhook's --resource-name; without it the
	// webhook leaves Jobs alone.
	JobResource bool
}

// scheduler is o.Scheduler, defaulted.
func (o *Options) scheduler() webhook.SchedulerIdentity {
	if len(o.Scheduler.Users) == 0 && len(o.Scheduler.Groups) == 0 {
		return webhook.SchedulerIdentity{Users: []string{webhook.DefaultSchedulerUser}}
	}
	return o.Scheduler
}

// schedulerName is o.SchedulerName, defaulted.
func (o *Options) schedulerName() string {
	if o.SchedulerName == "" {
		return gpuv1.SchedulerName
	}
	return o.SchedulerName
}

func (o *Options) validate() error {
	var errs []error
	if err := celQuotable(o.schedulerName()); err != nil {
		errs = append(errs, fmt.Errorf("scheduler name %q: %w", o.schedulerName(), err))
	}
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
	for _, id := range []struct {
		kind  string
		names []string
	}{{"user", o.Scheduler.Users}, {"group", o.Scheduler.Groups}} {
		for _, n := range id.names {
			if err := celQuotable(n); err != nil {
				errs = append(errs, fmt.Errorf("scheduler %s %q: %w", id.kind, n, err))
			}
		}
	}
	return errors.Join(errs...)
}

// celQuotable checks that a name can go between single quotes in a CEL expression as it is. A
// quote or a backslash would end the literal or start an escape, so that the condition would
// compare with another name or not compile; rejecting them is simpler and safer than escaping.
// An empty name would match requests without a user name, which the webhook never counts as
// the scheduler's (webhook.SchedulerIdentity.Matches).
func celQuotable(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case !utf8.ValidString(name):
		return errors.New("is not valid UTF-8")
	case strings.ContainsAny(name, `'\`):
		return errors.New("contains a quote or a backslash, which the match condition cannot hold")
	case strings.ContainsFunc(name, unicode.IsControl):
		return errors.New("contains a control character, which the match condition cannot hold")
	}
	return nil
}

// CEL match conditions. They keep the webhook off the path of requests it would allow anyway:
// pods that ask for no GPU are never sent to /mutate, and only writes that touch the
// allocation annotations are sent to /validate. Besides the load, this bounds what an outage
// of the webhook (failurePolicy Fail) can block to exactly the requests it guards.
var (
	// MatchGPUPod is MatchGPUPodFor the default scheduler name.
	MatchGPUPod = MatchGPUPodFor(gpuv1.SchedulerName)
	// MatchWritesAllocation: a CREATE (pod or Binding) carries an allocation annotation, or an
	// UPDATE sets, changes or removes one.
	MatchWritesAllocation = fmt.Sprintf("request.operation == 'CREATE' ? (%s) : (%s)",
		anyOf(webhook.ProtectedAnnotations, func(k string) string { return hasAnnotation("object", k) }),
		anyOf(webhook.ProtectedAnnotations, changedAnnotation))
)

// MatchGPUPodFor: the pod carries an annotation under gpuv1.LabelPrefix (a claim or a claim
// template, which webhook.WantsGPUs mutates; or a misspelt key, which the webhook refuses), or
// uses the scheduler schedulerName (webhook.WantsGPUs). A pod with neither is never sent, so an
// outage of the webhook cannot block it. schedulerName must pass celQuotable (a DNS subdomain does).
func MatchGPUPodFor(schedulerName string) string {
	return fmt.Sprintf("(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('%s'))) || (has(object.spec.schedulerName) && object.spec.schedulerName == '%s')",
		gpuv1.LabelPrefix, schedulerName)
}

// MatchJobNamesClaim: the Job's pod template names a claim or a claim template. Other Jobs are
// never sent, so an outage of the webhook cannot block them.
var MatchJobNamesClaim = fmt.Sprintf("has(object.spec.template.metadata) && (%s)",
	anyOf([]string{gpuv1.AnnotationClaim, gpuv1.AnnotationClaimTemplate}, func(k string) string { return hasAnnotation("object.spec.template", k) }))

// matchNotSchedulerBinding is the condition that keeps the scheduler's Bindings away from
// /validate: false for a Binding (pods/binding or bindings CREATE; request.kind is Binding for
// both) by one of users or a member of one of groups, true for every other request.
//
// The scheduler posts one Binding with the allocation annotations for every pod it places, and
// the webhook allows the scheduler's Bindings: that was one HTTPS call from the apiserver per
// scheduled pod, for nothing. The guarantee that only the scheduler writes the allocation is
// unchanged: the identity test is the one the webhook applies (webhook.SchedulerIdentity.Matches:
// the request's user name is one of users, or one of its groups is one of groups), on the same
// request.userInfo, so everyone else's Bindings still reach the webhook.
//
// What is skipped besides the identity test is the webhook's consistency check of the
// scheduler's own values (both annotations parse, name the same IDs and the Binding's node),
// which the scheduler builds from typed values (scheduler/gpuclaim Bind). Other requests from the
// scheduler's identity are still sent on purpose: a pod CREATE with an allocation annotation is
// refused even for the scheduler, and a pod UPDATE carrying the allocation is not what the
// scheduler does, so it is checked like any other write (a hand edit with the scheduler's
// credentials, say).
//
// userInfo.username and userInfo.groups are absent from the request when empty, hence has().
// The names must pass celQuotable.
func matchNotSchedulerBinding(users, groups []string) string {
	var scheduler []string
	if len(users) > 0 {
		scheduler = append(scheduler, fmt.Sprintf("(has(request.userInfo.username) && request.userInfo.username in %s)", celList(users)))
	}
	if len(groups) > 0 {
		scheduler = append(scheduler, fmt.Sprintf("(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in %s))", celList(groups)))
	}
	if len(scheduler) == 0 {
		return "true"
	}
	return fmt.Sprintf("request.kind.kind != 'Binding' || !(%s)", strings.Join(scheduler, " || "))
}

// celList is a CEL list literal of names that passed celQuotable.
func celList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

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
	sched := o.scheduler()
	excluded := append([]string{"kube-system", o.Namespace}, o.ExcludeNamespaces...)
	nsSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: NamespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: dedupe(excluded),
	}}}
	// coreRule matches a namespaced resource of the core group, v1.
	coreRule := func(ops []admissionregistrationv1.OperationType, resource string) admissionregistrationv1.RuleWithOperations {
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
				coreRule(create, "pods"),
				// kubectl debug adds ephemeral containers through this subresource.
				coreRule(update, "pods/ephemeralcontainers"),
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
			MatchConditions:    []admissionregistrationv1.MatchCondition{{Name: "gpu-pod", Expression: MatchGPUPodFor(o.schedulerName())}},
		}},
	}
	if o.JobResource {
		mutating.Webhooks = append(mutating.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:         JobWebhookName,
			ClientConfig: o.clientConfig(webhook.PathMutate),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: create,
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(timeout),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "job-names-claim", Expression: MatchJobNamesClaim}},
		})
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         ValidatingWebhookName,
			ClientConfig: o.clientConfig(webhook.PathValidate),
			Rules: []admissionregistrationv1.RuleWithOperations{
				coreRule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, "pods"),
				// pods/status can change metadata too (the status strategy keeps annotations).
				coreRule(update, "pods/status"),
				// The apiserver copies a Binding's annotations onto the pod.
				coreRule(create, "pods/binding"),
				// The older namespaced bindings resource (POST /api/v1/namespaces/{ns}/bindings)
				// runs the same binding code, annotations included, and is no equivalent of
				// pods/binding for matchPolicy: it needs its own rule.
				coreRule(create, "bindings"),
			},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(timeout),
			AdmissionReviewVersions: []string{"v1"},
			// Match conditions are ANDed: an allocation write, and not a Binding the scheduler
			// posts (the webhook would allow it; see matchNotSchedulerBinding).
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "writes-allocation", Expression: MatchWritesAllocation},
				{Name: "not-a-scheduler-binding", Expression: matchNotSchedulerBinding(sched.Users, sched.Groups)},
			},
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
