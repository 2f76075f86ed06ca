package chart

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// controllerLease is gpu-controller's default --leader-election-id, the only lease it writes.
const controllerLease = "gpu-controller.gpu.scheduling"

// gpu-controller writes no lease but its leader-election lease: the GPU locks, the agents'
// liveness leases and the scheduler's peer leases share its namespace, and a lease it could
// create or delete there could block a GPU or fake a node's liveness. RBAC grants get and update
// by name, and create (which RBAC cannot restrict by name) is held to that name by a policy.
func TestControllerLeasesNarrowed(t *testing.T) {
	objs := parseObjects(t, mustTemplate(t))
	name := releaseName + "-controller-leader-election"
	roles := findAll(objs, "Role", name)
	if len(roles) != 1 {
		t.Fatalf("%d Roles %s; want 1", len(roles), name)
	}
	rules, _, _ := unstructured.NestedSlice(roles[0].Object, "rules")
	for _, r := range rules {
		rule := r.(map[string]any)
		resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
		if !slices.Contains(resources, "leases") {
			continue
		}
		verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
		names, _, _ := unstructured.NestedStringSlice(rule, "resourceNames")
		for _, v := range verbs {
			switch {
			case v == "create":
				// Held to the one name by the policy below.
			case (v == "get" || v == "update") && slices.Equal(names, []string{controllerLease}):
			default:
				t.Errorf("Role %s grants %q on leases (resourceNames %v); want only get and update of %s, and create", name, v, names, controllerLease)
			}
		}
	}
	policies := findAll(objs, "ValidatingAdmissionPolicy", name)
	if len(policies) != 1 {
		t.Fatalf("%d ValidatingAdmissionPolicies %s; want 1 holding the controller's lease creates to %s", len(policies), name, controllerLease)
	}
	conds, _, _ := unstructured.NestedSlice(policies[0].Object, "spec", "matchConditions")
	validations, _, _ := unstructured.NestedSlice(policies[0].Object, "spec", "validations")
	if len(conds) != 1 || !strings.Contains(conds[0].(map[string]any)["expression"].(string), "system:serviceaccount:"+releaseNamespace+":"+releaseName+"-controller") ||
		len(validations) != 1 || validations[0].(map[string]any)["expression"] != `object.metadata.name == "`+controllerLease+`"` {
		t.Errorf("policy %s matches %v and validates %v; want the controller's lease creates held to %s", name, conds, validations, controllerLease)
	}
	if b := findAll(objs, "ValidatingAdmissionPolicyBinding", name); len(b) != 1 {
		t.Errorf("%d bindings of policy %s; want 1", len(b), name)
	}
}
