package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
)

// clusterScoped are the kinds the chart may render that have no namespace: two releases'
// objects of these kinds share one name space, the whole cluster.
var clusterScoped = []string{
	"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PriorityClass", "Namespace",
	"CustomResourceDefinition", "APIService", "RuntimeClass", "StorageClass",
}

// sideBySide is one of the two releases of TestTwoReleasesSideBySide.
type sideBySide struct {
	release, namespace, schedulerName, pool string
	objs                                    []*unstructured.Unstructured
}

// TestTwoReleasesSideBySide renders the two releases docs/install.md#two-releases installs, a
// production one and a canary with another scheduler name and node pool, and checks that they
// can both be installed in one cluster and stay apart: no cluster-scoped object (ClusterRole,
// webhook configuration, admission policy...) has the same name in both, every binding grants
// its release's roles to its release's service accounts only, and each release's scheduler,
// webhook, controller and agents serve its own scheduler name, leases and pool.
func TestTwoReleasesSideBySide(t *testing.T) {
	releases := []*sideBySide{
		{release: "gpu-scheduler", namespace: "gpu-scheduler", schedulerName: "gpu-scheduler", pool: "prod"},
		{release: "gpu-canary", namespace: "gpu-canary", schedulerName: "gpu-canary", pool: "canary"},
	}
	for _, r := range releases {
		out, err := runHelm(t, nil, "template", r.release, chartDir(t), "--namespace", r.namespace, "--kube-version", kubeVersion,
			"--set", "schedulerName="+r.schedulerName, "--set", "agent.nodeSelector.pool="+r.pool,
			// Every optional cluster-scoped object, so that none escapes the check.
			"--set", "agent.nodeRestriction.enabled=true", "--set", "devicePlugin.enabled=true")
		if err != nil {
			t.Fatal(err)
		}
		r.objs = parseObjects(t, out)
		if len(r.objs) == 0 {
			t.Fatalf("release %s rendered nothing", r.release)
		}
	}

	// Names: cluster-scoped ones must differ between the releases; namespaced ones live in the
	// release's namespace.
	owner := map[string]string{} // kind/name (cluster) or kind/namespace/name -> release
	for _, r := range releases {
		for _, o := range r.objs {
			key := o.GetKind() + "/" + o.GetName()
			if !slices.Contains(clusterScoped, o.GetKind()) {
				ns := o.GetNamespace()
				switch {
				case ns == "":
					ns = r.namespace
				case ns == "kube-system" && o.GetKind() == "RoleBinding":
					// The scheduler and webhook read the authentication configmap there: both
					// releases' bindings share that namespace, so their names must differ.
				case ns == "default" && o.GetAnnotations()["helm.sh/hook"] == "test":
					// helm test's Role and RoleBinding in tests.namespace, where its claim and
					// dry-run pod go; both releases' names differ.
				case ns != r.namespace:
					t.Errorf("release %s renders %s %s into namespace %s, not its own %s", r.release, o.GetKind(), o.GetName(), ns, r.namespace)
				}
				key = o.GetKind() + "/" + ns + "/" + o.GetName()
			}
			if other, ok := owner[key]; ok {
				t.Errorf("%s is rendered by both release %s and release %s: the second install would fail or take it over", key, other, r.release)
			}
			owner[key] = r.release
		}
	}
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy"} {
		for _, r := range releases {
			if !slices.ContainsFunc(r.objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind }) {
				t.Errorf("release %s renders no %s: this test would not see a clash in them", r.release, kind)
			}
		}
	}

	for _, r := range releases {
		t.Run(r.release, func(t *testing.T) { r.check(t, owner) })
	}
}

// check verifies that one release's bindings and components keep to that release.
func (r *sideBySide) check(t *testing.T, owner map[string]string) {
	for _, o := range r.objs {
		switch o.GetKind() {
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields but namespace
			into(t, o, &b)
			roleKey := b.RoleRef.Kind + "/" + b.RoleRef.Name
			if b.RoleRef.Kind == "Role" {
				roleKey = "Role/" + b.Namespace + "/" + b.RoleRef.Name
			}
			builtin := roleKey == "Role/kube-system/extension-apiserver-authentication-reader"
			if owner[roleKey] != r.release && !builtin {
				t.Errorf("%s %s grants %s, which release %s does not render", o.GetKind(), b.Name, roleKey, r.release)
			}
			for _, s := range b.Subjects {
				if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != r.namespace || owner["ServiceAccount/"+r.namespace+"/"+s.Name] != r.release {
					t.Errorf("%s %s grants to %s %s/%s, not a service account of release %s", o.GetKind(), b.Name, s.Kind, s.Namespace, s.Name, r.release)
				}
			}
		case "ValidatingAdmissionPolicyBinding":
			policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			if owner["ValidatingAdmissionPolicy/"+policy] != r.release {
				t.Errorf("ValidatingAdmissionPolicyBinding %s binds policy %q, not one of release %s", o.GetName(), policy, r.release)
			}
			if strings.HasSuffix(policy, "-pod-device-access") {
				// The pod policy judges every pod, whichever release it is for; it must leave
				// the release's own namespace alone, as the webhooks do.
				y, _ := yaml.Marshal(o.Object["spec"])
				if !strings.Contains(string(y), "- "+r.namespace+"\n") {
					t.Errorf("ValidatingAdmissionPolicyBinding %s does not exempt release %s's namespace %s: %s", o.GetName(), r.release, r.namespace, y)
				}
			}
		case "ValidatingAdmissionPolicy":
			if strings.HasSuffix(o.GetName(), "-pod-device-access") {
				continue // checked through its binding above
			}
			cond, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
			if y, _ := yaml.Marshal(cond); !strings.Contains(string(y), "system:serviceaccount:"+r.namespace+":") {
				t.Errorf("ValidatingAdmissionPolicy %s does not match release %s's agent only: %s", o.GetName(), r.release, y)
			}
		case "MutatingWebhookConfiguration":
			y, _ := yaml.Marshal(o.Object)
			if want := manifests.MatchGPUPodFor(r.schedulerName); !strings.Contains(strings.Join(strings.Fields(string(y)), " "), strings.Join(strings.Fields(want), " ")) {
				t.Errorf("MutatingWebhookConfiguration %s is not triggered by scheduler %s's pods (want the condition %q)", o.GetName(), r.schedulerName, want)
			}
		}
	}

	args := map[string][]string{} // component -> container args
	for _, o := range r.objs {
		var spec corev1.PodSpec
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			into(t, o, &d)
			spec = d.Spec.Template.Spec
		case "DaemonSet":
			var d appsv1.DaemonSet
			into(t, o, &d)
			spec = d.Spec.Template.Spec
			if got := spec.NodeSelector["pool"]; got != r.pool {
				t.Errorf("DaemonSet %s runs on pool %q, want release %s's %q", d.Name, got, r.release, r.pool)
			}
		default:
			continue
		}
		args[o.GetLabels()["app.kubernetes.io/component"]] = spec.Containers[0].Args
	}
	for _, component := range []string{"webhook", "controller", "agent"} {
		if !slices.Contains(args[component], "--scheduler-name="+r.schedulerName) {
			t.Errorf("release %s: the %s's args %v do not name scheduler %s", r.release, component, args[component], r.schedulerName)
		}
	}
	if !slices.Contains(args["agent"], "--lease-namespace="+r.namespace) {
		t.Errorf("release %s: the agent's args %v do not read the leases of namespace %s", r.release, args["agent"], r.namespace)
	}

	var cm corev1.ConfigMap
	for _, o := range r.objs {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-scheduler-config") {
			into(t, o, &cm)
		}
	}
	var cfg struct {
		LeaderElection struct {
			ResourceName, ResourceNamespace string
		}
		Profiles []struct {
			SchedulerName string
			PluginConfig  []struct {
				Name string
				Args map[string]any
			}
		}
	}
	var text string
	for _, v := range cm.Data {
		text = v
	}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil || len(cfg.Profiles) == 0 {
		t.Fatalf("release %s: scheduler configuration %q: %v", r.release, text, err)
	}
	if cfg.Profiles[0].SchedulerName != r.schedulerName || cfg.LeaderElection.ResourceName != r.schedulerName || cfg.LeaderElection.ResourceNamespace != r.namespace {
		t.Errorf("release %s: profile %q, leader-election lock %s/%s; want scheduler %s locking %s/%s", r.release,
			cfg.Profiles[0].SchedulerName, cfg.LeaderElection.ResourceNamespace, cfg.LeaderElection.ResourceName, r.schedulerName, r.namespace, r.schedulerName)
	}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == "GpuClaimPlugin" && pc.Args["leaseNamespace"] != r.namespace {
			t.Errorf("release %s: GPU leases in namespace %v, want its own %s", r.release, pc.Args["leaseNamespace"], r.namespace)
		}
	}
}
