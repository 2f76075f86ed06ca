package manifests

import (
	"strings"
	"testing"
)

func TestRenderPodPolicy(t *testing.T) {
	p, b, err := RenderPodPolicy(PodPolicyOptions{ResourceName: "gpu.scheduling/gpu", Namespace: "gpu-system", ExemptNamespaces: []string{"gpu-operator", "kube-system"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Spec.PolicyName != p.Name || p.Name != DefaultPodPolicyName {
		t.Errorf("binding names policy %q, policy is %q", b.Spec.PolicyName, p.Name)
	}
	if got := b.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values; strings.Join(got, ",") != "kube-system,gpu-system,gpu-operator" {
		t.Errorf("exempt namespaces %q", got)
	}
	if !strings.Contains(p.Spec.Validations[0].Expression, "'gpu.scheduling/gpu' in c.resources.limits") {
		t.Errorf("first rule does not test the resource: %s", p.Spec.Validations[0].Expression)
	}
	for _, bad := range []PodPolicyOptions{
		{Namespace: "x"},
		{ResourceName: "nvidia.com/gpu' || true || '", Namespace: "x"},
		{ResourceName: "nvidia.com/gpu"},
	} {
		if _, _, err := RenderPodPolicy(bad); err == nil {
			t.Errorf("%+v rendered", bad)
		}
	}
}
