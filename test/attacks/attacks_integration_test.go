//go:build integration

package attacks

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest/run"
)

const (
	namespace    = "attacks"
	releaseNS    = "gpu-scheduler"
	resourceName = "nvidia.com/gpu"
	attacker     = "mallory"
	node         = "node-a"
)

// entry is one manifest of the corpus.
type entry struct {
	file   string
	expect string // a substring of the refusal, or "admitted"
	op     string // create (default), ephemeral or bind
	data   []byte
}

func loadCorpus(t *testing.T, dir string) []entry {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	var out []entry
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e := entry{file: filepath.Base(f), op: "create", data: data}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "# expect:"); ok {
				e.expect = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "# op:"); ok {
				e.op = strings.TrimSpace(v)
			}
		}
		if e.expect == "" {
			t.Fatalf("%s has no '# expect:' line", f)
		}
		switch e.op {
		case "create", "ephemeral", "bind":
		default:
			t.Fatalf("%s: op %q is not create, ephemeral or bind", f, e.op)
		}
		out = append(out, e)
	}
	return out
}

func TestAttackCorpus(t *testing.T) {
	refused := loadCorpus(t, "refused")
	admitted := loadCorpus(t, "admitted")
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	c, err := cluster.Start(ctx, cluster.Config{Name: "attacks"})
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	if err := c.InstallCRDs(ctx, filepath.Join("..", "..", "charts", "gpu-scheduler", "crds")); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
	restCfg := c.RESTConfig()
	admin := kubernetes.NewForConfigOrDie(restCfg)
	setUp(ctx, t, admin, versioned.NewForConfigOrDie(restCfg))
	url, caPEM := startWebhook(ctx, t, restCfg)
	register(ctx, t, admin, url, caPEM)

	userCfg := rest.CopyConfig(restCfg)
	userCfg.Impersonate = rest.ImpersonationConfig{UserName: attacker, Groups: []string{"system:authenticated"}}
	user := kubernetes.NewForConfigOrDie(userCfg)

	for _, e := range refused {
		t.Run("refused/"+e.file, func(t *testing.T) {
			err := apply(ctx, t, admin, user, e)
			if err == nil {
				t.Fatalf("admitted; want refused with %q", e.expect)
			}
			if !strings.Contains(err.Error(), e.expect) {
				t.Fatalf("refused with %q\nwant a message containing %q", err, e.expect)
			}
		})
	}
	for _, e := range admitted {
		t.Run("admitted/"+e.file, func(t *testing.T) {
			if err := apply(ctx, t, admin, user, e); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// setUp creates the corpus namespace (privileged containers forbidden), the claim the pods
// name, the node, and the attacker's rights: what a namespace user has.
func setUp(ctx context.Context, t *testing.T, admin kubernetes.Interface, gpus versioned.Interface) {
	t.Helper()
	steps := []struct {
		what string
		do   func() error
	}{
		{"namespace", func() error {
			_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace,
				Labels: map[string]string{webhook.LabelForbidPrivileged: "true"}}}, metav1.CreateOptions{})
			return err
		}},
		{"release namespace", func() error {
			_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}, metav1.CreateOptions{})
			return err
		}},
		{"claim", func() error {
			_, err := gpus.GpuV1().GpuClaims(namespace).Create(ctx, &gpuv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: "two-gpus"},
				Spec: gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{Count: 2}}}, metav1.CreateOptions{})
			return err
		}},
		{"node", func() error {
			_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
			return err
		}},
		{"role", func() error {
			_, err := admin.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "user"}, Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "update", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"update", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"pods/binding", "bindings"}, Verbs: []string{"create"}},
			}}, metav1.CreateOptions{})
			return err
		}},
		{"role binding", func() error {
			_, err := admin.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "user"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "user"},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: attacker}}}, metav1.CreateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("create %s: %v", s.what, err)
		}
	}
}

// startWebhook runs gpu-webhook's server as the chart runs it in the device-plugin mode.
func startWebhook(ctx context.Context, t *testing.T, restCfg *rest.Config) (string, []byte) {
	t.Helper()
	reader, err := webhook.NewClusterReader(restCfg, webhook.ReaderOptions{Claims: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	cfg := webhook.DefaultConfig()
	cfg.EnvMode = webhook.EnvModeNone
	cfg.Resource = webhook.ResourceConfig{Name: resourceName, Count: reader.Count, ForbidsPrivileged: reader.ForbidsPrivileged}
	return run.Webhook(ctx, t, cfg)
}

// register installs the webhook configurations and the pod policy as the chart renders them
// (test/chart checks that the chart's templates equal webhook/manifests), and waits until all
// are in effect.
func register(ctx context.Context, t *testing.T, admin kubernetes.Interface, url string, caPEM []byte) {
	t.Helper()
	mwc, vwc, err := manifests.Render(manifests.Options{Namespace: releaseNS, CABundle: caPEM, URL: url})
	if err != nil {
		t.Fatal(err)
	}
	policy, binding, err := manifests.RenderPodPolicy(manifests.PodPolicyOptions{ResourceName: resourceName, Namespace: releaseNS})
	if err != nil {
		t.Fatal(err)
	}
	ar := admin.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod policy: %v", err)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod policy binding: %v", err)
	}
	probe := func(claim, forged bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: map[string]string{}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if claim {
			p.Annotations[gpuv1.AnnotationClaim] = "two-gpus"
		} else {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{resourceName: *resourceQuantity(1)}
		}
		if forged {
			p.Annotations[gpuv1.AnnotationGPUIDs] = "0"
		}
		return p
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := admin.CoreV1().Pods(namespace).Create(ctx, probe(true, false), dry)
		if err != nil || len(got.Spec.Containers[0].Resources.Limits) == 0 {
			return false, nil
		}
		if _, err := admin.CoreV1().Pods(namespace).Create(ctx, probe(true, true), dry); err == nil {
			return false, nil
		}
		_, err = admin.CoreV1().Pods(namespace).Create(ctx, probe(false, false), dry)
		return err != nil && strings.Contains(err.Error(), "names no GpuClaim"), nil
	})
	if err != nil {
		t.Fatalf("the webhooks and the pod policy never took effect: %v", err)
	}
}

// apply does what the manifest's op says, as the attacker, and returns the refusal.
func apply(ctx context.Context, t *testing.T, admin, user kubernetes.Interface, e entry) error {
	t.Helper()
	pods := user.CoreV1().Pods(namespace)
	switch e.op {
	case "bind":
		b := &corev1.Binding{}
		if err := yaml.UnmarshalStrict(e.data, b); err != nil {
			t.Fatalf("%s: %v", e.file, err)
		}
		// The pod to bind: a plain claim pod, created by the admin.
		target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Annotations: map[string]string{gpuv1.AnnotationClaim: "two-gpus"}},
			Spec: corev1.PodSpec{SchedulerName: gpuv1.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if _, err := admin.CoreV1().Pods(namespace).Create(ctx, target, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create the pod to bind: %v", err)
		}
		return pods.Bind(ctx, b, metav1.CreateOptions{})
	case "ephemeral":
		p := &corev1.Pod{}
		if err := yaml.UnmarshalStrict(e.data, p); err != nil {
			t.Fatalf("%s: %v", e.file, err)
		}
		debug := p.Spec.EphemeralContainers
		p.Spec.EphemeralContainers = nil
		created, err := pods.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create the pod to debug: %v", err)
		}
		created.Spec.EphemeralContainers = debug
		_, err = pods.UpdateEphemeralContainers(ctx, created.Name, created, metav1.UpdateOptions{})
		return err
	default:
		p := &corev1.Pod{}
		if err := yaml.UnmarshalStrict(e.data, p); err != nil {
			t.Fatalf("%s: %v", e.file, err)
		}
		if p.Name != strings.TrimSuffix(e.file, ".yaml") {
			t.Fatalf("%s: pod name %q; name it after the file", e.file, p.Name)
		}
		_, err := pods.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		return nil
	}
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
