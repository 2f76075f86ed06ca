//go:build integration

package chart

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// installEnv is the state the install test's steps share.
type installEnv struct {
	c          *cluster.Cluster
	kube       kubernetes.Interface
	gpu        versioned.Interface
	dyn        dynamic.Interface
	mapper     meta.RESTMapper
	helmEnv    []string
	gpuNode    string
	manifest   []*unstructured.Unstructured
	secretData map[string][]byte
}

const (
	gpuPool     = "gpu"
	userNS      = "team-a"
	schedulerSA = releaseName // the scheduler's ServiceAccount with the default values
	webhookSA   = releaseName + "-webhook"
	agentSA     = releaseName + "-agent"
	controlSA   = releaseName + "-controller"
	webhookSvc  = releaseName + "-webhook"
)

// TestInstall installs the chart into a real control plane and runs the components' binaries
// with the credentials of the chart's own ServiceAccounts, then upgrades and uninstalls it.
// kwok plays the kubelets, so the chart's pods "run" without containers; the binaries run
// on this machine instead.
func TestInstall(t *testing.T) {
	helmBinary(t)
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 15*time.Minute)
	defer cancel()

	// API Priority and Fairness on, as on every real cluster (the simulator turns it off to
	// measure schedulers at full speed): checkPriority asks it how it classifies our components.
	c, err := cluster.Start(ctx, cluster.Config{Name: "chart-it", StockScheduler: true, APIServerExtraArgs: []string{"--enable-priority-and-fairness=true"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	e := &installEnv{c: c, helmEnv: []string{"KUBECONFIG=" + c.Kubeconfig()}, gpuNode: cluster.NodeName(gpuPool, 0)}
	cfg := c.RESTConfig()
	e.kube = kubernetes.NewForConfigOrDie(cfg)
	e.gpu = versioned.NewForConfigOrDie(cfg)
	e.dyn = dynamic.NewForConfigOrDie(cfg)
	e.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))

	// Two plain nodes for the Deployments, one GPU node (the label GPU feature discovery sets)
	// for the agent DaemonSet, and the RuntimeClass the NVIDIA container toolkit installs.
	for _, p := range []cluster.NodePool{
		{Name: "system", Count: 2},
		// gpu.scheduling/managed=true: the node docs/install.md hands to the release (the
		// device-plugin mode, the chart's default, runs the agent only there).
		{Name: gpuPool, Count: 1, GPUsPerNode: 8, Topology: "two-island", Labels: map[string]string{"nvidia.com/gpu.present": "true", "gpu.scheduling/managed": "true"}},
	} {
		if err := c.CreateNodePool(ctx, p); err != nil {
			t.Fatal(err)
		}
		if p.Name == gpuPool {
			// The GPUs as our device plugin registers them with the kubelet: its resource in the
			// node's capacity. The pool's nvidia.com/gpu stays, as another device plugin's
			// would: the agent binary below must refuse to serve beside it.
			for i := range p.Count {
				patch := []byte(`{"status":{"capacity":{"` + gpuResource + `":"8"},"allocatable":{"` + gpuResource + `":"8"}}}`)
				if _, err := kubernetes.NewForConfigOrDie(c.RESTConfig()).CoreV1().Nodes().Patch(ctx, cluster.NodeName(p.Name, i), types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := c.WaitNodesReady(ctx, cluster.PoolSelector(p.Name), p.Count, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.kube.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: "nvidia"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The command docs/install.md gives, plus --wait: every Deployment and the DaemonSet ready.
	out, err := runHelm(t, e.helmEnv, append([]string{"install", releaseName, chartDir(t), "--namespace", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m"}, hookCompletes...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("helm install:\n%s", out)
	// NOTES.txt tells the user what to run next.
	for _, want := range []string{"kind: GpuClaim", "gpu.scheduling/claim: two-gpus", "schedulerName: gpu-scheduler", "kubectl get gclaim -w", "kubectl get gns", "kubectl label node <gpu-node> gpu.scheduling/managed=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install's notes lack %q", want)
		}
	}
	manifest, err := runHelm(t, e.helmEnv, "get", "manifest", releaseName, "--namespace", releaseNamespace)
	if err != nil {
		t.Fatal(err)
	}
	e.manifest = parseObjects(t, manifest)

	steps := []struct {
		name string
		run  func(*testing.T, context.Context, *installEnv)
	}{
		{"CRDs established", checkCRDs},
		{"every object created", checkObjectsExist},
		{"workloads ready", checkWorkloads},
		{"binaries accept the chart's flags", checkFlags},
		{"webhook serves the chart certificate", checkWebhookCertificate},
		{"RBAC by SubjectAccessReview", checkAccessReviews},
		{"API priority: scheduler and controller at workload-high", checkPriority},
		{"components run with their ServiceAccount tokens", checkComponents},
		{"the controller runs a GpuWorkload with its ServiceAccount token", checkController},
		{"helm test", checkHelmTest},
		{"upgrade keeps the webhook certificate", checkUpgrade},
		{"uninstall", checkUninstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, ctx, e) }) {
			return // later steps build on this one
		}
	}
}

func checkCRDs(t *testing.T, ctx context.Context, e *installEnv) {
	crdGVR := apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	for _, name := range []string{"gpuclaims.gpu.scheduling", "gpunodestatuses.gpu.scheduling"} {
		u, err := e.dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		into(t, u, &crd)
		established := false
		for _, c := range crd.Status.Conditions {
			established = established || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
		}
		if !established {
			t.Errorf("CRD %s is not Established: %+v", name, crd.Status.Conditions)
		}
	}
}

func (e *installEnv) resource(t *testing.T, o *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := o.GroupVersionKind()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = releaseNamespace
		}
		return e.dyn.Resource(m.Resource).Namespace(ns)
	}
	return e.dyn.Resource(m.Resource)
}

func checkObjectsExist(t *testing.T, ctx context.Context, e *installEnv) {
	kinds := map[string]int{}
	for _, o := range e.manifest {
		if _, err := e.resource(t, o).Get(ctx, o.GetName(), metav1.GetOptions{}); err != nil {
			t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		kinds[o.GetKind()]++
	}
	t.Logf("%d objects: %v", len(e.manifest), kinds)
	for _, k := range []string{"Deployment", "DaemonSet", "ConfigMap", "Secret", "Service", "ServiceAccount", "ClusterRole",
		"ClusterRoleBinding", "Role", "RoleBinding", "PodDisruptionBudget", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if kinds[k] == 0 {
			t.Errorf("the release has no %s", k)
		}
	}
}

func checkWorkloads(t *testing.T, ctx context.Context, e *installEnv) {
	for _, name := range []string{releaseName, webhookSvc, controlSA} {
		d, err := e.kube.AppsV1().Deployments(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas {
			t.Errorf("Deployment %s: %d of %d replicas ready", name, d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
	}
	ds, err := e.kube.AppsV1().DaemonSets(releaseNamespace).Get(ctx, agentSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Exactly the one GPU node runs the agent.
	if ds.Status.DesiredNumberScheduled != 1 || ds.Status.NumberReady != 1 {
		t.Errorf("DaemonSet %s: desired %d, ready %d; want 1 and 1 (the GPU node only)", ds.Name, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
	}
	pods, err := e.kube.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != e.gpuNode {
			t.Errorf("agent pod %s runs on %s, want %s", p.Name, p.Spec.NodeName, e.gpuNode)
		}
	}
}

// Every flag the chart passes to a container is one its binary knows (the image's command is
// the binary named like the image, see build/Dockerfile).
func checkFlags(t *testing.T, ctx context.Context, e *installEnv) {
	root := repoRoot(t)
	for _, o := range e.manifest {
		spec, ok := podSpecOf(t, o)
		if !ok {
			continue
		}
		for _, c := range spec.Containers {
			name := c.Image[strings.LastIndex(c.Image, "/")+1:]
			name = name[:strings.IndexAny(name+":", ":@")]
			if files, _ := filepath.Glob(filepath.Join(root, "cmd", name, "*.go")); len(files) == 0 {
				t.Logf("cmd/%s has no sources yet; its flags %v are unchecked", name, c.Args)
				continue
			}
			bin, err := launch.Binary(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			help, _ := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
			// pflag lists "--name type", Go's flag package "  -name type" or "  -name\n".
			listed := regexp.MustCompile(`(?m)(^|\s)--?([a-z0-9][a-z0-9-]*)[\s=]`).FindAllStringSubmatch(string(help), -1)
			known := map[string]bool{}
			for _, m := range listed {
				known[m[2]] = true
			}
			for _, a := range c.Args {
				flag, _, _ := strings.Cut(a, "=")
				if !strings.HasPrefix(flag, "--") || !known[strings.TrimPrefix(flag, "--")] {
					t.Errorf("%s %s passes %q, which %s --help does not list", o.GetKind(), o.GetName(), a, name)
				}
			}
		}
	}
}

// The real webhook binary, with the chart's arguments and its ServiceAccount's token, makes its
// certificate in the chart's empty Secret and writes its CA into both webhook configurations;
// served from the Secret's files (as the kubelet mounts them), it is trusted through that CA
// bundle under the Service's DNS name.
func checkWebhookCertificate(t *testing.T, ctx context.Context, e *installEnv) {
	secretName := webhookSvc + "-cert"
	secret, err := e.kube.CoreV1().Secrets(releaseNamespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secret.Data) != 0 {
		t.Fatalf("Secret %s holds %d keys before the webhook ran; the chart must ship it empty", secretName, len(secret.Data))
	}
	dir := t.TempDir()
	mountCtx, stopMount := context.WithCancel(ctx)
	defer stopMount()
	go mountSecret(mountCtx, e.kube, secretName, dir)
	addr := startWebhook(t, ctx, e, dir, true)
	if secret, err = e.kube.CoreV1().Secrets(releaseNamespace).Get(ctx, secretName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	e.secretData = secret.Data
	verifyServingCert(t, secret.Data, webhookSvc+"."+releaseNamespace+".svc")
	mwc, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vwc, err := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, webhookSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(vwc.Webhooks[0].ClientConfig.CABundle) != string(secret.Data["ca.crt"]) || string(mwc.Webhooks[0].ClientConfig.CABundle) != string(secret.Data["ca.crt"]) {
		t.Fatal("the webhook configurations' CA bundles are not the CA the webhook made")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("the MutatingWebhookConfiguration's caBundle holds no certificate")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: webhookSvc + "." + releaseNamespace + ".svc", MinVersion: tls.VersionTLS12,
	}}}
	resp, err := client.Get("https://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("TLS to the webhook as %s.%s.svc with the configuration's CA bundle: %v", webhookSvc, releaseNamespace, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s", resp.Status)
	}
}

// mountSecret does what the kubelet does for the webhook's Secret volume: it keeps the Secret's
// keys as files in dir until ctx ends.
func mountSecret(ctx context.Context, kube kubernetes.Interface, name, dir string) {
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for k, v := range s.Data {
			_ = os.WriteFile(filepath.Join(dir, k), v, 0o600)
		}
		return false, nil
	})
}

// rotationArgs are the webhook's certificate rotation flags (cmd/gpu-webhook).
var rotationArgs = []string{"--cert-secret=", "--cert-service=", "--inject-ca-into=", "--ca-validity=", "--cert-validity=", "--cert-renew-before="}

// startWebhook runs bin/gpu-webhook with the arguments of the chart's Deployment, with the
// certificate files in certDir and a free loopback port, and returns its address. Without rotate
// the certificate rotation flags are left out: certDir's certificate is the test's own, and the
// CA bundles are the test's to set.
func startWebhook(t *testing.T, ctx context.Context, e *installEnv, certDir string, rotate bool) string {
	t.Helper()
	bin, err := launch.Binary(ctx, "gpu-webhook")
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.kube.AppsV1().Deployments(releaseNamespace).Get(ctx, webhookSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if !rotate && slices.ContainsFunc(rotationArgs, func(p string) bool { return strings.HasPrefix(a, p) }) {
			continue
		}
		switch {
		case strings.HasPrefix(a, "--listen-address="):
			a = "--listen-address=" + addr
		case strings.HasPrefix(a, "--tls-cert-file="):
			a = "--tls-cert-file=" + filepath.Join(certDir, "tls.crt")
		case strings.HasPrefix(a, "--tls-private-key-file="):
			a = "--tls-private-key-file=" + filepath.Join(certDir, "tls.key")
		}
		args = append(args, a)
	}
	// In the cluster the webhook's API access is its pod's ServiceAccount; here a token of it.
	_, kubeconfig := tokenConfig(t, ctx, e, webhookSA, nil)
	args = append(args, "--kubeconfig="+kubeconfig)
	p, err := e.c.StartProcess("gpu-webhook-"+strconv.Itoa(port), bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	insecure := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // readiness only
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := insecure.Get("https://" + addr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("gpu-webhook %v did not become ready: %v\n%s", args, err, p.LogTail(30))
	}
	checkMetricsAuth(t, ctx, e, "gpu-webhook", "https://"+addr+"/metrics")
	return addr
}

// checkMetricsAuth scrapes a component's /metrics as Prometheus would, with a token bound to the
// chart's metrics-reader role: the component, running with its chart ServiceAccount, must be
// allowed to ask the apiserver (TokenReview, SubjectAccessReview) and answer 200, and refuse a
// scrape without a token.
func checkMetricsAuth(t *testing.T, ctx context.Context, e *installEnv, component, url string) {
	t.Helper()
	token, err := launch.MetricsReaderToken(ctx, e.kube, releaseNamespace, "metrics-reader")
	if err != nil {
		t.Fatal(err)
	}
	var (
		code int
		body []byte
		last string
	)
	// The process may still be starting: wait until it answers at all.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body, err = launch.Scrape(ctx, url, "")
		return err == nil, nil
	})
	if err != nil || code != http.StatusUnauthorized {
		t.Errorf("%s: GET %s without a token: %d %v, want 401\n%.300s", component, url, code, err, body)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body, err := launch.Scrape(ctx, url, token)
		last = fmt.Sprintf("%d %v %.300s", code, err, body)
		return err == nil && code == http.StatusOK && strings.Contains(string(body), "gpu_scheduler_"), nil
	})
	if err != nil {
		t.Errorf("%s: GET %s with a metrics-reader token: %s", component, url, last)
	}
}

// access is one question to the authorizer: may this ServiceAccount do that?
type access struct {
	sa      string
	verb    string
	group   string
	res     string
	sub     string
	ns      string
	name    string
	allowed bool
}

func (a access) String() string {
	r := a.res
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.group != "" {
		r += "." + a.group
	}
	where := "cluster-wide"
	if a.ns != "" {
		where = "in " + a.ns
	}
	return fmt.Sprintf("%s %s %s %s", a.sa, a.verb, r, where)
}

func checkAccessReviews(t *testing.T, ctx context.Context, e *installEnv) {
	const coord, gpu, admreg = "coordination.k8s.io", "gpu.scheduling", "admissionregistration.k8s.io"
	for _, a := range []access{
		// The scheduler.
		{schedulerSA, "list", "", "pods", "", "", "", true},
		{schedulerSA, "create", "", "pods", "binding", userNS, "", true},
		{schedulerSA, "update", gpu, "gpuclaims", "status", userNS, "", true},
		{schedulerSA, "watch", gpu, "gpunodestatuses", "", "", "", true},
		{schedulerSA, "create", coord, "leases", "", releaseNamespace, "", true},
		{schedulerSA, "delete", coord, "leases", "", releaseNamespace, "", true},
		{schedulerSA, "create", coord, "leases", "", "default", "", false},
		{schedulerSA, "create", coord, "leases", "", "kube-system", "", false},
		{schedulerSA, "update", gpu, "gpuclaims", "", userNS, "", false},
		{schedulerSA, "create", gpu, "gpuclaims", "", userNS, "", true},
		{schedulerSA, "delete", gpu, "gpuclaims", "", userNS, "", false},
		{schedulerSA, "watch", gpu, "gpuclaimtemplates", "", "", "", true},
		{schedulerSA, "create", gpu, "gpuclaimtemplates", "", userNS, "", false},
		{schedulerSA, "update", gpu, "gpunodestatuses", "status", "", "", false},
		{schedulerSA, "delete", "", "nodes", "", "", "", false},
		{schedulerSA, "get", "", "secrets", "", "kube-system", "", false},
		{schedulerSA, "get", "", "secrets", "", releaseNamespace, "", false},
		{schedulerSA, "create", "", "pods", "", userNS, "", false},
		// The agent.
		{agentSA, "create", gpu, "gpunodestatuses", "", "", "", true},
		{agentSA, "update", gpu, "gpunodestatuses", "status", "", "", true},
		{agentSA, "patch", "", "nodes", "", "", "", true},
		{agentSA, "watch", coord, "leases", "", releaseNamespace, "", true},
		// Its liveness lease; the node restriction policy keeps it off every other lease.
		{agentSA, "create", coord, "leases", "", releaseNamespace, "", true},
		{agentSA, "update", coord, "leases", "", releaseNamespace, "", true},
		{agentSA, "delete", coord, "leases", "", releaseNamespace, "", false},
		{agentSA, "create", coord, "leases", "", "default", "", false},
		{agentSA, "list", coord, "leases", "", "default", "", false},
		{agentSA, "delete", "", "nodes", "", "", "", false},
		{agentSA, "get", "", "secrets", "", "kube-system", "", false},
		// The device plugin (the default mode) finds the pod the kubelet admits among its
		// node's pods; RBAC cannot narrow list to one node's pods.
		{agentSA, "list", "", "pods", "", "", "", true},
		{agentSA, "update", "", "pods", "", userNS, "", false},
		{agentSA, "update", gpu, "gpuclaims", "status", userNS, "", false},
		// The GpuWorkload controller: workloads, their pods and claims; no claim status, no binding.
		{controlSA, "watch", gpu, "gpuworkloads", "", "", "", true},
		{controlSA, "update", gpu, "gpuworkloads", "", userNS, "", true},
		{controlSA, "update", gpu, "gpuworkloads", "status", userNS, "", true},
		{controlSA, "update", gpu, "gpuworkloads", "finalizers", userNS, "", true},
		{controlSA, "create", "", "pods", "", userNS, "", true},
		{controlSA, "delete", "", "pods", "", userNS, "", true},
		{controlSA, "create", gpu, "gpuclaims", "", userNS, "", true},
		{controlSA, "create", "events.k8s.io", "events", "", userNS, "", true},
		// The claim-template controller: reads templates, makes claims owned by pods.
		{controlSA, "watch", gpu, "gpuclaimtemplates", "", "", "", true},
		{controlSA, "update", "", "pods", "finalizers", userNS, "", true},
		{controlSA, "create", gpu, "gpuclaimtemplates", "", userNS, "", false},
		{controlSA, "update", gpu, "gpuclaimtemplates", "", userNS, "", false},
		{controlSA, "create", coord, "leases", "", releaseNamespace, "", true},
		{controlSA, "create", coord, "leases", "", "default", "", false},
		{controlSA, "update", "", "pods", "", userNS, "", false},
		{controlSA, "create", "", "pods", "binding", userNS, "", false},
		{controlSA, "update", gpu, "gpuclaims", "status", userNS, "", false},
		{controlSA, "delete", gpu, "gpuworkloads", "", userNS, "", false},
		{controlSA, "get", "", "secrets", "", releaseNamespace, "", false},
		{controlSA, "update", gpu, "gpunodestatuses", "status", "", "", false},
		// The webhook: its certificate rotator reads the release namespace's Secrets (through an
		// informer) and writes its own Secret and its own webhook configurations; nothing else.
		{webhookSA, "list", "", "pods", "", "", "", false},
		{webhookSA, "watch", "", "secrets", "", releaseNamespace, "", true},
		{webhookSA, "update", "", "secrets", "", releaseNamespace, webhookSvc + "-cert", true},
		{webhookSA, "update", "", "secrets", "", releaseNamespace, "", false},
		{webhookSA, "get", "", "secrets", "", "kube-system", "", false},
		{webhookSA, "update", admreg, "validatingwebhookconfigurations", "", "", webhookSvc, true},
		{webhookSA, "update", admreg, "mutatingwebhookconfigurations", "", "", webhookSvc, true},
		{webhookSA, "update", admreg, "validatingwebhookconfigurations", "", "", "", false},
		{webhookSA, "get", coord, "leases", "", releaseNamespace, "", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + releaseNamespace + ":" + a.sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.res, Subresource: a.sub, Name: a.name,
			},
		}}
		got, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != a.allowed {
			t.Errorf("%s: allowed=%t, want %t (%s)", a, got.Status.Allowed, a.allowed, got.Status.Reason)
		}
	}
}

// tokenConfig requests a token for one of the chart's ServiceAccounts (TokenRequest API) and
// returns a client configuration that authenticates with it only, and a kubeconfig file for it.
// With boundPod the token is bound to that pod, as the kubelet's projected tokens are, and
// carries the pod's node.
func tokenConfig(t *testing.T, ctx context.Context, e *installEnv, sa string, boundPod *corev1.Pod) (*rest.Config, string) {
	t.Helper()
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}
	if boundPod != nil {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: boundPod.Name, UID: boundPod.UID}
	}
	tr, err := e.kube.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	admin := e.c.RESTConfig()
	cfg := &rest.Config{Host: admin.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{
		CAData: admin.CAData, CAFile: admin.CAFile, ServerName: admin.ServerName,
	}, QPS: 200, Burst: 400}
	ca := admin.CAData
	if len(ca) == 0 && admin.CAFile != "" {
		if ca, err = os.ReadFile(admin.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: ca, TLSServerName: admin.ServerName}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: sa}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// wantDeniedBy fails unless err is Forbidden and names by (a policy).
func wantDeniedBy(t *testing.T, what string, err error, by string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), by) {
		t.Errorf("%s: got %v, want Forbidden by %s", what, err, by)
	}
}

// wantForbidden fails unless err is the apiserver's Forbidden.
func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: got %v, want Forbidden", what, err)
	}
}

func checkComponents(t *testing.T, ctx context.Context, e *installEnv) {
	agentPods, err := e.kube.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(agentPods.Items) != 1 {
		t.Fatalf("the agent pod: %v (%d pods)", err, len(agentPods.Items))
	}
	schedCfg, schedKubeconfig := tokenConfig(t, ctx, e, schedulerSA, nil)
	agentCfg, agentKubeconfig := tokenConfig(t, ctx, e, agentSA, &agentPods.Items[0])
	unboundAgentCfg, _ := tokenConfig(t, ctx, e, agentSA, nil)
	webhookCfg, _ := tokenConfig(t, ctx, e, webhookSA, nil)
	sched := kubernetes.NewForConfigOrDie(schedCfg)
	agent := kubernetes.NewForConfigOrDie(agentCfg)
	agentGPU := versioned.NewForConfigOrDie(agentCfg)
	webhookClient := kubernetes.NewForConfigOrDie(webhookCfg)

	// The agent's API calls, with the agent's token: publish the GPU node's status (the
	// API reference's two-island box), label its node, read the GPU leases.
	t.Run("agent", func(t *testing.T) {
		gns := agentGPU.GpuV1().GpuNodeStatuses()
		obj, err := gns.Create(ctx, &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: e.gpuNode}, Spec: apiv1.GpuNodeStatusSpec{NodeName: e.gpuNode}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("agent creates its GpuNodeStatus: %v", err)
		}
		for i := int32(0); i < 8; i++ {
			d := apiv1.Device{ID: i, Health: apiv1.Healthy, Island: "nvlink-group-0", BandwidthGBps: 600}
			if i >= 4 {
				d.Island, d.BandwidthGBps = "nvlink-group-1", 64
			}
			obj.Status.Devices = append(obj.Status.Devices, d)
		}
		obj.Status.Total, obj.Status.Healthy, obj.Status.Free = 8, 8, 8
		obj.Status.LastHeartbeatTime = metav1.Now()
		if _, err := gns.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("agent updates its GpuNodeStatus status: %v", err)
		}
		patch := []byte(`{"metadata":{"labels":{"` + apiv1.LabelGPUCount + `":"8"}}}`)
		if _, err := agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("agent labels its node: %v", err)
		}
		if _, err := agent.CoordinationV1().Leases(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode}); err != nil {
			t.Errorf("agent lists the GPU leases: %v", err)
		}
		err = agent.CoreV1().Nodes().Delete(ctx, e.gpuNode, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		wantForbidden(t, "agent deletes a node", err)
		_, err = agent.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		wantForbidden(t, "agent lists secrets in kube-system", err)

		// RBAC lets agents patch nodes and create leases; the chart's ValidatingAdmissionPolicy
		// narrows that to the gpu.scheduling/ labels of the agent's own node and to its own
		// node's liveness lease.
		const policy = agentSA + "-node-restriction"
		dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
		dryCreate := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		live := func(name string, labels map[string]string) *coordinationv1.Lease {
			l := lease(name)
			l.Labels = labels
			l.Spec.HolderIdentity = ptr.To(e.gpuNode) // what agent/liveness writes
			return l
		}
		liveLabel := map[string]string{apiv1.LabelAgentLiveness: "gpu-scheduler"}
		leases := agent.CoordinationV1().Leases(releaseNamespace)
		if _, err := leases.Create(ctx, live("gpu-"+e.gpuNode+"-agent", liveLabel), dryCreate); err != nil {
			t.Errorf("agent creates its liveness lease: %v", err)
		}
		_, err = leases.Create(ctx, lease("gpu-"+e.gpuNode+"-0"), dryCreate)
		wantDeniedBy(t, "agent creates a GPU lease", err, policy)
		_, err = leases.Create(ctx, live("gpu-"+cluster.NodeName("system", 0)+"-agent", liveLabel), dryCreate)
		wantDeniedBy(t, "agent creates another node's liveness lease", err, policy)
		_, err = leases.Create(ctx, live("gpu-"+e.gpuNode+"-agent", map[string]string{apiv1.LabelAgentLiveness: "x", apiv1.LabelLeaseNode: e.gpuNode}), dryCreate)
		wantDeniedBy(t, "agent creates its liveness lease labelled as a GPU lease", err, policy)
		other := cluster.NodeName("system", 0)
		_, err = agent.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType, patch, dry)
		wantDeniedBy(t, "agent labels another node", err, policy)
		_, err = agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`), dry)
		wantDeniedBy(t, "agent sets a label outside gpu.scheduling/ on its node", err, policy)
		_, err = agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), dry)
		wantDeniedBy(t, "agent cordons its node", err, policy)
		// nvidia.com/gpu.clique: the agent sets it where none is, and changes or removes only
		// the value it recorded as its own; a value NVIDIA's labeller set is not its to touch.
		setClique := []byte(`{"metadata":{"labels":{"` + apiv1.LabelGPUClique + `":"fabric.1"},"annotations":{"` + status.AnnotationClique + `":"fabric.1"}}}`)
		if _, err := agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, setClique, dry); err != nil {
			t.Errorf("agent sets the clique label where none is: %v", err)
		}
		gfd := []byte(`{"metadata":{"labels":{"` + apiv1.LabelGPUClique + `":"gfd.7"}}}`)
		if _, err := e.kube.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, gfd, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, setClique, dry)
		wantDeniedBy(t, "agent overwrites a clique label someone else set", err, policy)
		removeClique := []byte(`{"metadata":{"labels":{"` + apiv1.LabelGPUClique + `":null}}}`)
		_, err = agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, removeClique, dry)
		wantDeniedBy(t, "agent removes a clique label someone else set", err, policy)
		if _, err := agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, patch, dry); err != nil {
			t.Errorf("agent labels its node beside someone else's clique label: %v", err)
		}
		// As the agent left it: its own value, recorded.
		if _, err := e.kube.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, setClique, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := agent.CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+apiv1.LabelGPUClique+`":null},"annotations":{"`+status.AnnotationClique+`":null}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("agent removes the clique label it set: %v", err)
		}
		_, err = gns.Create(ctx, &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: other}, Spec: apiv1.GpuNodeStatusSpec{NodeName: other}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		wantDeniedBy(t, "agent creates another node's GpuNodeStatus", err, policy)
		// The scheduler files a GpuNodeStatus under spec.nodeName and judges liveness by the
		// liveness lease's holderIdentity: the agent may not name another node there either.
		_, err = gns.Create(ctx, &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: e.gpuNode}, Spec: apiv1.GpuNodeStatusSpec{NodeName: other}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		wantDeniedBy(t, "agent creates its GpuNodeStatus with another node's spec.nodeName", err, policy)
		mine, err := gns.Get(ctx, e.gpuNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mine.Spec.NodeName = other
		_, err = gns.Update(ctx, mine, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantDeniedBy(t, "agent moves its GpuNodeStatus to another node's spec.nodeName", err, policy)
		foreignHolder := live("gpu-"+e.gpuNode+"-agent", liveLabel)
		foreignHolder.Spec.HolderIdentity = ptr.To(other)
		_, err = leases.Create(ctx, foreignHolder, dryCreate)
		wantDeniedBy(t, "agent creates its liveness lease held by another node", err, policy)
		if _, err := leases.Create(ctx, live("gpu-"+e.gpuNode+"-agent", liveLabel), metav1.CreateOptions{}); err != nil {
			t.Fatalf("agent creates its liveness lease: %v", err)
		}
		mineLease, err := leases.Get(ctx, "gpu-"+e.gpuNode+"-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mineLease.Spec.HolderIdentity = ptr.To(other)
		_, err = leases.Update(ctx, mineLease, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantDeniedBy(t, "agent renews its liveness lease as another node", err, policy)
		// The real agent creates its own lease later in this test.
		if err := e.kube.CoordinationV1().Leases(releaseNamespace).Delete(ctx, mineLease.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = kubernetes.NewForConfigOrDie(unboundAgentCfg).CoreV1().Nodes().Patch(ctx, e.gpuNode, types.MergePatchType, patch, dry)
		wantDeniedBy(t, "agent token bound to no pod labels a node", err, policy)
	})

	t.Run("webhook", func(t *testing.T) {
		_, err := webhookClient.CoreV1().Pods(userNS).List(ctx, metav1.ListOptions{})
		wantForbidden(t, "webhook lists pods", err)
		// Its certificate rotator reads the release namespace's Secrets and writes its own only.
		_, err = webhookClient.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		wantForbidden(t, "webhook lists secrets in kube-system", err)
		release, err := e.kube.CoreV1().Secrets(releaseNamespace).Get(ctx, "sh.helm.release.v1."+releaseName+".v1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = webhookClient.CoreV1().Secrets(releaseNamespace).Update(ctx, release, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantForbidden(t, "webhook updates the helm release Secret", err)
		other, err := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, other.Name, metav1.DeleteOptions{})
		}()
		_, err = webhookClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, other, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantForbidden(t, "webhook updates another release's webhook configuration", err)
	})

	t.Run("scheduler", func(t *testing.T) {
		err := sched.CoreV1().Nodes().Delete(ctx, e.gpuNode, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		wantForbidden(t, "scheduler deletes a node", err)
		_, err = sched.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		wantForbidden(t, "scheduler lists secrets in kube-system", err)
		for _, ns := range []string{"default", "kube-system", "kube-node-lease"} {
			_, err = sched.CoordinationV1().Leases(ns).Create(ctx, lease("gpu-"+e.gpuNode+"-0"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			wantForbidden(t, "scheduler creates a lease in "+ns, err)
		}
	})

	// The whole path with the real binaries: the webhook (the chart's arguments) admits the GPU
	// pod, the gpu-scheduler (the chart's configuration, the scheduler's token) takes the GPU
	// lease in the release namespace and binds the pod with the allocation annotations, which
	// the webhook lets through because the scheduler's identity is the one the chart names.
	t.Run("schedule a GPU pod", func(t *testing.T) {
		restore := routeWebhooksToLocal(t, ctx, e)
		defer restore()
		proc := startScheduler(t, ctx, e, schedKubeconfig)

		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNS}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		claim := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: "two-gpus", Namespace: userNS},
			Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2, Policy: apiv1.PolicyContiguous, Exclusivity: apiv1.Exclusive}}}
		if _, err := e.gpu.GpuV1().GpuClaims(userNS).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "cuda-job", Namespace: userNS, Annotations: map[string]string{apiv1.AnnotationClaim: "two-gpus"}},
			Spec: corev1.PodSpec{SchedulerName: apiv1.SchedulerName, Containers: []corev1.Container{{Name: "main", Image: "cuda"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		}
		created, err := e.kube.CoreV1().Pods(userNS).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating the GPU pod through the webhook: %v", err)
		}
		// The device-plugin mode, the chart's default: the webhook asks for the claim's GPUs
		// as the agents' resource, which the kubelet hands over; no variables.
		if q := created.Spec.Containers[0].Resources.Limits[gpuResource]; q.Value() != 2 || hasEnv(created, "CUDA_VISIBLE_DEVICES") {
			t.Errorf("the mutating webhook set %s limit %s and variables %+v; want 2 and no CUDA_VISIBLE_DEVICES", gpuResource, q.String(), created.Spec.Containers[0].Env)
		}
		var bound *corev1.Pod
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := e.kube.CoreV1().Pods(userNS).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			bound = p
			return p.Spec.NodeName != "" && p.Annotations[apiv1.AnnotationAllocated] != "", nil
		})
		if err != nil {
			t.Fatalf("the pod was not bound with an allocation: %v\nscheduler log:\n%s", err, proc.LogTail(40))
		}
		t.Logf("bound to %s with %s=%s", bound.Spec.NodeName, apiv1.AnnotationAllocated, bound.Annotations[apiv1.AnnotationAllocated])
		leases, err := e.kube.CoordinationV1().Leases(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
		if err != nil {
			t.Fatal(err)
		}
		if len(leases.Items) != 2 {
			t.Errorf("%d GPU leases in %s, want 2", len(leases.Items), releaseNamespace)
		}

		// A user who may edit pods cannot write the allocation herself.
		alice := e.c.RESTConfig()
		alice.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:authenticated"}}
		if _, err := e.kube.RbacV1().RoleBindings(userNS).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		forged := pod.DeepCopy()
		forged.Name = "forged"
		forged.Annotations[apiv1.AnnotationAllocated] = e.gpuNode + ":4,5"
		// The apiserver's RBAC cache learns of the new RoleBinding a moment later; until then
		// alice is refused by RBAC, which is not what this checks.
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err = kubernetes.NewForConfigOrDie(alice).CoreV1().Pods(userNS).Create(ctx, forged, metav1.CreateOptions{})
			return err == nil || !strings.Contains(err.Error(), `User "alice" cannot create resource`), nil
		})
		if err == nil || !strings.Contains(err.Error(), "allocation-guard.gpu.scheduling") {
			t.Errorf("alice creating a pod with %s: got %v, want the allocation guard's denial", apiv1.AnnotationAllocated, err)
		}

		// The scheduler, with exactly the chart's rules, was never refused anything.
		if err := proc.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
		log, err := os.ReadFile(proc.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "forbidden") {
				t.Errorf("the scheduler was refused: %s", line)
			}
		}
	})

	// The agent binary with its pod-bound token and the DaemonSet's arguments. This machine has
	// no NVML, so it reports its node's GPUs as Unknown: what matters here is that it reads the
	// node and the leases, writes its GpuNodeStatus and renews its liveness lease without being
	// refused anything.
	t.Run("agent binary", func(t *testing.T) {
		before, err := e.gpu.GpuV1().GpuNodeStatuses().Get(ctx, e.gpuNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		proc := startAgent(t, ctx, e, agentKubeconfig)
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if !proc.Running() {
				return false, fmt.Errorf("gpu-agent exited")
			}
			st, err := e.gpu.GpuV1().GpuNodeStatuses().Get(ctx, e.gpuNode, metav1.GetOptions{})
			return err == nil && st.ResourceVersion != before.ResourceVersion, err
		})
		if err != nil {
			t.Fatalf("gpu-agent did not write GpuNodeStatus %s: %v\n%s", e.gpuNode, err, proc.LogTail(30))
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := e.kube.CoordinationV1().Leases(releaseNamespace).Get(ctx, "gpu-"+e.gpuNode+"-agent", metav1.GetOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("gpu-agent did not create its liveness lease: %v\n%s", err, proc.LogTail(30))
		}
		// The node's capacity shows nvidia.com/gpu, another GPU device plugin's: the agent
		// does not serve its own and says so on the Node.
		var refused string
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := e.kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + e.gpuNode + ",reason=GPUDevicePluginRefused"})
			if err != nil || len(evs.Items) == 0 {
				return false, err
			}
			refused = evs.Items[0].Message
			return true, nil
		})
		if err != nil {
			t.Errorf("gpu-agent left no GPUDevicePluginRefused Event on node %s beside nvidia.com/gpu: %v\n%s", e.gpuNode, err, proc.LogTail(30))
		} else if !strings.Contains(refused, "nvidia.com/gpu: 8") {
			t.Errorf("the Event does not name the other plugin's resource: %s", refused)
		}
		t.Logf("agent log:\n%s", proc.LogTail(20))
		if err := proc.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
		log, err := os.ReadFile(proc.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("the agent was refused: %s", line)
			}
		}
	})
}

// checkController runs bin/gpu-controller with the Deployment's arguments and the controller
// ServiceAccount's token only: it takes its leader lease, runs a GpuWorkload (pod, pod-owned
// claim, status, finalizer) and cleans it up on delete, without being refused anything.
func checkController(t *testing.T, ctx context.Context, e *installEnv) {
	_, kubeconfig := tokenConfig(t, ctx, e, controlSA, nil)
	d, err := e.kube.AppsV1().Deployments(releaseNamespace).Get(ctx, controlSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bin, err := launch.Binary(ctx, "gpu-controller")
	if err != nil {
		t.Fatal(err)
	}
	// The workload's pods go through the chart's webhooks, served from this machine.
	restore := routeWebhooksToLocal(t, ctx, e)
	defer restore()
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		// The ports are the pod's own; here they must be free ones on loopback.
		if strings.HasPrefix(a, "--metrics-bind-address=") || strings.HasPrefix(a, "--health-probe-bind-address=") {
			continue
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0")
	proc, err := e.c.StartProcess("gpu-controller-chart", bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(5 * time.Second) })
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gw := &apiv1.GpuWorkload{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-gw", Namespace: userNS},
		Spec: apiv1.GpuWorkloadSpec{
			Claim:    apiv1.WorkloadClaim{Spec: &apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/cuda:fake"}}}},
		},
	}
	if _, err := e.gpu.GpuV1().GpuWorkloads(userNS).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if !proc.Running() {
			return false, fmt.Errorf("gpu-controller exited")
		}
		got, err := e.gpu.GpuV1().GpuWorkloads(userNS).Get(ctx, gw.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, claimErr := e.gpu.GpuV1().GpuClaims(userNS).Get(ctx, "chart-gw-0-0", metav1.GetOptions{})
		return len(got.Finalizers) == 1 && len(got.Status.Replicas) == 1 && got.Status.Replicas[0].Pod == "chart-gw-0-0" && claimErr == nil, nil
	})
	if err != nil {
		t.Fatalf("gpu-controller did not run GpuWorkload %s/%s: %v\n%s", userNS, gw.Name, err, proc.LogTail(40))
	}
	if err := e.gpu.GpuV1().GpuWorkloads(userNS).Delete(ctx, gw.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.gpu.GpuV1().GpuWorkloads(userNS).Get(ctx, gw.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("GpuWorkload %s/%s not cleaned up and released: %v\n%s", userNS, gw.Name, err, proc.LogTail(40))
	}
	l, err := e.kube.CoordinationV1().Leases(releaseNamespace).Get(ctx, "gpu-controller.gpu.scheduling", metav1.GetOptions{})
	if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		t.Errorf("leader lease %s/gpu-controller.gpu.scheduling: %v", releaseNamespace, err)
	}
	if err := proc.Stop(10 * time.Second); err != nil {
		t.Error(err)
	}
	log, err := os.ReadFile(proc.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the controller was refused: %s", line)
		}
	}
}

// startAgent runs bin/gpu-agent with the DaemonSet's arguments, NODE_NAME as the Downward API
// gives it, and a kubeconfig holding the agent's pod-bound token.
func startAgent(t *testing.T, ctx context.Context, e *installEnv, kubeconfig string) *cluster.Process {
	t.Helper()
	bin, err := launch.Binary(ctx, "gpu-agent")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := e.kube.AppsV1().DaemonSets(releaseNamespace).Get(ctx, agentSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig=" + kubeconfig}
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		a = strings.ReplaceAll(a, "$(NODE_NAME)", e.gpuNode)
		// The pod's host paths; here directories of the test's own, never this machine's kubelet.
		if strings.HasPrefix(a, "--device-plugin-dir=") {
			a = "--device-plugin-dir=" + t.TempDir()
		}
		if strings.HasPrefix(a, "--cdi-dir=") {
			a = "--cdi-dir=" + t.TempDir()
		}
		if strings.HasPrefix(a, "--listen-address=") {
			a = "--listen-address=127.0.0.1:" + strconv.Itoa(port)
		}
		if strings.HasPrefix(a, "--metrics-bind-address=") {
			a = "--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort)
		}
		args = append(args, a)
	}
	p, err := e.c.StartProcess("gpu-agent-chart", bin, args, []string{"NODE_NAME=" + e.gpuNode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	checkMetricsAuth(t, ctx, e, "gpu-agent", "https://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics")
	return p
}

func hasEnv(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return true
			}
		}
	}
	return false
}

// gpuResource is the chart's default devicePlugin.resourceName.
const gpuResource corev1.ResourceName = "gpu.scheduling/gpu"

func lease(name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("test")}}
}

// startScheduler runs bin/gpu-scheduler with the chart's ConfigMap, authenticating with the
// scheduler ServiceAccount's token only, and waits until it holds the leader-election lease.
func startScheduler(t *testing.T, ctx context.Context, e *installEnv, kubeconfig string) *cluster.Process {
	t.Helper()
	bin, err := launch.Binary(ctx, "gpu-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	cm, err := e.kube.CoreV1().ConfigMaps(releaseNamespace).Get(ctx, releaseName+"-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["scheduler-config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	// In a pod the scheduler finds the API from its mounted token; here the same token comes
	// in a kubeconfig. Nothing else changes.
	cfg["clientConnection"].(map[string]any)["kubeconfig"] = kubeconfig
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "scheduler-config.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--config=" + path, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--cert-dir=" + filepath.Join(dir, "certs"), "--v=2"}
	p, err := e.c.StartProcess("gpu-scheduler-chart", bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("gpu-scheduler exited")
		}
		l, err := e.kube.CoordinationV1().Leases(releaseNamespace).Get(ctx, releaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "", err
	})
	if err != nil {
		t.Fatalf("gpu-scheduler did not take the leader lease %s/%s: %v\n%s", releaseNamespace, releaseName, err, p.LogTail(40))
	}
	return p
}

// routeWebhooksToLocal points both webhook configurations at a gpu-webhook on this machine
// (the harness has no Service network), keeping every rule, condition and selector of the
// chart, and returns a function that puts the chart's clientConfig back.
func routeWebhooksToLocal(t *testing.T, ctx context.Context, e *installEnv) func() {
	t.Helper()
	certDir, caPEM := localServingCert(t)
	addr := startWebhook(t, ctx, e, certDir, false)
	mwcs := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	vwcs := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	mwc, err := mwcs.Get(ctx, webhookSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vwc, err := vwcs.Get(ctx, webhookSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	origM, origV := mwc.DeepCopy(), vwc.DeepCopy()
	local := func(cc *admissionregistrationv1.WebhookClientConfig) {
		path := *cc.Service.Path
		cc.Service, cc.URL, cc.CABundle = nil, ptr.To("https://"+addr+path), caPEM
	}
	for i := range mwc.Webhooks {
		local(&mwc.Webhooks[i].ClientConfig)
	}
	for i := range vwc.Webhooks {
		local(&vwc.Webhooks[i].ClientConfig)
	}
	if _, err := mwcs.Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := vwcs.Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() {
		for i := range mwc.Webhooks {
			m, err := mwcs.Get(ctx, webhookSvc, metav1.GetOptions{})
			if err == nil {
				m.Webhooks[i].ClientConfig = origM.Webhooks[i].ClientConfig
				_, err = mwcs.Update(ctx, m, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Errorf("restoring the MutatingWebhookConfiguration: %v", err)
			}
		}
		for i := range vwc.Webhooks {
			v, err := vwcs.Get(ctx, webhookSvc, metav1.GetOptions{})
			if err == nil {
				v.Webhooks[i].ClientConfig = origV.Webhooks[i].ClientConfig
				_, err = vwcs.Update(ctx, v, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Errorf("restoring the ValidatingWebhookConfiguration: %v", err)
			}
		}
	}
}

// localServingCert writes a self-signed certificate for 127.0.0.1 into a directory and returns
// it with the certificate's PEM (its own CA bundle).
func localServingCert(t *testing.T) (string, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpu-webhook-local"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, certPEM
}

// An upgrade that changes a value keeps the CA and serving certificate (no rotation, no
// restart of the webhook, no window where the CA bundle and the Secret disagree).
func checkUpgrade(t *testing.T, ctx context.Context, e *installEnv) {
	out, err := runHelm(t, e.helmEnv, append([]string{"upgrade", releaseName, chartDir(t), "--namespace", releaseNamespace, "--wait", "--timeout", "3m",
		"--set", "webhook.timeoutSeconds=4", "--set", "scheduler.pluginArgs.nodeStrategy=spread"}, hookCompletes...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	secret, err := e.kube.CoreV1().Secrets(releaseNamespace).Get(ctx, webhookSvc+"-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if string(secret.Data[k]) != string(e.secretData[k]) {
			t.Errorf("helm upgrade changed %s of Secret %s", k, secret.Name)
		}
	}
	vwc, err := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, webhookSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mwc, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing rotates during the upgrade (no webhook runs here): the bundles the webhook wrote
	// must survive helm's three-way merge.
	if string(vwc.Webhooks[0].ClientConfig.CABundle) != string(e.secretData["ca.crt"]) || string(mwc.Webhooks[0].ClientConfig.CABundle) != string(e.secretData["ca.crt"]) {
		t.Error("after the upgrade the CA bundles are not the kept CA")
	}
	if got := ptr.Deref(vwc.Webhooks[0].TimeoutSeconds, 0); got != 4 {
		t.Errorf("timeoutSeconds = %d after the upgrade, want 4", got)
	}
	cm, err := e.kube.CoreV1().ConfigMaps(releaseNamespace).Get(ctx, releaseName+"-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data["scheduler-config.yaml"], "nodeStrategy: spread") {
		t.Errorf("the upgrade did not change the scheduler configuration:\n%s", cm.Data["scheduler-config.yaml"])
	}
}

// Uninstall removes every object of the release, and leaves the CRDs (helm never deletes
// CRDs from crds/), the users' GpuClaims and the GPU leases the scheduler wrote.
func checkUninstall(t *testing.T, ctx context.Context, e *installEnv) {
	out, err := runHelm(t, e.helmEnv, "uninstall", releaseName, "--namespace", releaseNamespace, "--wait", "--timeout", "2m")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, o := range e.manifest {
		_, err := e.resource(t, o).Get(ctx, o.GetName(), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s %s still there after helm uninstall (err %v)", o.GetKind(), o.GetName(), err)
		}
	}
	if _, err := e.gpu.GpuV1().GpuClaims(userNS).Get(ctx, "two-gpus", metav1.GetOptions{}); err != nil {
		t.Errorf("the user's GpuClaim after uninstall: %v (the CRDs must stay)", err)
	}
	leases, err := e.kube.CoordinationV1().Leases(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after uninstall: CRDs and claims kept, %d GPU leases left in %s (docs/install.md#uninstall)", len(leases.Items), releaseNamespace)
}

// checkPriority asks the apiserver how API Priority and Fairness classifies a request of each
// component's ServiceAccount: every response names the FlowSchema and priority level that
// admitted it (X-Kubernetes-PF-*-UID). The scheduler and gpu-controller must go through the
// chart's FlowSchema to workload-high, as kube-scheduler does; the agents stay with every other
// service account at workload-low.
func checkPriority(t *testing.T, ctx context.Context, e *installEnv) {
	fs, err := e.kube.FlowcontrolV1().FlowSchemas().Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's FlowSchema: %v", err)
	}
	level := map[types.UID]string{}
	pls, err := e.kube.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range pls.Items {
		level[pl.UID] = pl.Name
	}
	for _, c := range []struct {
		sa, wantSchema, wantLevel string
	}{
		{schedulerSA, releaseName, "workload-high"},
		{controlSA, releaseName, "workload-high"},
		{agentSA, "service-accounts", "workload-low"},
	} {
		cfg := rest.CopyConfig(e.c.RESTConfig())
		cfg.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + releaseNamespace + ":" + c.sa,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"},
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/apis/coordination.k8s.io/v1/namespaces/"+releaseNamespace+"/leases?limit=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.sa, err)
		}
		_ = resp.Body.Close()
		schemaUID := types.UID(resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"))
		gotLevel := level[types.UID(resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"))]
		gotSchema := "another FlowSchema"
		if schemaUID == fs.UID {
			gotSchema = releaseName
		} else if other, err := e.kube.FlowcontrolV1().FlowSchemas().Get(ctx, c.wantSchema, metav1.GetOptions{}); err == nil && other.UID == schemaUID {
			gotSchema = other.Name
		}
		if gotSchema != c.wantSchema || gotLevel != c.wantLevel {
			t.Errorf("a request of ServiceAccount %s (HTTP %d) went through FlowSchema %s to priority level %q; want %s and %s",
				c.sa, resp.StatusCode, gotSchema, gotLevel, c.wantSchema, c.wantLevel)
		}
	}
}
