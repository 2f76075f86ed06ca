package launch

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Of Kueue's webhooks only those of Jobs and of Kueue's own objects are registered, and those of
// pods when the pod integration is on: the manager serves only these integrations, and a
// webhook (failurePolicy Fail) pointing at a path it does not serve would refuse its objects.
func TestKeepWebhooks(t *testing.T) {
	rule := func(group, resource string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, Resources: []string{resource}}}}
	}
	in := []admissionregistrationv1.MutatingWebhook{
		{Name: "mjob.kb.io", Rules: rule("batch", "jobs")},
		{Name: "mpod.kb.io", Rules: rule("", "pods")},
		{Name: "mdeployment.kb.io", Rules: rule("apps", "deployments")},
		{Name: "mworkload.kb.io", Rules: rule("kueue.x-k8s.io", "workloads")},
		{Name: "mjobset.kb.io", Rules: rule("jobset.x-k8s.io", "jobsets")},
	}
	names := func(pods bool) []string {
		got := keepWebhooks(in, func(w admissionregistrationv1.MutatingWebhook) []admissionregistrationv1.RuleWithOperations {
			return w.Rules
		}, pods)
		var names []string
		for _, w := range got {
			names = append(names, w.Name)
		}
		return names
	}
	if got := names(false); !slices.Equal(got, []string{"mjob.kb.io", "mworkload.kb.io"}) {
		t.Fatalf("kept %v, want [mjob.kb.io mworkload.kb.io]", got)
	}
	// With the pod integration on (PodNamespaces), its webhook is kept too.
	if got := names(true); !slices.Equal(got, []string{"mjob.kb.io", "mpod.kb.io", "mworkload.kb.io"}) {
		t.Fatalf("with pods: kept %v, want [mjob.kb.io mpod.kb.io mworkload.kb.io]", got)
	}
}
