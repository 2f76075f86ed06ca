//go:build integration

package chart

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// TestTenantRBAC checks the chart's aggregated ClusterRoles on a real control plane (the
// kube-controller-manager aggregates them into the built-in roles): a ServiceAccount bound to
// the built-in edit ClusterRole by a RoleBinding in its namespace creates, updates and deletes
// GpuClaims, GpuClaimTemplates and GpuWorkloads there with its own token, and nowhere else; one
// bound to view reads them and writes nothing. Without the chart's roles both are Forbidden.
func TestTenantRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 5*time.Minute)
	defer cancel()
	c, admin := tenantCluster(t, ctx, "chart-tenant")

	const home, other = "team-a", "team-b"
	for _, ns := range []string{home, other} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	editor := tenantClient(t, ctx, c, admin, home, "alice", "edit")
	viewer := tenantClient(t, ctx, c, admin, home, "victor", "view")

	// The aggregation controller fills edit and view in a moment after the roles appear.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := editor.Resource(tenantResources[0].gvr).Namespace(home).Create(ctx, tenantResources[0].obj(home, "probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	}); err != nil {
		t.Errorf("an edit user never could create a GpuClaim in its namespace: the chart's roles are not aggregated into edit")
	}

	for _, r := range tenantResources {
		t.Run(r.gvr.Resource, func(t *testing.T) {
			res := editor.Resource(r.gvr)
			created, err := res.Namespace(home).Create(ctx, r.obj(home, "mine"), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("edit user creating a %s in its namespace: %v", r.gvr.Resource, err)
			}
			labels := map[string]string{"touched": "yes"}
			created.SetLabels(labels)
			if _, err := res.Namespace(home).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Errorf("edit user updating its %s: %v", r.gvr.Resource, err)
			}
			if _, err := res.Namespace(other).Create(ctx, r.obj(other, "theirs"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("edit user creating a %s in another namespace: got %v, want Forbidden", r.gvr.Resource, err)
			}

			list, err := viewer.Resource(r.gvr).Namespace(home).List(ctx, metav1.ListOptions{})
			if err != nil || len(list.Items) != 1 {
				t.Errorf("view user listing %s in its namespace: %v (%d items, want 1)", r.gvr.Resource, err, len(listItems(list)))
			}
			if _, err := viewer.Resource(r.gvr).Namespace(home).Get(ctx, "mine", metav1.GetOptions{}); err != nil {
				t.Errorf("view user getting a %s: %v", r.gvr.Resource, err)
			}
			if _, err := viewer.Resource(r.gvr).Namespace(home).Create(ctx, r.obj(home, "viewers"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("view user creating a %s: got %v, want Forbidden", r.gvr.Resource, err)
			}
			if err := viewer.Resource(r.gvr).Namespace(home).Delete(ctx, "mine", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("view user deleting a %s: got %v, want Forbidden", r.gvr.Resource, err)
			}
			if _, err := viewer.Resource(r.gvr).Namespace(other).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("view user listing %s in another namespace: got %v, want Forbidden", r.gvr.Resource, err)
			}

			if err := res.Namespace(home).Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
				t.Errorf("edit user deleting its %s: %v", r.gvr.Resource, err)
			}
		})
	}
}

func listItems(l *unstructured.UnstructuredList) []unstructured.Unstructured {
	if l == nil {
		return nil
	}
	return l.Items
}

// tenantResources are the namespaced objects a tenant manages, each with a minimal valid object.
var tenantResources = []struct {
	gvr schema.GroupVersionResource
	obj func(ns, name string) *unstructured.Unstructured
}{
	{schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuclaims"}, func(ns, name string) *unstructured.Unstructured {
		return gpuObject("GpuClaim", ns, name, map[string]any{"devices": map[string]any{"count": int64(1)}})
	}},
	{schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuclaimtemplates"}, func(ns, name string) *unstructured.Unstructured {
		return gpuObject("GpuClaimTemplate", ns, name, map[string]any{"spec": map[string]any{"devices": map[string]any{"count": int64(1)}}})
	}},
	{schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuworkloads"}, func(ns, name string) *unstructured.Unstructured {
		return gpuObject("GpuWorkload", ns, name, map[string]any{
			"replicas": int64(1),
			"claim":    map[string]any{"spec": map[string]any{"devices": map[string]any{"count": int64(1)}}},
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "busybox"}}}},
		})
	}},
}

func gpuObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gpu.scheduling/v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

// installTenantRoles creates the chart's tenant ClusterRoles, as helm renders them with the
// default values.
func installTenantRoles(t *testing.T, ctx context.Context, admin kubernetes.Interface) {
	t.Helper()
	roles := 0
	for _, o := range parseObjects(t, mustTemplate(t)) {
		if o.GetKind() != "ClusterRole" || o.GetLabels()["app.kubernetes.io/component"] != "rbac" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ClusterRole %s: %v", role.Name, err)
		}
		roles++
	}
	if roles == 0 {
		t.Error("the chart renders no tenant ClusterRole (component rbac)")
	}
}

// tenantClient makes ServiceAccount sa in ns, binds it to the built-in ClusterRole role by a
// RoleBinding in ns, and returns a client that authenticates with the account's own token
// (TokenRequest), as a tenant's kubeconfig would.
func tenantClient(t *testing.T, ctx context.Context, c *cluster.Cluster, admin kubernetes.Interface, ns, sa, role string) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(tenantConfig(t, ctx, c, admin, ns, sa, role))
	if err != nil {
		t.Fatal(fmt.Errorf("client of %s/%s: %w", ns, sa, err))
	}
	return dyn
}

// tenantConfig is tenantClient's connection: the API server, with the account's own token.
func tenantConfig(t *testing.T, ctx context.Context, c *cluster.Cluster, admin kubernetes.Interface, ns, sa, role string) *rest.Config {
	t.Helper()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	cfg := rest.AnonymousClientConfig(c.RESTConfig())
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// tenantCluster starts a control plane with the chart's CRDs and its tenant roles, stopped when
// the test ends, and returns it with an admin client.
func tenantCluster(t *testing.T, ctx context.Context, name string) (*cluster.Cluster, kubernetes.Interface) {
	t.Helper()
	helmBinary(t)
	c, err := cluster.Start(ctx, cluster.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	if err := c.InstallCRDs(ctx, filepath.Join(chartDir(t), "crds")); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(c.RESTConfig())
	installTenantRoles(t, ctx, admin)
	return c, admin
}
