//go:build integration

package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/fieldpath"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest"
)

const (
	testNamespace    = "gpu-webhook-itest"
	webhookNamespace = "gpu-webhook-system"
	schedulerUser    = webhook.DefaultSchedulerUser
	schedulerGroup   = "gpu-itest-schedulers"
	userName         = "alice"
	quotaNamespace   = "gpu-quota-itest"
)

// warnings collects the admission warnings the apiserver passes back to a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

func clientAs(t *testing.T, base *rest.Config, user string, w rest.WarningHandler, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(base)
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	}
	if w != nil {
		cfg.WarningHandler = w
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %q: %v", user, err)
	}
	return c
}

func gpuPod(name string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{gpuv1.AnnotationClaim: "two-gpus"}},
		Spec:       corev1.PodSpec{SchedulerName: gpuv1.SchedulerName, Containers: containers},
	}
}

func container(name string, env ...corev1.EnvVar) corev1.Container {
	return corev1.Container{Name: name, Image: "registry.example/cuda:12", Env: env}
}

// resolveEnv evaluates a container's variables against the stored pod the way the kubelet does
// for plain values and Downward API field references.
func resolveEnv(t *testing.T, pod *corev1.Pod, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldpath.ExtractFieldPathAsString(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				t.Fatalf("container %s: resolve %s (%s): %v", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath, err)
			}
			out[e.Name] = v
		}
	}
	return out
}

func TestWebhookAgainstAPIServer(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	c, err := cluster.Start(ctx, cluster.Config{Name: "webhook-itest"})
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	restCfg := c.RESTConfig()
	admin := clientAs(t, restCfg, "", nil)

	// The webhook, in-process, on a loopback port, with a certificate from a throw-away CA.
	ca, err := webhooktest.NewCA("gpu-webhook-itest-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue("gpu-webhook", webhooktest.Loopback.IPs, webhooktest.Loopback.DNSNames)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := pair.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := webhook.DefaultConfig()
	cfg.CertFile, cfg.KeyFile = certFile, keyFile
	cfg.Scheduler = webhook.SchedulerIdentity{Users: []string{schedulerUser}, Groups: []string{schedulerGroup}}
	srv, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, ln) }()
	serverStopped := false
	stop := func() {
		if serverStopped {
			return
		}
		serverStopped = true
		stopServer()
		if err := <-served; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	}
	t.Cleanup(stop)

	// Namespaces, and RBAC so that the impersonated user and scheduler may do what the test tries.
	for _, ns := range []string{testNamespace, webhookNamespace} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-webhook-itest"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/binding"}, Verbs: []string{"create"}},
			// The older namespaced bindings resource: the same apiserver code as pods/binding.
			{APIGroups: []string{""}, Resources: []string{"bindings"}, Verbs: []string{"create"}},
		},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create cluster role: %v", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-webhook-itest"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userName},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: schedulerUser},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: schedulerGroup},
		},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create cluster role binding: %v", err)
	}

	// The node the test binds to. Without it the pod garbage collector would delete the pods
	// bound to it as orphans.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-0"}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}

	// Register the webhooks with the real CA bundle and the loopback URL, and the scheduler
	// identity the webhook runs with (its Bindings are not sent to the webhook).
	mwc, vwc, err := manifests.Render(manifests.Options{Namespace: webhookNamespace, CABundle: ca.PEM, URL: "https://" + ln.Addr().String(), Scheduler: cfg.Scheduler,
		ExcludeNamespaces: []string{quotaNamespace}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register mutating webhook: %v", err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register validating webhook: %v", err)
	}
	// The apiserver picks configurations up from an informer: wait until a dry-run shows both
	// webhooks in effect.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe := gpuPod("probe", container("c"))
		got, err := admin.CoreV1().Pods(testNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || len(got.Spec.Containers[0].Env) == 0 {
			return false, nil
		}
		probe.Annotations[gpuv1.AnnotationGPUIDs] = "0"
		_, err = admin.CoreV1().Pods(testNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Fatalf("the webhooks never took effect: %v", err)
	}
	logger.Info("Webhooks registered", "url", "https://"+ln.Addr().String())

	userWarnings := &warnings{}
	user := clientAs(t, restCfg, userName, userWarnings)
	scheduler := clientAs(t, restCfg, schedulerUser, nil)
	schedulerMember := clientAs(t, restCfg, "kube-scheduler-itest", nil, schedulerGroup)
	pods := user.CoreV1().Pods(testNamespace)

	// legacyBind posts a Binding to the older namespaced bindings resource
	// (POST /api/v1/namespaces/{ns}/bindings) rather than to pods/binding: the apiserver runs
	// the same binding code and copies the Binding's annotations onto the pod.
	legacyBind := func(c kubernetes.Interface, b *corev1.Binding) error {
		return c.CoreV1().RESTClient().Post().Namespace(testNamespace).Resource("bindings").Body(b).Do(ctx).Error()
	}

	wantEnv := webhook.EnvModeCUDA.Env()
	denied := func(t *testing.T, err error, message string) {
		t.Helper()
		want := fmt.Sprintf("admission webhook %q denied the request: %s", manifests.ValidatingWebhookName, message)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("got error %v\nwant Forbidden with %q", err, want)
		}
	}

	t.Run("create mutates every container and warns about a replaced value", func(t *testing.T) {
		pod := gpuPod("train", container("main", corev1.EnvVar{Name: "EPOCHS", Value: "3"}), container("sidecar", corev1.EnvVar{Name: webhook.EnvCUDAVisibleDevices, Value: "0,1,2,3,4,5,6,7"}))
		pod.Spec.InitContainers = []corev1.Container{container("fetch")}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		stored, err := admin.CoreV1().Pods(testNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range append(stored.Spec.InitContainers, stored.Spec.Containers...) {
			for _, w := range wantEnv {
				n := 0
				for _, e := range c.Env {
					if e.Name == w.Name {
						n++
						if e.Value != w.Value || (e.ValueFrom == nil) != (w.ValueFrom == nil) || (e.ValueFrom != nil && *e.ValueFrom.FieldRef != *w.ValueFrom.FieldRef) {
							t.Errorf("container %s: stored %s = %+v, want %+v", c.Name, w.Name, e, w)
						}
					}
				}
				if n != 1 {
					t.Errorf("container %s: stored env has %s %d times: %+v", c.Name, w.Name, n, c.Env)
				}
			}
		}
		if got := stored.Spec.Containers[0].Env[len(stored.Spec.Containers[0].Env)-1]; got.Name != "EPOCHS" || got.Value != "3" {
			t.Errorf("user variable lost: %+v", stored.Spec.Containers[0].Env)
		}
		ws := userWarnings.take()
		want := "spec.containers[1].env[0]: CUDA_VISIBLE_DEVICES from the pod was replaced: the gpu-scheduler sets it to the allocated GPUs"
		if len(ws) != 1 || ws[0] != want {
			t.Errorf("warnings %q, want [%q]", ws, want)
		}
		// Not bound yet: the reference resolves to "" (no GPU visible).
		if got := resolveEnv(t, stored, stored.Spec.Containers[0])[webhook.EnvCUDAVisibleDevices]; got != "" {
			t.Errorf("unbound pod resolves CUDA_VISIBLE_DEVICES to %q, want empty", got)
		}
	})

	t.Run("pods that ask for no GPU, or live in the webhook's namespace, are untouched", func(t *testing.T) {
		plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("nginx")}}}
		got, err := pods.Create(ctx, plain, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.Containers[0].Env) != 0 {
			t.Errorf("plain pod was mutated: %+v", got.Spec.Containers[0].Env)
		}
		own, err := admin.CoreV1().Pods(webhookNamespace).Create(ctx, gpuPod("own", container("c")), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(own.Spec.Containers[0].Env) != 0 {
			t.Errorf("pod in the webhook's own namespace was mutated: %+v", own.Spec.Containers[0].Env)
		}
	})

	t.Run("the scheduler binds with the allocation and the reference resolves to it", func(t *testing.T) {
		if _, err := pods.Create(ctx, gpuPod("bound", container("c")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "bound", Annotations: map[string]string{
				gpuv1.AnnotationAllocated: "gpu-node-0:2,3",
				gpuv1.AnnotationGPUIDs:    "2,3",
			}},
			Target: corev1.ObjectReference{Kind: "Node", Name: "gpu-node-0"},
		}
		if err := scheduler.CoreV1().Pods(testNamespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bind as the scheduler: %v", err)
		}
		stored, err := admin.CoreV1().Pods(testNamespace).Get(ctx, "bound", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stored.Spec.NodeName != "gpu-node-0" {
			t.Errorf("node %q", stored.Spec.NodeName)
		}
		env := resolveEnv(t, stored, stored.Spec.Containers[0])
		if env[webhook.EnvCUDAVisibleDevices] != "2,3" || env[webhook.EnvCUDADeviceOrder] != webhook.CUDADeviceOrderPCIBus {
			t.Errorf("resolved env %v, want CUDA_VISIBLE_DEVICES=2,3 CUDA_DEVICE_ORDER=PCI_BUS_ID", env)
		}

		// The scheduler may change it later; a user may change other annotations.
		stored.Annotations[gpuv1.AnnotationAllocated], stored.Annotations[gpuv1.AnnotationGPUIDs] = "gpu-node-0:3", "3"
		if _, err := scheduler.CoreV1().Pods(testNamespace).Update(ctx, stored, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("scheduler update: %v", err)
		}
		if _, err := pods.Patch(ctx, "bound", types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"ml"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("user patch of another annotation: %v", err)
		}
	})

	t.Run("an ephemeral debug container gets the variables too", func(t *testing.T) {
		stored, err := admin.CoreV1().Pods(testNamespace).Get(ctx, "bound", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored.Spec.EphemeralContainers = append(stored.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "registry.example/cuda:12"},
		})
		got, err := admin.CoreV1().Pods(testNamespace).UpdateEphemeralContainers(ctx, "bound", stored, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("add ephemeral container: %v", err)
		}
		ec := got.Spec.EphemeralContainers[len(got.Spec.EphemeralContainers)-1]
		env := resolveEnv(t, got, corev1.Container{Name: ec.Name, Env: ec.Env})
		if env[webhook.EnvCUDAVisibleDevices] != "3" || env[webhook.EnvCUDADeviceOrder] != webhook.CUDADeviceOrderPCIBus {
			t.Errorf("ephemeral container env resolves to %v, want CUDA_VISIBLE_DEVICES=3", env)
		}
	})

	t.Run("forged allocations are refused", func(t *testing.T) {
		forged := gpuPod("forged", container("c"))
		forged.Annotations[gpuv1.AnnotationAllocated] = "gpu-node-0:0,1"
		forged.Annotations[gpuv1.AnnotationGPUIDs] = "0,1"
		_, err := pods.Create(ctx, forged, metav1.CreateOptions{})
		denied(t, err, "pod "+testNamespace+"/forged may not be created with annotations gpu.scheduling/allocated and gpu.scheduling/gpu-ids: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation gpu.scheduling/claim instead")
		_, err = scheduler.CoreV1().Pods(testNamespace).Create(ctx, forged, metav1.CreateOptions{})
		denied(t, err, "pod "+testNamespace+"/forged may not be created with annotations")

		_, err = pods.Patch(ctx, "bound", types.MergePatchType, []byte(`{"metadata":{"annotations":{"gpu.scheduling/gpu-ids":"0,1,2,3,4,5,6,7"}}}`), metav1.PatchOptions{})
		denied(t, err, `user "alice" may not set, change or remove annotation gpu.scheduling/gpu-ids on pod `+testNamespace+`/bound: only the gpu-scheduler writes the GPU allocation`)
		_, err = pods.Patch(ctx, "bound", types.MergePatchType, []byte(`{"metadata":{"annotations":{"gpu.scheduling/allocated":null}}}`), metav1.PatchOptions{})
		denied(t, err, `user "alice" may not set, change or remove annotation gpu.scheduling/allocated on pod `+testNamespace+`/bound`)
		_, err = pods.Patch(ctx, "bound", types.MergePatchType, []byte(`{"metadata":{"annotations":{"gpu.scheduling/gpu-ids":"0"}}}`), metav1.PatchOptions{}, "status")
		denied(t, err, `user "alice" may not set, change or remove annotation gpu.scheduling/gpu-ids on pod `+testNamespace+`/bound`)
		// The scheduler's own writes other than Bindings still reach the webhook: a pod created
		// with the allocation is refused from it too, and its updates are checked.
		_, err = schedulerMember.CoreV1().Pods(testNamespace).Create(ctx, forged, metav1.CreateOptions{})
		denied(t, err, "pod "+testNamespace+"/forged may not be created with annotations")
		_, err = scheduler.CoreV1().Pods(testNamespace).Patch(ctx, "bound", types.MergePatchType, []byte(`{"metadata":{"annotations":{"gpu.scheduling/gpu-ids":"7"}}}`), metav1.PatchOptions{})
		denied(t, err, `pod `+testNamespace+`/bound: annotation gpu.scheduling/gpu-ids="7" does not match annotation gpu.scheduling/allocated="gpu-node-0:3"`)

		if _, err := pods.Create(ctx, gpuPod("unbound", container("c")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "unbound", Annotations: map[string]string{gpuv1.AnnotationGPUIDs: "0,1"}},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "gpu-node-0"},
		}
		err = pods.Bind(ctx, b, metav1.CreateOptions{})
		denied(t, err, `user "alice" may not bind pod `+testNamespace+`/unbound with annotation gpu.scheduling/gpu-ids: only the gpu-scheduler writes the GPU allocation`)
		// The same Binding through the bindings resource gets the same answer.
		err = legacyBind(user, b)
		denied(t, err, `user "alice" may not bind pod `+testNamespace+`/unbound with annotation gpu.scheduling/gpu-ids: only the gpu-scheduler writes the GPU allocation`)

		stored, err := admin.CoreV1().Pods(testNamespace).Get(ctx, "bound", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := resolveEnv(t, stored, stored.Spec.Containers[0])[webhook.EnvCUDAVisibleDevices]; got != "3" {
			t.Errorf("after the refused writes the pod resolves CUDA_VISIBLE_DEVICES to %q, want the scheduler's 3", got)
		}
		unbound, err := admin.CoreV1().Pods(testNamespace).Get(ctx, "unbound", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if unbound.Spec.NodeName != "" || unbound.Annotations[gpuv1.AnnotationGPUIDs] != "" {
			t.Errorf("refused binding took effect: node %q annotations %v", unbound.Spec.NodeName, unbound.Annotations)
		}
		// A binding without the allocation is not the webhook's business.
		b.Annotations = nil
		if err := pods.Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Errorf("plain binding by a user: %v", err)
		}
	})

	t.Run("the scheduler binds with the allocation through the bindings resource", func(t *testing.T) {
		if _, err := pods.Create(ctx, gpuPod("legacy-bound", container("c")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy-bound", Annotations: map[string]string{
				gpuv1.AnnotationAllocated: "gpu-node-0:1", gpuv1.AnnotationGPUIDs: "1",
			}},
			Target: corev1.ObjectReference{Kind: "Node", Name: "gpu-node-0"},
		}
		if err := legacyBind(scheduler, b); err != nil {
			t.Fatalf("bind through bindings as the scheduler: %v", err)
		}
		stored, err := admin.CoreV1().Pods(testNamespace).Get(ctx, "legacy-bound", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stored.Spec.NodeName != "gpu-node-0" || stored.Annotations[gpuv1.AnnotationGPUIDs] != "1" {
			t.Errorf("node %q annotations %v after the scheduler's Binding", stored.Spec.NodeName, stored.Annotations)
		}
	})

	t.Run("with the device plugin's resource a ResourceQuota on GPUs counts claim pods", func(t *testing.T) {
		quotaWebhook(ctx, t, admin, cfg.Scheduler)
	})

	t.Run("with the webhook down only GPU pods and allocation writes are blocked", func(t *testing.T) {
		stop()
		plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2"}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("nginx")}}}
		if _, err := pods.Create(ctx, plain, metav1.CreateOptions{}); err != nil {
			t.Errorf("a pod asking for no GPU was blocked by the stopped webhook: %v", err)
		}
		if _, err := pods.Patch(ctx, "bound", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("a label change was blocked by the stopped webhook: %v", err)
		}
		_, err := pods.Create(ctx, gpuPod("train-2", container("c")), metav1.CreateOptions{})
		var status apierrors.APIStatus
		if err == nil || !errors.As(err, &status) || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Errorf("a GPU pod was admitted without the webhook (failurePolicy Fail): %v", err)
		}

		// The scheduler's Bindings are not sent to the webhook at all (the not-a-scheduler-binding
		// match condition), so they succeed with it down; a user's still need it.
		for i, name := range []string{"late-0", "late-1", "late-2", "late-3", "late-4"} {
			// Created without the mutating webhook: a pod that asks for no GPU by itself.
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("c")}}}
			if _, err := admin.CoreV1().Pods(testNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			b := &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
					gpuv1.AnnotationAllocated: fmt.Sprintf("gpu-node-0:%d", 4+i), gpuv1.AnnotationGPUIDs: strconv.Itoa(4 + i),
				}},
				Target: corev1.ObjectReference{Kind: "Node", Name: "gpu-node-0"},
			}
			switch i {
			case 0:
				if err := scheduler.CoreV1().Pods(testNamespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
					t.Errorf("the scheduler's Binding needed the stopped webhook: %v", err)
				}
			case 1:
				if err := schedulerMember.CoreV1().Pods(testNamespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
					t.Errorf("a Binding by a member of the scheduler group needed the stopped webhook: %v", err)
				}
			case 2:
				err := pods.Bind(ctx, b, metav1.CreateOptions{})
				if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
					t.Errorf("a user's Binding with the allocation was not sent to the (stopped) webhook: %v", err)
				}
				continue
			case 3:
				if err := legacyBind(scheduler, b); err != nil {
					t.Errorf("the scheduler's Binding through the bindings resource needed the stopped webhook: %v", err)
				}
			case 4:
				err := legacyBind(user, b)
				if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
					t.Errorf("a user's Binding with the allocation through the bindings resource was not sent to the (stopped) webhook: %v", err)
				}
				continue
			}
			stored, err := admin.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if stored.Spec.NodeName != "gpu-node-0" || stored.Annotations[gpuv1.AnnotationGPUIDs] != strconv.Itoa(4+i) {
				t.Errorf("pod %s: node %q annotations %v after the scheduler's Binding", name, stored.Spec.NodeName, stored.Annotations)
			}
		}
	})
}
