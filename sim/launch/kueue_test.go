package launch

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Of Kueue's webhooks only those of Jobs and of Kueue's own objects are registered: the
// manager serves only the batch/job integration, and a webhook for pods (failurePolicy Fail)
// pointing at a path it does not serve would refuse every pod of the cluster.
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
	got := keepWebhooks(in, func(w admissionregistrationv1.MutatingWebhook) []admissionregistrationv1.RuleWithOperations {
		return w.Rules
	})
	var names []string
	for _, w := range got {
		names = append(names, w.Name)
	}
	if len(names) != 2 || names[0] != "mjob.kb.io" || names[1] != "mworkload.kb.io" {
		t.Fatalf("kept %v, want [mjob.kb.io mworkload.kb.io]", names)
	}
}
