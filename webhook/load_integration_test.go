//go:build integration

package webhook_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest/run"
)

// startCluster starts a control plane with the CRDs installed.
func startCluster(ctx context.Context, t *testing.T, name string) *rest.Config {
	t.Helper()
	c, err := cluster.Start(ctx, cluster.Config{Name: name})
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	if err := c.InstallCRDs(ctx, filepath.Join("..", "charts", "gpu-scheduler", "crds")); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
	return c.RESTConfig()
}

// A Job-sized burst: 100 claim pods created at once through a webhook in the device-plugin mode,
// built as gpu-webhook builds it from a configuration without rate limits of its own (as
// in-cluster), are all admitted within the webhook timeout. With a live GET of the claim and of
// the namespace per pod at client-go's default 5 requests per second, most were refused.
func TestWebhookBurstOfGPUPods(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	restCfg := startCluster(ctx, t, "webhook-burst")
	admin := kubernetes.NewForConfigOrDie(restCfg)
	gpus := versioned.NewForConfigOrDie(restCfg)
	const ns = "burst"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &gpuv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: "two-gpus"}, Spec: gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{Count: 2}}}
	if _, err := gpus.GpuV1().GpuClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	inCluster := rest.CopyConfig(restCfg)
	inCluster.QPS, inCluster.Burst = 0, 0 // what rest.InClusterConfig gives
	reader, err := webhook.NewClusterReader(inCluster, webhook.ReaderOptions{Claims: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	cfg := webhook.DefaultConfig()
	cfg.EnvMode = webhook.EnvModeNone
	cfg.Resource = webhook.ResourceConfig{Name: "nvidia.com/gpu", Count: reader.Count, ForbidsPrivileged: reader.ForbidsPrivileged}
	url, caPEM := run.Webhook(ctx, t, cfg)
	mwc, _, err := manifests.Render(manifests.Options{Name: "burst", Namespace: "gpu-webhook-system", CABundle: caPEM, URL: url, Scheduler: cfg.Scheduler})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{gpuv1.AnnotationClaim: claim.Name}},
			Spec:       corev1.PodSpec{SchedulerName: gpuv1.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: "registry.example/cuda:12"}}},
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := admin.CoreV1().Pods(ns).Create(ctx, pod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(got.Spec.Containers[0].Resources.Limits) > 0, nil
	})
	if err != nil {
		t.Fatalf("the webhook never took effect: %v", err)
	}

	const n = 100
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
	)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := admin.CoreV1().Pods(ns).Create(ctx, pod(fmt.Sprintf("train-%d", i)), metav1.CreateOptions{})
			if err == nil && got.Spec.Containers[0].Resources.Limits.Name("nvidia.com/gpu", "").Value() != 2 {
				err = fmt.Errorf("limits %v, want nvidia.com/gpu 2", got.Spec.Containers[0].Resources.Limits)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d pods created at once were refused or not mutated, e.g. %s", len(errs), n, errs[0])
	}
	t.Logf("%d GPU pods admitted in %s", n, time.Since(start))
}

// Two releases side by side (docs/install.md#two-releases): each webhook guards its own
// scheduler's pods and names the other release as a sibling. Both schedulers bind their pods
// with the allocation; neither may bind the other's pods, and a user may bind neither.
func TestTwoReleasesBind(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	restCfg := startCluster(ctx, t, "webhook-two-releases")
	admin := kubernetes.NewForConfigOrDie(restCfg)
	const ns = "two-releases"
	for _, o := range []struct {
		create func() error
		what   string
	}{
		{func() error {
			_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		}, "namespace"},
		{func() error {
			_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
			return err
		}, "node"},
		{func() error {
			_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "binder"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/binding"}, Verbs: []string{"create", "get"}}}}, metav1.CreateOptions{})
			return err
		}, "cluster role"},
	} {
		if err := o.create(); err != nil {
			t.Fatalf("create %s: %v", o.what, err)
		}
	}
	type release struct{ name, user string }
	prod := release{"gpu-scheduler", "system:serviceaccount:gpu-scheduler:gpu-scheduler"}
	canary := release{"gpu-canary", "system:serviceaccount:gpu-canary:gpu-canary"}
	var subjects []rbacv1.Subject
	for _, u := range []string{prod.user, canary.user, userName} {
		subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "binder"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "binder"}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var configs []string
	for _, r := range []struct{ own, sibling release }{{prod, canary}, {canary, prod}} {
		reader, err := webhook.NewClusterReader(restCfg, webhook.ReaderOptions{SiblingSchedulerNames: []string{r.sibling.name}})
		if err != nil {
			t.Fatal(err)
		}
		if err := reader.Start(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		cfg := webhook.DefaultConfig()
		cfg.SchedulerName, cfg.Scheduler = r.own.name, webhook.SchedulerIdentity{Users: []string{r.own.user}}
		cfg.SiblingSchedulerNames, cfg.SiblingPod = []string{r.sibling.name}, reader.SiblingPod
		url, caPEM := run.Webhook(ctx, t, cfg)
		_, vwc, err := manifests.Render(manifests.Options{Name: r.own.name, Namespace: r.own.name, CABundle: caPEM, URL: url,
			SchedulerName: r.own.name, Scheduler: cfg.Scheduler})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		configs = append(configs, vwc.Name)
	}
	// Both guards in effect: a forged pod create is refused by both configurations' webhooks.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: map[string]string{gpuv1.AnnotationGPUIDs: "0"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		vwcs, lerr := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return lerr == nil && len(vwcs.Items) >= 2 && apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Fatalf("the guards never took effect (%v): %v", configs, err)
	}
	time.Sleep(2 * time.Second) // both configurations reach the apiserver's informer

	for _, r := range []release{prod, canary} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-of-" + r.name}, Spec: corev1.PodSpec{SchedulerName: r.name, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(as, pod string) error {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: map[string]string{gpuv1.AnnotationAllocated: "node-a:0", gpuv1.AnnotationGPUIDs: "0"}},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
		return clientAs(t, restCfg, as, nil).CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{})
	}
	// Refusals first: a refused Binding leaves the pod unbound for the rightful scheduler.
	for _, tc := range []struct{ as, pod, deniedBy string }{
		{userName, "pod-of-gpu-canary", "gpu-canary"},
		{userName, "pod-of-gpu-scheduler", "gpu-scheduler"},
		{canary.user, "pod-of-gpu-scheduler", "gpu-scheduler"},
		{prod.user, "pod-of-gpu-canary", "gpu-canary"},
	} {
		err := bind(tc.as, tc.pod)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not bind pod "+ns+"/"+tc.pod) {
			t.Errorf("%s binding %s: %v, want refused by the %s guard", tc.as, tc.pod, err, tc.deniedBy)
		}
	}
	for _, r := range []release{prod, canary} {
		if err := bind(r.user, "pod-of-"+r.name); err != nil {
			t.Errorf("the %s scheduler binding its own pod: %v", r.name, err)
		}
	}
}
