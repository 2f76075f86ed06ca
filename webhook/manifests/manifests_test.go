package manifests

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	apiservercel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiserverwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	admissionregistrationinternalv1 "k8s.io/kubernetes/pkg/apis/admissionregistration/v1"
	"k8s.io/kubernetes/pkg/apis/admissionregistration/validation"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func TestRenderYAMLGolden(t *testing.T) {
	tests := []struct {
		golden string
		opts   Options
	}{
		{"service.yaml", Options{Namespace: "gpu-scheduler", CABundle: []byte(testCA), Service: &ServiceRef{Namespace: "gpu-scheduler", Name: "gpu-webhook"}}},
		{"url.yaml", Options{Name: "gpu-webhook-test", Namespace: "gpu-webhook-test", CABundle: []byte(testCA), URL: "https://127.0.0.1:43211/", TimeoutSeconds: 3, ExcludeNamespaces: []string{"kube-system", "monitoring"},
			Scheduler: webhook.SchedulerIdentity{Users: []string{"system:serviceaccount:gpu-webhook-test:gpu-scheduler", "sched"}, Groups: []string{"system:kube-scheduler"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			got, err := RenderYAML(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered YAML differs from %s (run with -update if the change is intended):\n%s", path, got)
			}
		})
	}
}

// TestRenderPassesAPIServerValidation runs the apiserver's own defaulting and validation, which
// also compiles the CEL match conditions, so a broken expression fails here and not at install.
func TestRenderPassesAPIServerValidation(t *testing.T) {
	m, v, err := Render(Options{Namespace: "gpu-scheduler", CABundle: []byte(testCA), Service: &ServiceRef{Namespace: "gpu-scheduler", Name: "gpu-webhook", Port: 8443},
		Scheduler: webhook.SchedulerIdentity{Users: []string{"u1", "u2"}, Groups: []string{"g1", "g2"}}})
	if err != nil {
		t.Fatal(err)
	}
	admissionregistrationinternalv1.SetObjectDefaults_MutatingWebhookConfiguration(m)
	admissionregistrationinternalv1.SetObjectDefaults_ValidatingWebhookConfiguration(v)
	var im admissionregistration.MutatingWebhookConfiguration
	if err := admissionregistrationinternalv1.Convert_v1_MutatingWebhookConfiguration_To_admissionregistration_MutatingWebhookConfiguration(m, &im, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateMutatingWebhookConfiguration(&im); len(errs) > 0 {
		t.Errorf("mutating configuration is invalid: %v", errs.ToAggregate())
	}
	var iv admissionregistration.ValidatingWebhookConfiguration
	if err := admissionregistrationinternalv1.Convert_v1_ValidatingWebhookConfiguration_To_admissionregistration_ValidatingWebhookConfiguration(v, &iv, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateValidatingWebhookConfiguration(&iv); len(errs) > 0 {
		t.Errorf("validating configuration is invalid: %v", errs.ToAggregate())
	}
}

func TestRenderSafety(t *testing.T) {
	m, v, err := Render(Options{Namespace: "gpu-scheduler", CABundle: []byte(testCA), URL: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	mw, vw := m.Webhooks[0], v.Webhooks[0]
	for _, w := range []struct {
		name     string
		policy   *admissionregistrationv1.FailurePolicyType
		side     *admissionregistrationv1.SideEffectClass
		timeout  *int32
		excluded []string
		url      *string
	}{
		{mw.Name, mw.FailurePolicy, mw.SideEffects, mw.TimeoutSeconds, mw.NamespaceSelector.MatchExpressions[0].Values, mw.ClientConfig.URL},
		{vw.Name, vw.FailurePolicy, vw.SideEffects, vw.TimeoutSeconds, vw.NamespaceSelector.MatchExpressions[0].Values, vw.ClientConfig.URL},
	} {
		if *w.policy != admissionregistrationv1.Fail || *w.side != admissionregistrationv1.SideEffectClassNone || *w.timeout != DefaultTimeoutSeconds {
			t.Errorf("%s: failurePolicy %s sideEffects %s timeout %d", w.name, *w.policy, *w.side, *w.timeout)
		}
		if strings.Join(w.excluded, ",") != "kube-system,gpu-scheduler" {
			t.Errorf("%s excludes %q, want kube-system and its own namespace", w.name, w.excluded)
		}
	}
	if *mw.ClientConfig.URL != "https://127.0.0.1:1/mutate" || *vw.ClientConfig.URL != "https://127.0.0.1:1/validate" {
		t.Errorf("URLs %s %s", *mw.ClientConfig.URL, *vw.ClientConfig.URL)
	}
	if *mw.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("reinvocation %s", *mw.ReinvocationPolicy)
	}
}

func TestRenderRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"nothing", Options{}, "render webhook configurations: the webhook's namespace is required: it must be excluded from the webhooks\na CA bundle is required: the apiserver must verify the webhook\none of URL and Service is required"},
		{"both targets", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", Service: &ServiceRef{Namespace: "n", Name: "s"}}, "render webhook configurations: URL and Service are exclusive"},
		{"plain http", Options{Namespace: "n", CABundle: []byte(testCA), URL: "http://127.0.0.1:1"}, `render webhook configurations: webhook URL "http://127.0.0.1:1" must be https://host[:port] with nothing after it`},
		{"a path", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://127.0.0.1:1/mutate"}, `render webhook configurations: webhook URL "https://127.0.0.1:1/mutate" must be https://host[:port] with nothing after it`},
		{"service without name", Options{Namespace: "n", CABundle: []byte(testCA), Service: &ServiceRef{Namespace: "n"}}, "render webhook configurations: the Service needs a namespace and a name"},
		{"long timeout", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", TimeoutSeconds: 31}, "render webhook configurations: timeout 31s is outside 1..30 seconds, the range the apiserver accepts"},
		{"scheduler user with a quote", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", Scheduler: webhook.SchedulerIdentity{Users: []string{"ok", "x'] || true || ['"}}}, `render webhook configurations: scheduler user "x'] || true || ['": contains a quote or a backslash, which the match condition cannot hold`},
		{"scheduler group with a backslash", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", Scheduler: webhook.SchedulerIdentity{Groups: []string{`g\`}}}, `render webhook configurations: scheduler group "g\\": contains a quote or a backslash, which the match condition cannot hold`},
		{"empty scheduler user", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", Scheduler: webhook.SchedulerIdentity{Users: []string{""}, Groups: []string{"g"}}}, `render webhook configurations: scheduler user "": is empty`},
		{"scheduler group with a newline", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", Scheduler: webhook.SchedulerIdentity{Groups: []string{"g\n"}}}, `render webhook configurations: scheduler group "g\n": contains a control character, which the match condition cannot hold`},
		{"scheduler user not UTF-8", Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", Scheduler: webhook.SchedulerIdentity{Users: []string{"\xff"}}}, `render webhook configurations: scheduler user "\xff": is not valid UTF-8`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Render(tc.opts)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Render error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// TestMatchConditions evaluates the CEL match conditions on the requests they must and must
// not send to the webhook. The apiserver evaluates them the same way (core CEL, dynamic
// objects); the integration test checks them against a real one.
func TestMatchConditions(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("request", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	eval := func(t *testing.T, expr string, vars map[string]any) bool {
		t.Helper()
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %s: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(vars)
		if err != nil {
			t.Fatalf("eval: %v", err)
		}
		b, ok := out.Value().(bool)
		if !ok {
			t.Fatalf("result %v is not a bool", out)
		}
		return b
	}
	obj := func(annotations map[string]any, spec map[string]any) map[string]any {
		meta := map[string]any{"name": "p"}
		if annotations != nil {
			meta["annotations"] = annotations
		}
		o := map[string]any{"metadata": meta}
		if spec != nil {
			o["spec"] = spec
		}
		return o
	}
	create := map[string]any{"operation": "CREATE"}
	upd := map[string]any{"operation": "UPDATE"}
	alloc, ids, claim := gpuv1.AnnotationAllocated, gpuv1.AnnotationGPUIDs, gpuv1.AnnotationClaim

	gpu := []struct {
		name string
		obj  map[string]any
		want bool
	}{
		{"claim", obj(map[string]any{claim: "c"}, map[string]any{}), true},
		{"claim template", obj(map[string]any{gpuv1.AnnotationClaimTemplate: "t"}, map[string]any{}), true},
		{"our scheduler", obj(nil, map[string]any{"schedulerName": gpuv1.SchedulerName}), true},
		{"another scheduler", obj(map[string]any{"x": "y"}, map[string]any{"schedulerName": "default-scheduler"}), false},
		// Refused by the webhook with the key named, so it must be sent.
		{"misspelt key under our prefix", obj(map[string]any{"gpu.scheduling/claimm": "c"}, map[string]any{"schedulerName": "default-scheduler"}), true},
		{"a key of another prefix", obj(map[string]any{"example.com/claim": "c"}, map[string]any{}), false},
		{"no annotations, no scheduler name", obj(nil, map[string]any{}), false},
	}
	for _, tc := range gpu {
		t.Run("gpu-pod/"+tc.name, func(t *testing.T) {
			if got := eval(t, MatchGPUPod, map[string]any{"object": tc.obj, "oldObject": nil, "request": create}); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// A release named canary is sent the canary's pods, not gpu-scheduler's.
	for sched, want := range map[string]bool{"canary": true, gpuv1.SchedulerName: false} {
		if got := eval(t, MatchGPUPodFor("canary"), map[string]any{"object": obj(nil, map[string]any{"schedulerName": sched}), "oldObject": nil, "request": create}); got != want {
			t.Errorf("canary release, pod of %q: matched %v, want %v", sched, got, want)
		}
	}

	// Jobs: sent only when the pod template names a claim or a claim template.
	job := func(annotations map[string]any) map[string]any {
		tmpl := map[string]any{"spec": map[string]any{}}
		if annotations != nil {
			tmpl["metadata"] = map[string]any{"annotations": annotations}
		}
		return map[string]any{"metadata": map[string]any{"name": "j", "annotations": map[string]any{claim: "on the Job, not its template"}}, "spec": map[string]any{"template": tmpl}}
	}
	for name, tc := range map[string]struct {
		obj  map[string]any
		want bool
	}{
		"template names a claim template": {job(map[string]any{gpuv1.AnnotationClaimTemplate: "x4"}), true},
		"template names a claim":          {job(map[string]any{claim: "c"}), true},
		"template with other annotations": {job(map[string]any{"example.com/a": "b"}), false},
		"template without metadata":       {job(nil), false},
	} {
		t.Run("job-names-claim/"+name, func(t *testing.T) {
			if got := eval(t, MatchJobNamesClaim, map[string]any{"object": tc.obj, "oldObject": nil, "request": create}); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}

	writes := []struct {
		name     string
		req      map[string]any
		obj, old map[string]any
		want     bool
	}{
		{"create plain pod", create, obj(map[string]any{claim: "c"}, nil), nil, false},
		{"create pod without annotations", create, obj(nil, nil), nil, false},
		{"create pod with ids", create, obj(map[string]any{ids: "0"}, nil), nil, true},
		{"create binding with allocation", create, obj(map[string]any{alloc: "n:0"}, nil), nil, true},
		{"update other annotation", upd, obj(map[string]any{alloc: "n:0", "a": "2"}, nil), obj(map[string]any{alloc: "n:0", "a": "1"}, nil), false},
		{"update without annotations", upd, obj(nil, nil), obj(nil, nil), false},
		{"update adds ids", upd, obj(map[string]any{ids: "0"}, nil), obj(nil, nil), true},
		{"update adds an empty value", upd, obj(map[string]any{ids: ""}, nil), obj(map[string]any{}, nil), true},
		{"update changes allocated", upd, obj(map[string]any{alloc: "n:1"}, nil), obj(map[string]any{alloc: "n:0"}, nil), true},
		{"update removes ids", upd, obj(map[string]any{"a": "1"}, nil), obj(map[string]any{ids: "0", "a": "1"}, nil), true},
		{"update removes all annotations", upd, obj(nil, nil), obj(map[string]any{alloc: "n:0"}, nil), true},
	}
	for _, tc := range writes {
		t.Run("writes-allocation/"+tc.name, func(t *testing.T) {
			var old any
			if tc.old != nil {
				old = tc.old
			}
			if got := eval(t, MatchWritesAllocation, map[string]any{"object": tc.obj, "oldObject": old, "request": tc.req}); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSchedulerBindingSkipsWebhook runs the rendered match conditions of the validating webhook
// in the apiserver's own matcher (its CEL environment, its AdmissionRequest conversion, in which
// an empty user name or group list is absent) and checks that exactly the Bindings of the
// configured scheduler identity, as webhook.SchedulerIdentity.Matches sees it, are kept from
// the webhook, while its other allocation writes and everyone else's are still sent.
func TestSchedulerBindingSkipsWebhook(t *testing.T) {
	id := webhook.SchedulerIdentity{Users: []string{"system:serviceaccount:gpu-system:gpu-scheduler", "sched"}, Groups: []string{"system:kube-scheduler", "gpu-schedulers"}}
	_, v, err := Render(Options{Namespace: "gpu-system", CABundle: []byte(testCA), URL: "https://127.0.0.1:1", Scheduler: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(v.Webhooks[0].MatchConditions); got != 2 {
		t.Fatalf("%d match conditions, want writes-allocation and not-a-scheduler-binding", got)
	}
	matcher := apiserverwebhook.NewValidatingWebhookAccessor("uid", v.Name, &v.Webhooks[0]).
		GetCompiledMatcher(apiservercel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())))

	alloc := map[string]string{gpuv1.AnnotationAllocated: "n:0", gpuv1.AnnotationGPUIDs: "0"}
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	type attrs struct {
		obj, old runtime.Object
		gvk      schema.GroupVersionKind
		gvr      schema.GroupVersionResource
		sub      string
		op       admission.Operation
	}
	type request = func() attrs
	// binding posts a Binding to pods/binding, or with legacy to the older namespaced bindings
	// resource, which the apiserver admits as resource bindings, no subresource, kind Binding.
	binding := func(annotations map[string]string, legacy bool) attrs {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Annotations: annotations}, Target: corev1.ObjectReference{Kind: "Node", Name: "n"}}
		if legacy {
			return attrs{b, nil, corev1.SchemeGroupVersion.WithKind("Binding"), corev1.SchemeGroupVersion.WithResource("bindings"), "", admission.Create}
		}
		return attrs{b, nil, corev1.SchemeGroupVersion.WithKind("Binding"), podsGVR, "binding", admission.Create}
	}
	podCreate := func() attrs {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Annotations: alloc}}
		return attrs{p, nil, corev1.SchemeGroupVersion.WithKind("Pod"), podsGVR, "", admission.Create}
	}
	podUpdate := func(sub string) request {
		return func() attrs {
			old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Annotations: alloc}}
			p := old.DeepCopy()
			p.Annotations = map[string]string{gpuv1.AnnotationAllocated: "n:1", gpuv1.AnnotationGPUIDs: "1"}
			return attrs{p, old, corev1.SchemeGroupVersion.WithKind("Pod"), podsGVR, sub, admission.Update}
		}
	}
	allocBinding := func() attrs { return binding(alloc, false) }
	plainBinding := func() attrs { return binding(nil, false) }
	allocLegacyBinding := func() attrs { return binding(alloc, true) }
	plainLegacyBinding := func() attrs { return binding(nil, true) }

	tests := []struct {
		name      string
		req       request
		user      string
		groups    []string
		sent      bool
		skippedBy string
	}{
		// The scheduler's Bindings: the webhook would allow them.
		{"binding by a scheduler user", allocBinding, "sched", []string{"system:authenticated"}, false, "not-a-scheduler-binding"},
		{"binding by the scheduler's service account", allocBinding, "system:serviceaccount:gpu-system:gpu-scheduler", []string{"system:serviceaccounts", "system:authenticated"}, false, "not-a-scheduler-binding"},
		{"binding by a scheduler group member", allocBinding, "kube-scheduler", []string{"system:authenticated", "gpu-schedulers"}, false, "not-a-scheduler-binding"},
		{"binding by a scheduler user without groups", allocBinding, "sched", nil, false, "not-a-scheduler-binding"},
		// Everyone else's Bindings reach the webhook, which refuses them.
		{"binding by a user", allocBinding, "alice", []string{"system:authenticated"}, true, ""},
		{"binding by a user without groups", allocBinding, "alice", nil, true, ""},
		{"binding by no user name", allocBinding, "", []string{"system:unauthenticated"}, true, ""},
		{"binding by no user name and no groups", allocBinding, "", nil, true, ""},
		{"binding by a user named like a scheduler group", allocBinding, "gpu-schedulers", []string{"system:authenticated"}, true, ""},
		{"binding by a member of a group named like a scheduler user", allocBinding, "alice", []string{"sched"}, true, ""},
		{"binding by a user whose name has a scheduler user's as prefix", allocBinding, "sched2", []string{"system:authenticated"}, true, ""},
		{"binding by the scheduler's name in another namespace", allocBinding, "system:serviceaccount:ml:gpu-scheduler", []string{"system:serviceaccounts"}, true, ""},
		// The same through the older bindings resource.
		{"bindings resource: binding by a scheduler user", allocLegacyBinding, "sched", []string{"system:authenticated"}, false, "not-a-scheduler-binding"},
		{"bindings resource: binding by a scheduler group member", allocLegacyBinding, "kube-scheduler", []string{"system:authenticated", "gpu-schedulers"}, false, "not-a-scheduler-binding"},
		{"bindings resource: binding by a user", allocLegacyBinding, "alice", []string{"system:authenticated"}, true, ""},
		{"bindings resource: binding by no user name and no groups", allocLegacyBinding, "", nil, true, ""},
		{"bindings resource: binding by a user named like a scheduler group", allocLegacyBinding, "gpu-schedulers", []string{"system:authenticated"}, true, ""},
		// The scheduler's other allocation writes are still sent: the webhook refuses a pod
		// created with the allocation from anyone, and checks the values of an update.
		{"pod create by the scheduler", podCreate, "sched", []string{"system:authenticated"}, true, ""},
		{"pod create by a scheduler group member", podCreate, "kube-scheduler", []string{"system:kube-scheduler"}, true, ""},
		{"pod update by the scheduler", podUpdate(""), "sched", nil, true, ""},
		{"pods/status update by a scheduler group member", podUpdate("status"), "kube-scheduler", []string{"system:kube-scheduler"}, true, ""},
		{"pod update by a user", podUpdate(""), "alice", []string{"system:authenticated"}, true, ""},
		// Bindings without the allocation are skipped by writes-allocation, as before.
		{"plain binding by a user", plainBinding, "alice", []string{"system:authenticated"}, false, "writes-allocation"},
		{"plain binding by the scheduler", plainBinding, "sched", nil, false, "writes-allocation"},
		{"bindings resource: plain binding by a user", plainLegacyBinding, "alice", []string{"system:authenticated"}, false, "writes-allocation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.req()
			obj := a.obj
			u := &user.DefaultInfo{Name: tc.user, Groups: tc.groups}
			attr := admission.NewAttributesRecord(a.obj, a.old, a.gvk, "ml", "p", a.gvr, a.sub, a.op, nil, false, u)
			va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: a.gvk, VersionedObject: a.obj, VersionedOldObject: a.old}
			// Every request here writes the allocation: a rule must match it, or the match
			// conditions are never asked.
			ruleMatches := false
			for _, r := range v.Webhooks[0].Rules {
				ruleMatches = ruleMatches || (&rules.Matcher{Rule: r, Attr: attr}).Matches()
			}
			if !ruleMatches {
				t.Errorf("no rule of %s matches resource %s subresource %q %s", v.Webhooks[0].Name, a.gvr, a.sub, a.op)
			}
			res := matcher.Match(context.Background(), va, nil, nil)
			if res.Error != nil {
				t.Fatalf("match conditions failed: %v", res.Error)
			}
			if res.Matches != tc.sent || res.FailedConditionName != tc.skippedBy {
				t.Errorf("sent to the webhook = %v (skipped by %q), want %v (skipped by %q)", res.Matches, res.FailedConditionName, tc.sent, tc.skippedBy)
			}
			// For the Bindings that carry the allocation, skipped is exactly "the webhook's
			// identity check says scheduler".
			if _, isBinding := obj.(*corev1.Binding); isBinding && tc.skippedBy != "writes-allocation" {
				scheduler := id.Matches(authenticationv1.UserInfo{Username: tc.user, Groups: tc.groups})
				if res.Matches == scheduler {
					t.Errorf("sent to the webhook = %v, but SchedulerIdentity.Matches = %v", res.Matches, scheduler)
				}
			}
		})
	}
}

func TestRenderSchedulerIdentity(t *testing.T) {
	render := func(t *testing.T, id webhook.SchedulerIdentity) string {
		t.Helper()
		_, v, err := Render(Options{Namespace: "n", CABundle: []byte(testCA), URL: "https://x", Scheduler: id})
		if err != nil {
			t.Fatal(err)
		}
		mc := v.Webhooks[0].MatchConditions
		if len(mc) != 2 || mc[0].Name != "writes-allocation" || mc[0].Expression != MatchWritesAllocation || mc[1].Name != "not-a-scheduler-binding" {
			t.Fatalf("match conditions %+v", mc)
		}
		return mc[1].Expression
	}
	for _, tc := range []struct {
		name string
		id   webhook.SchedulerIdentity
		want string
	}{
		{"default", webhook.SchedulerIdentity{}, "request.kind.kind != 'Binding' || !((has(request.userInfo.username) && request.userInfo.username in ['" + webhook.DefaultSchedulerUser + "']))"},
		{"users", webhook.SchedulerIdentity{Users: []string{"a", "b"}}, "request.kind.kind != 'Binding' || !((has(request.userInfo.username) && request.userInfo.username in ['a', 'b']))"},
		{"groups only", webhook.SchedulerIdentity{Groups: []string{"g"}}, "request.kind.kind != 'Binding' || !((has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ['g'])))"},
		{"both", webhook.SchedulerIdentity{Users: []string{"u"}, Groups: []string{"g1", "g2"}}, "request.kind.kind != 'Binding' || !((has(request.userInfo.username) && request.userInfo.username in ['u']) || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ['g1', 'g2'])))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(t, tc.id); got != tc.want {
				t.Errorf("condition\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// Render puts the release's scheduler name into the mutating webhook's match condition and
// refuses one that cannot be quoted in CEL.
func TestRenderSchedulerName(t *testing.T) {
	m, _, err := Render(Options{Namespace: "canary", CABundle: []byte(testCA), URL: "https://127.0.0.1:1", SchedulerName: "canary"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Webhooks[0].MatchConditions[0].Expression, MatchGPUPodFor("canary"); got != want {
		t.Fatalf("match condition %s, want %s", got, want)
	}
	if _, _, err := Render(Options{Namespace: "x", CABundle: []byte(testCA), URL: "https://127.0.0.1:1", SchedulerName: "a'b"}); err == nil || !strings.Contains(err.Error(), "scheduler name") {
		t.Fatalf("a quote in the scheduler name: %v, want an error naming the scheduler name", err)
	}
}

// With JobResource the mutating configuration also sends Job creations naming a claim to
// /mutate; without it (the default) Jobs are never sent.
func TestRenderJobResource(t *testing.T) {
	m, _, err := Render(Options{Namespace: "gpu-system", CABundle: []byte(testCA), URL: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Webhooks) != 1 {
		t.Fatalf("without JobResource: %d mutating webhooks, want only %s", len(m.Webhooks), MutatingWebhookName)
	}
	m, _, err = Render(Options{Namespace: "gpu-system", CABundle: []byte(testCA), URL: "https://127.0.0.1:1", JobResource: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Webhooks) != 2 || m.Webhooks[1].Name != JobWebhookName {
		t.Fatalf("with JobResource: webhooks %d; want %s second", len(m.Webhooks), JobWebhookName)
	}
	w := m.Webhooks[1]
	r := w.Rules[0]
	if len(w.Rules) != 1 || len(r.Operations) != 1 || r.Operations[0] != "CREATE" || r.APIGroups[0] != "batch" || r.Resources[0] != "jobs" {
		t.Errorf("rules %+v; want CREATE of batch jobs only", w.Rules)
	}
	if *w.ClientConfig.URL != "https://127.0.0.1:1"+webhook.PathMutate || w.MatchConditions[0].Expression != MatchJobNamesClaim {
		t.Errorf("client %v, conditions %+v", *w.ClientConfig.URL, w.MatchConditions)
	}
	if w.NamespaceSelector.String() != m.Webhooks[0].NamespaceSelector.String() {
		t.Errorf("namespace selector %v; want the pod webhook's %v", w.NamespaceSelector, m.Webhooks[0].NamespaceSelector)
	}
}
