//go:build integration

package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest/run"
)

// quotaWebhook runs a second webhook in the device plugin's resource mode for quotaNamespace
// only, and shows that the apiserver's ResourceQuota admission, which runs after the mutating
// webhooks, counts the nvidia.com/gpu the webhook adds: with a quota of 4 GPUs the third pod
// of a 2-GPU claim is refused, and a pod without a claim is not counted.
func quotaWebhook(ctx context.Context, t *testing.T, admin kubernetes.Interface, scheduler webhook.SchedulerIdentity) {
	const res = corev1.ResourceName("nvidia.com/gpu")
	cfg := webhook.DefaultConfig()
	cfg.Scheduler, cfg.EnvMode = scheduler, webhook.EnvModeNone
	claims := map[string]int32{"two-gpus": 2}
	count := func(_ context.Context, pod *corev1.Pod) (int32, bool, error) {
		n, ok := claims[pod.Annotations[gpuv1.AnnotationClaim]]
		return n, ok, nil
	}
	// A Shared claim template's pods ask for one gpu-shared per GPU, as ClusterReader.Request says.
	shared := map[string]int32{"quarter": 1}
	cfg.Resource = webhook.ResourceConfig{Name: res, Count: count, Request: func(ctx context.Context, pod *corev1.Pod) (webhook.GPURequest, bool, error) {
		if n, ok := shared[pod.Annotations[gpuv1.AnnotationClaimTemplate]]; ok {
			return webhook.GPURequest{Resource: gpuv1.SharedResourceName, Count: n}, true, nil
		}
		n, ok, err := count(ctx, pod)
		return webhook.GPURequest{Count: n}, ok, err
	}}
	url, caPEM := run.Webhook(ctx, t, cfg)

	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: quotaNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mwc, _, err := manifests.Render(manifests.Options{Name: "gpu-quota-itest", Namespace: webhookNamespace, CABundle: caPEM,
		URL: url, Scheduler: scheduler, ExcludeNamespaces: []string{testNamespace}, JobResource: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.WithoutCancel(ctx), mwc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete %s: %v", mwc.Name, err)
		}
	}()
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gpus"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests." + res: resource.MustParse("4")}},
	}
	if _, err := admin.CoreV1().ResourceQuotas(quotaNamespace).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := admin.CoreV1().Pods(quotaNamespace)
	claimPod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{gpuv1.AnnotationClaim: "two-gpus"}},
			Spec:       corev1.PodSpec{SchedulerName: gpuv1.SchedulerName, Containers: []corev1.Container{container("main"), container("side")}},
		}
	}
	// The quota controller fills the quota's status, and the apiserver picks up the webhook
	// configuration: wait until a dry run shows the resource added.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := admin.CoreV1().ResourceQuotas(quotaNamespace).Get(ctx, "gpus", metav1.GetOptions{})
		if err != nil || q.Status.Hard == nil {
			return false, nil
		}
		got, err := pods.Create(ctx, claimPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil
		}
		_, ok := got.Spec.Containers[0].Resources.Limits[res]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("the quota or the resource webhook never took effect: %v", err)
	}
	for _, name := range []string{"train-0", "train-1"} {
		got, err := pods.Create(ctx, claimPod(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod %s within the quota refused: %v", name, err)
		}
		if q := got.Spec.Containers[0].Resources.Requests[res]; q.Value() != 2 {
			t.Fatalf("pod %s: containers[0] requests %s=%s, want 2", name, res, q.String())
		}
		if _, ok := got.Spec.Containers[1].Resources.Limits[res]; ok {
			t.Fatalf("pod %s: the sidecar got GPUs too", name)
		}
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("nginx")}}}
	if _, err := pods.Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a pod without a claim was refused: %v", err)
	}
	_, err = pods.Create(ctx, claimPod("train-2"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "exceeded quota") || !strings.Contains(err.Error(), string(res)) {
		t.Fatalf("the third 2-GPU pod under a 4-GPU quota: got %v, want exceeded quota on %s", err, res)
	}
	// A Job naming the claim in its pod template gets the request there at creation, where a
	// quota manager such as Kueue reads it; a Job naming none is not touched. Server-side dry
	// runs: the mutating webhooks run, and no Job controller makes pods.
	job := func(name string, annotations map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, SchedulerName: gpuv1.SchedulerName,
				Containers: []corev1.Container{container("main"), container("side")}},
		}}}
	}
	jobs := admin.BatchV1().Jobs(quotaNamespace)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	got, err := jobs.Create(ctx, job("train", map[string]string{gpuv1.AnnotationClaim: "two-gpus"}), dry)
	if err != nil {
		t.Fatalf("Job naming a claim: %v", err)
	}
	c := got.Spec.Template.Spec.Containers
	if req, lim := c[0].Resources.Requests[res], c[0].Resources.Limits[res]; req.Value() != 2 || lim.Value() != 2 || len(c[1].Resources.Limits) != 0 {
		t.Fatalf("Job naming a 2-GPU claim: template containers[0] %v, containers[1] %v; want %s=2 on the first only", c[0].Resources, c[1].Resources, res)
	}
	// A Job whose template names a Shared claim template asks for gpu-shared there, as its pods do.
	got, err = jobs.Create(ctx, job("notebooks", map[string]string{gpuv1.AnnotationClaimTemplate: "quarter"}), dry)
	if err != nil {
		t.Fatalf("Job naming a Shared claim template: %v", err)
	}
	c = got.Spec.Template.Spec.Containers
	if req, lim := c[0].Resources.Requests[gpuv1.SharedResourceName], c[0].Resources.Limits[gpuv1.SharedResourceName]; req.Value() != 1 || lim.Value() != 1 || len(c[1].Resources.Limits) != 0 {
		t.Fatalf("Job naming a Shared claim template: template containers[0] %v, containers[1] %v; want %s=1 on the first only", c[0].Resources, c[1].Resources, gpuv1.SharedResourceName)
	}
	got, err = jobs.Create(ctx, job("web", nil), dry)
	if err != nil {
		t.Fatalf("Job naming no claim: %v", err)
	}
	if _, ok := got.Spec.Template.Spec.Containers[0].Resources.Limits[res]; ok {
		t.Fatalf("a Job naming no claim got %s", res)
	}
	forged := claimPod("forged")
	forged.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	_, err = pods.Create(ctx, forged, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.containers[0].env[0]: NVIDIA_VISIBLE_DEVICES") {
		t.Fatalf("a claim pod setting NVIDIA_VISIBLE_DEVICES: got %v, want refused naming the field", err)
	}
}
