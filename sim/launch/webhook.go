package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest"
)

// WebhookOptions configure one gpu-webhook process.
type WebhookOptions struct {
	// Name tells processes apart in logs; default "gpu-webhook".
	Name string
	// Namespace is the system namespace the webhooks skip; default "gpu-scheduler".
	Namespace string
	// SchedulerGroups may write the allocation annotations; default system:masters, the group
	// of the harness's admin kubeconfig that launched schedulers use.
	SchedulerGroups []string
	// NoRegister leaves the webhook configurations out: the process runs and serves, but the
	// apiserver sends it nothing (a test that scrapes it beside other tests' pods).
	NoRegister bool
	// ResourceName runs the webhook in device-plugin mode (--resource-name, with
	// --visible-devices-env=none): claim pods and the pod templates of Jobs that name a claim
	// get this GPU resource. The registered configuration then sends Jobs too.
	ResourceName string
}

// Webhook is a running gpu-webhook registered with the apiserver.
type Webhook struct {
	*cluster.Process
	URL string
	// CABundle verifies its serving certificate, for configurations registered by hand
	// (NoRegister).
	CABundle []byte
}

// StartWebhook runs bin/gpu-webhook on loopback with a serving certificate from a fresh CA,
// waits until it is healthy, and registers its Mutating- and ValidatingWebhookConfiguration
// (rendered by webhook/manifests, as the chart does) with the apiserver pointing at it.
func StartWebhook(ctx context.Context, c *cluster.Cluster, opts WebhookOptions) (*Webhook, error) {
	if opts.Name == "" {
		opts.Name = "gpu-webhook"
	}
	if opts.Namespace == "" {
		opts.Namespace = "gpu-scheduler"
	}
	if len(opts.SchedulerGroups) == 0 {
		opts.SchedulerGroups = []string{"system:masters"}
	}
	bin, err := Binary(ctx, "gpu-webhook")
	if err != nil {
		return nil, err
	}
	ca, err := webhooktest.NewCA(opts.Name + "-ca")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(opts.Name, []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.WorkDir(), opts.Name+"-tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	certFile, keyFile, err := pair.Write(dir)
	if err != nil {
		return nil, err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--listen-address=127.0.0.1:" + strconv.Itoa(port),
		"--tls-cert-file=" + certFile,
		"--tls-private-key-file=" + keyFile,
		// /metrics callers are checked with the apiserver (TokenReview, SubjectAccessReview).
		"--kubeconfig=" + c.Kubeconfig(),
	}
	if opts.ResourceName != "" {
		args = append(args, "--resource-name="+opts.ResourceName, "--visible-devices-env=none")
	}
	// One identity for the process and for the configurations, whose match condition keeps
	// this identity's Bindings from the webhook (it would allow them). The users are the
	// process's default, spelt out so that both sides see the same.
	scheduler := webhook.SchedulerIdentity{Users: webhook.DefaultConfig().Scheduler.Users, Groups: opts.SchedulerGroups}
	for _, u := range scheduler.Users {
		args = append(args, "--scheduler-users="+u)
	}
	for _, g := range scheduler.Groups {
		args = append(args, "--scheduler-groups="+g)
	}
	p, err := c.StartProcess(opts.Name, bin, args, nil)
	if err != nil {
		return nil, err
	}
	w := &Webhook{Process: p, URL: "https://127.0.0.1:" + strconv.Itoa(port), CABundle: ca.PEM}
	if err := waitHealthy(ctx, p, w.URL+"/healthz", time.Minute); err != nil {
		_ = p.Kill()
		return nil, err
	}
	if opts.NoRegister {
		return w, nil
	}
	mut, val, err := manifests.Render(manifests.Options{Namespace: opts.Namespace, CABundle: ca.PEM, URL: w.URL, Scheduler: scheduler,
		JobResource: opts.ResourceName != ""})
	if err != nil {
		_ = p.Kill()
		return nil, fmt.Errorf("rendering the webhook configurations for %s: %w", opts.Name, err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		_ = p.Kill()
		return nil, fmt.Errorf("client for registering %s: %w", opts.Name, err)
	}
	ar := cs.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, mut, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		_ = p.Kill()
		return nil, fmt.Errorf("registering MutatingWebhookConfiguration %s: %w", mut.Name, err)
	}
	if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, val, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		_ = p.Kill()
		return nil, fmt.Errorf("registering ValidatingWebhookConfiguration %s: %w", val.Name, err)
	}
	return w, nil
}
