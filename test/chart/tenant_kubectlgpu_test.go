//go:build integration

package chart

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/kubectlgpu"
)

// TestKubectlGPUForANamespaceUser runs kubectl gpu with the token of a ServiceAccount bound to
// the built-in edit ClusterRole in its namespace only, on a real API server with the chart's
// tenant roles: it submits a GpuClaimTemplate, lists and explains its claims and workloads, and
// the views that need cluster reads (status, nodes, top, health, leases) succeed with a note
// naming the permission they lack instead of failing with Forbidden. The cluster admin gets
// no note.
func TestKubectlGPUForANamespaceUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 5*time.Minute)
	defer cancel()
	c, admin := tenantCluster(t, ctx, "chart-kgpu")
	const ns = "team-a"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := tenantConfig(t, ctx, c, admin, ns, "alice", "edit")
	tenant := writeKubeconfig(t, cfg, ns)
	editor, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The aggregation controller fills edit in a moment after the roles appear.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := editor.Resource(tenantResources[0].gvr).Namespace(ns).Create(ctx, tenantResources[0].obj(ns, "mine"), metav1.CreateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("the edit user never could create a GpuClaim in its namespace")
	}

	run := func(kubeconfig string, args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		cmd := kubectlgpu.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
		cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
		cmd.SetContext(ctx)
		err := cmd.Execute()
		return out.String(), errOut.String(), err
	}

	// Namespace views work.
	if out, errOut, err := run(tenant, "submit", "claim-template", "two", "--gpus", "2"); err != nil || out != "gpuclaimtemplate team-a/two created\n" {
		t.Errorf("submit: %q %q %v, want the template created", out, errOut, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"claims"}, "mine"},
		{[]string{"claims", "-o", "name"}, "gpuclaim/mine"},
		{[]string{"workloads"}, "NAME"},
		{[]string{"explain", "claim/mine"}, "Note: the dry run of the scheduler's GPU filter is left out: you may not list nodes"},
	} {
		out, errOut, err := run(tenant, c.args...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("kubectl gpu %v as a namespace user: %v\nstdout:\n%s\nstderr:\n%s\nwant %q in stdout", c.args, err, out, errOut, c.want)
		}
	}

	// Cluster views degrade, naming the permission.
	const statuses = "Note: GPU nodes are not shown: you may not list gpunodestatuses.gpu.scheduling (cluster scope)"
	const leases = "Note: GPU leases are not shown: you may not list leases.coordination.k8s.io in all namespaces"
	for _, c := range []struct {
		args []string
		note string
	}{
		{[]string{"status"}, statuses},
		{[]string{"nodes"}, statuses},
		{[]string{"nodes", "some-node"}, statuses},
		{[]string{"top"}, statuses},
		{[]string{"health"}, statuses},
		{[]string{"nodes", "-o", "json"}, statuses},
		{[]string{"leases"}, leases},
	} {
		out, errOut, err := run(tenant, c.args...)
		if err != nil || !strings.Contains(errOut, c.note) || strings.Contains(strings.ToLower(out+errOut), "forbidden") {
			t.Errorf("kubectl gpu %v as a namespace user: %v\nstdout:\n%s\nstderr:\n%s\nwant success and the note %q", c.args, err, out, errOut, c.note)
		}
	}
	// status still counts the namespace's claims.
	if out, _, _ := run(tenant, "status"); !strings.Contains(out, "Claims: Pending=1") {
		t.Errorf("status as a namespace user:\n%s\nwant the namespace's claim counted", out)
	}

	// The cluster admin sees everything, with no note.
	for _, args := range [][]string{{"status"}, {"nodes"}, {"top"}, {"leases"}} {
		if _, errOut, err := run(c.Kubeconfig(), args...); err != nil || errOut != "" {
			t.Errorf("kubectl gpu %v as the cluster admin: %v, stderr %q; want no note", args, err, errOut)
		}
	}
}

// writeKubeconfig writes a kubeconfig for cfg (server, CA, bearer token) with namespace ns.
func writeKubeconfig(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
	kc.CurrentContext = "ctx"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
