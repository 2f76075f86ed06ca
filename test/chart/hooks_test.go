//go:build integration

package chart

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// runHook runs the container of one of the release's hooks (its objects labelled with the
// component) the way its pod would, which kwok cannot: the real gpu-controller binary with the
// pod's arguments, under a token of the hook's own ServiceAccount bound by the hook's own
// roles. Helm deleted those objects once kwok ended the pod (hook-delete-policy
// hook-succeeded), so they are created again from the release's hook manifest. Only the pod
// itself is not the hook's. Returns the command's output.
func runHook(t *testing.T, ctx context.Context, e *installEnv, env []string, component, wantHook string) string {
	t.Helper()
	hooks, err := runHelm(t, env, "get", "hooks", releaseName, "--namespace", releaseNamespace)
	if err != nil {
		t.Fatalf("helm get hooks: %v\n%s", err, hooks)
	}
	var spec *corev1.PodSpec
	var sa string
	for _, o := range parseObjects(t, hooks) {
		if o.GetLabels()["app.kubernetes.io/component"] != component {
			continue
		}
		if hook := o.GetAnnotations()["helm.sh/hook"]; hook != wantHook {
			t.Errorf("%s %s is hook %q, want %s", o.GetKind(), o.GetName(), hook, wantHook)
		}
		var err error
		switch o.GetKind() {
		case "Job":
			var job batchv1.Job
			into(t, o, &job)
			spec = &job.Spec.Template.Spec
		case "Pod":
			var pod corev1.Pod
			into(t, o, &pod)
			spec = &pod.Spec
		case "ServiceAccount":
			sa = o.GetName()
			_, err = e.kube.CoreV1().ServiceAccounts(o.GetNamespace()).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		case "ClusterRole":
			var r rbacv1.ClusterRole
			into(t, o, &r)
			_, err = e.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Rules: r.Rules}, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			into(t, o, &b)
			_, err = e.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name}, RoleRef: b.RoleRef, Subjects: b.Subjects}, metav1.CreateOptions{})
		case "Role":
			var r rbacv1.Role
			into(t, o, &r)
			_, err = e.kube.RbacV1().Roles(r.Namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace}, Rules: r.Rules}, metav1.CreateOptions{})
		case "RoleBinding":
			var b rbacv1.RoleBinding
			into(t, o, &b)
			_, err = e.kube.RbacV1().RoleBindings(b.Namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: b.Namespace}, RoleRef: b.RoleRef, Subjects: b.Subjects}, metav1.CreateOptions{})
		default:
			t.Errorf("hook %s has a %s %s this helper does not recreate", component, o.GetKind(), o.GetName())
		}
		if err != nil {
			t.Fatalf("recreating the hook's %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if spec == nil || sa == "" {
		t.Fatalf("the release's hooks have no %s pod and ServiceAccount:\n%s", component, hooks)
	}
	if spec.ServiceAccountName != sa || len(spec.Containers) != 1 {
		t.Fatalf("the %s hook runs as %q with %d containers, want its ServiceAccount %q and one container", component, spec.ServiceAccountName, len(spec.Containers), sa)
	}
	c := spec.Containers[0]
	if !strings.Contains(c.Image, "/gpu-controller:") && !strings.Contains(c.Image, "/gpu-controller@") {
		t.Errorf("the %s hook's image is %s, want gpu-controller's", component, c.Image)
	}
	_, kubeconfig := tokenConfig(t, ctx, e, sa, nil)
	bin, err := launch.Binary(ctx, "gpu-controller")
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, c.Args...), "--kubeconfig="+kubeconfig)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-controller %v (the %s hook's command): %v\n%s", c.Args, component, err, out)
	}
	return string(out)
}

// helm test runs the chart's test pod (kwok ends it), and its command, gpu-controller check,
// run as the test pod's ServiceAccount, finds the release working: the Deployments available,
// a claim accepted and the webhook (served from this machine) setting the release's scheduler
// on a dry-run pod in tests.namespace. With the webhook not mutating, the check fails.
func checkHelmTest(t *testing.T, ctx context.Context, e *installEnv) {
	restore := routeWebhooksToLocal(t, ctx, e)
	defer restore()
	out, err := runHelm(t, e.helmEnv, "test", releaseName, "--namespace", releaseNamespace, "--timeout", "2m")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "Phase:          Succeeded") && !strings.Contains(out, "Succeeded") {
		t.Errorf("helm test did not report the test pod succeeded:\n%s", out)
	}
	got := runHook(t, ctx, e, e.helmEnv, "test", "test")
	if !strings.Contains(got, "gpu-scheduler release works") {
		t.Errorf("gpu-controller check printed no verdict:\n%s", got)
	}
	// Nothing left behind: the check's claim is deleted.
	claims, err := e.gpu.GpuV1().GpuClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if strings.HasPrefix(c.Name, "gpu-scheduler-check-") && c.DeletionTimestamp == nil {
			t.Errorf("gpu-controller check left GpuClaim default/%s", c.Name)
		}
	}
}
