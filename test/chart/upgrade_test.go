//go:build integration

package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// previousChart stands in for the previous released chart while there is none: no release is
// tagged, and charts/gpu-scheduler/Chart.yaml has said version 0.1.0 since the chart's first
// commit, so no version change marks a release either. It is the last chart whose templates
// generated the webhook certificate (before the webhook's own rotator) and whose CRDs lack
// fields the working tree's have (spec.devices.share), the two changes an upgrade must carry.
const previousChart = "3c0cc00"

// previousRelease is the chart to upgrade from: the newest release tag (v<semver>, the version
// `make release VERSION=x.y.z` built, docs/install.md#releases) before HEAD, or previousChart
// where no release is tagged yet.
func previousRelease(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", repoRoot(t), "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*.[0-9]*.[0-9]*", "HEAD^").Output()
	if tag := strings.TrimSpace(string(out)); err == nil && tag != "" {
		t.Logf("upgrading from the chart of release %s", tag)
		return tag
	}
	t.Logf("no release tag before HEAD: upgrading from the chart at commit %s", previousChart)
	return previousChart
}

// An upgrade from the previous chart, taken from git history, to the working tree's keeps
// every claim, claim template, GPU lease and running pod (same UID, same content, still
// running), and moves the webhook to its own certificate Secret.
func TestUpgradeFromPreviousChart(t *testing.T) {
	helmBinary(t)
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 10*time.Minute)
	defer cancel()

	previous := previousRelease(t)
	old := filepath.Join(t.TempDir(), "previous")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("bash", "-c", `git -C "$1" archive "$2" charts/gpu-scheduler | tar -x -C "$3"`, "_", repoRoot(t), previous, old)
	if b, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("the chart at %s from git history: %v\n%s", previous, err, b)
	}
	oldChart := filepath.Join(old, "charts", "gpu-scheduler")

	c, err := cluster.Start(ctx, cluster.Config{Name: "chart-upgrade", StockScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	gpu := versioned.NewForConfigOrDie(c.RESTConfig())
	pool := cluster.NodePool{Name: gpuPool, Count: 1, GPUsPerNode: 8, Topology: "two-island",
		Labels: map[string]string{"nvidia.com/gpu.present": "true", "gpu.scheduling/managed": "true"}}
	for _, p := range []cluster.NodePool{{Name: "system", Count: 2}, pool} {
		if err := c.CreateNodePool(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitNodesReady(ctx, cluster.PoolSelector(p.Name), p.Count, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// As in TestInstall: the device plugin's resource on the GPU node and the RuntimeClass the
	// NVIDIA container toolkit installs, which the agent DaemonSet needs to become ready.
	patch := []byte(`{"status":{"capacity":{"` + gpuResource + `":"8"},"allocatable":{"` + gpuResource + `":"8"}}}`)
	if _, err := kube.CoreV1().Nodes().Patch(ctx, cluster.NodeName(gpuPool, 0), types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: "nvidia"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + c.Kubeconfig()}
	if out, err := runHelm(t, env, "install", releaseName, oldChart, "--namespace", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("installing the chart at %s: %v\n%s", previous, err, out)
	}

	// What a running release holds: users' claims and templates, the scheduler's GPU leases and
	// the pods holding them (kwok runs them; placed by nodeName so that no webhook is needed).
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := cluster.NodeName(gpuPool, 0)
	spec := apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2, Policy: apiv1.PolicyContiguous, Exclusivity: apiv1.Exclusive}}
	claims := map[string]types.UID{}
	for _, name := range []string{"train-a", "train-b"} {
		cl, err := gpu.GpuV1().GpuClaims(userNS).Create(ctx, &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: userNS}, Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims[name] = cl.UID
	}
	tmpl, err := gpu.GpuV1().GpuClaimTemplates(userNS).Create(ctx, &apiv1.GpuClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "per-pod", Namespace: userNS},
		Spec: apiv1.GpuClaimTemplateSpec{Spec: spec}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]types.UID{}
	leases := map[string]types.UID{}
	for i, claim := range []string{"train-a", "train-b"} {
		p, err := kube.CoreV1().Pods(userNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: claim + "-0", Namespace: userNS},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "cuda"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[p.Name] = p.UID
		for g := 2 * i; g < 2*i+2; g++ {
			l := lease("gpu-" + node + "-" + string(rune('0'+g)))
			l.Labels = map[string]string{apiv1.LabelLeaseNode: node}
			l.Spec.HolderIdentity = ptr.To(userNS + "/" + p.Name)
			l, err := kube.CoordinationV1().Leases(releaseNamespace).Create(ctx, l, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			leases[l.Name] = l.UID
		}
	}
	waitRunning(t, ctx, kube, pods)

	out, err := runHelm(t, env, append([]string{"upgrade", releaseName, chartDir(t), "--namespace", releaseNamespace, "--reset-then-reuse-values", "--wait", "--timeout", "3m"}, hookCompletes...)...)
	if err != nil {
		t.Fatalf("helm upgrade from the chart at %s: %v\n%s", previous, err, out)
	}

	for name, uid := range claims {
		cl, err := gpu.GpuV1().GpuClaims(userNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil || cl.UID != uid || cl.Spec.Devices.Count != 2 {
			t.Errorf("GpuClaim %s after the upgrade: %v (uid %v, want %v)", name, err, ptr.Deref(cl, apiv1.GpuClaim{}).UID, uid)
		}
	}
	if got, err := gpu.GpuV1().GpuClaimTemplates(userNS).Get(ctx, tmpl.Name, metav1.GetOptions{}); err != nil || got.UID != tmpl.UID {
		t.Errorf("GpuClaimTemplate %s after the upgrade: %v", tmpl.Name, err)
	}
	for name, uid := range leases {
		l, err := kube.CoordinationV1().Leases(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || l.UID != uid || ptr.Deref(l.Spec.HolderIdentity, "") == "" {
			t.Errorf("GPU lease %s after the upgrade: %v", name, err)
		}
	}
	waitRunning(t, ctx, kube, pods)

	checkCRDUpgradeHook(t, ctx, &installEnv{c: c, kube: kube, gpu: gpu}, env)

	// The webhook's certificate moved to the Secret its rotator fills; the old generated one is
	// gone with the old template.
	if _, err := kube.CoreV1().Secrets(releaseNamespace).Get(ctx, releaseName+"-webhook-cert", metav1.GetOptions{}); err != nil {
		t.Errorf("the rotator's Secret after the upgrade: %v", err)
	}
	if _, err := kube.CoreV1().Secrets(releaseNamespace).Get(ctx, releaseName+"-webhook-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the previous chart's generated Secret after the upgrade: %v, want NotFound", err)
	}
}

// waitRunning waits until every pod (name to UID) is the same pod and Running.
func waitRunning(t *testing.T, ctx context.Context, kube kubernetes.Interface, pods map[string]types.UID) {
	t.Helper()
	for name, uid := range pods {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := kube.CoreV1().Pods(userNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			last = string(p.Status.Phase)
			return p.UID == uid && p.Status.Phase == corev1.PodRunning, nil
		})
		if err != nil {
			t.Errorf("pod %s/%s (uid %s) not running: %s", userNS, name, uid, last)
		}
	}
}

// checkCRDUpgradeHook: the previous chart's CRDs lack spec.devices.share, and helm upgrade
// leaves crds/ alone. The release's pre-upgrade hook Job runs `gpu-controller apply-crds`;
// kwok ends the hook's pod (hookCompletes) without running its container, so the test runs it: the
// real gpu-controller binary with the Job's arguments, under the hook's own ServiceAccount and
// ClusterRole (created from the release's hook manifest, which Helm deleted once the Job
// "succeeded"). Only the pod is not the hook's: everything the pod would do is.
func checkCRDUpgradeHook(t *testing.T, ctx context.Context, e *installEnv, env []string) {
	t.Helper()
	shared := func(name string) *apiv1.GpuClaim {
		return &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: userNS}, Spec: apiv1.GpuClaimSpec{
			Devices: apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.Shared, Share: &apiv1.GPUShare{MemoryMiB: 8192}}}}
	}
	// Before the hook has run, the old CRD drops the new field: this is what the hook mends.
	before, err := e.gpu.GpuV1().GpuClaims(userNS).Create(ctx, shared("share-before-hook"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a Shared claim on the previous chart's CRD: %v", err)
	}
	if before.Spec.Devices.Share != nil {
		t.Fatalf("the CRD served spec.devices.share before apply-crds ran: this test no longer shows what the hook changes")
	}

	runHook(t, ctx, e, env, "crds", "pre-install,pre-upgrade")

	// The new field is served: a create keeps it.
	after, err := e.gpu.GpuV1().GpuClaims(userNS).Create(ctx, shared("share-after-hook"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a Shared claim after the hook: %v", err)
	}
	if after.Spec.Devices.Share == nil || after.Spec.Devices.Share.MemoryMiB != 8192 {
		t.Errorf("spec.devices.share after the hook: %+v, want memoryMiB 8192 kept", after.Spec.Devices.Share)
	}
	// The hook owns the CRD's fields now; Helm's client-side create no longer does, so a field
	// a later CRD drops is dropped.
	ext := apiextensionsclient.NewForConfigOrDie(e.c.RESTConfig())
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "gpuclaims.gpu.scheduling", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managers := map[string]metav1.ManagedFieldsOperationType{}
	for _, m := range crd.ManagedFields {
		if m.Subresource == "" {
			managers[m.Manager] = m.Operation
		}
	}
	if managers["gpu-scheduler-crds"] != metav1.ManagedFieldsOperationApply || managers["helm"] != "" {
		t.Errorf("the CRD's field managers are %v, want gpu-scheduler-crds (Apply) and no longer helm", managers)
	}
}
