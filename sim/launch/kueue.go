package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// KueueQueueLabel is the label that puts a Job into a Kueue LocalQueue.
const KueueQueueLabel = "kueue.x-k8s.io/queue-name"

// KueueOptions configure one Kueue controller manager.
type KueueOptions struct {
	// Name tells processes apart in logs; default "kueue".
	Name string
	// Namespace Kueue runs in (its Secret, its webhook Service); default "kueue-system".
	Namespace string
	// PodNamespaces, when set, turns on Kueue's pod integration for the namespaces it selects:
	// the "pod" framework, its managedJobsNamespaceSelector, and its pod webhooks registered
	// for those namespaces only. Kueue's pod webhooks fail closed, so registered for every
	// namespace they would hold each pod of the cluster on a call to Kueue.
	PodNamespaces *metav1.LabelSelector
}

// Kueue is a running Kueue controller manager (sigs.k8s.io/kueue, built by hack/build-tools.sh
// --kueue) with its CRDs and webhooks installed.
type Kueue struct {
	*cluster.Process
	Namespace string
}

// StartKueue installs what Kueue's own Helm chart (from the same module version, copied to
// _output/kueue/chart by hack/build-tools.sh --kueue) renders for a cluster: the CRDs with their
// conversion webhooks, the webhook Service, the certificate Secret and the webhook
// configurations, and runs the manager on this host against the cluster, with Kueue's internal
// certificate rotation, which issues the webhook's certificate for the Service's DNS name and
// injects its CA into the configurations and CRDs (the harness writes the Secret it fills into
// the manager's certificate directory, as the kubelet would for a pod; see mountSecret).
//
// The apiserver reaches the webhook through the Service as it would in a cluster: the Service
// has no selector and an EndpointSlice that names this host's address and the manager's port,
// and the suite's apiserver resolves webhook Services by their endpoints
// (--enable-aggregator-routing; there is no kube-proxy for a ClusterIP). That address must not
// be loopback (the API refuses loopback endpoints), so the manager listens on every interface
// of a host with at least one other address.
//
// The batch/Job integration is on, and the pod integration with opts.PodNamespaces; only the
// webhooks of Jobs, of Kueue's own objects and then of pods are registered: the other
// integrations' webhooks would otherwise send their objects to a path the manager does not
// serve.
func StartKueue(ctx context.Context, c *cluster.Cluster, opts KueueOptions) (*Kueue, error) {
	if opts.Name == "" {
		opts.Name = "kueue"
	}
	if opts.Namespace == "" {
		opts.Namespace = "kueue-system"
	}
	binDir := os.Getenv(cluster.BinDirEnv)
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if binDir == "" {
		binDir = filepath.Join(root, "_output", "bin")
	}
	bin, chart := filepath.Join(binDir, "kueue"), filepath.Join(root, "_output", "kueue", "chart")
	for _, p := range []string{bin, chart} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("kueue: %w: run \"make kueue-tools\"", err)
		}
	}
	host, err := hostAddress()
	if err != nil {
		return nil, err
	}
	objs, err := renderKueueChart(ctx, filepath.Join(binDir, "helm"), chart, opts.Namespace)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, fmt.Errorf("kueue: client: %w", err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kueue: creating namespace %s: %w", opts.Namespace, err)
	}
	webhookPort, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	healthPort, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.WorkDir(), opts.Name)
	if err := os.MkdirAll(filepath.Join(dir, "crds"), 0o700); err != nil {
		return nil, fmt.Errorf("kueue: %w", err)
	}
	var (
		crds        []string
		serviceName string
	)
	for i, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			f := filepath.Join(dir, "crds", fmt.Sprintf("%02d-%s.yaml", i, o.GetName()))
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				return nil, fmt.Errorf("kueue: encoding CRD %s: %w", o.GetName(), err)
			}
			if err := os.WriteFile(f, b, 0o600); err != nil {
				return nil, fmt.Errorf("kueue: %w", err)
			}
			crds = append(crds, f)
		case "Secret":
			s := &corev1.Secret{}
			if err := fromUnstructured(o, s); err != nil {
				return nil, err
			}
			if _, err := cs.CoreV1().Secrets(opts.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("kueue: creating Secret %s: %w", s.Name, err)
			}
		case "Service":
			if o.GetLabels()["app.kubernetes.io/component"] != "webhook-service" {
				continue
			}
			svc := &corev1.Service{}
			if err := fromUnstructured(o, svc); err != nil {
				return nil, err
			}
			if len(svc.Spec.Ports) != 1 {
				return nil, fmt.Errorf("kueue: webhook Service %s has %d ports, want 1", svc.Name, len(svc.Spec.Ports))
			}
			// No selector: the endpoints are ours, not the endpoint controllers'.
			svc.Spec.Selector = nil
			svc.Spec.Ports[0].TargetPort = intstr.FromInt32(int32(webhookPort))
			if _, err := cs.CoreV1().Services(opts.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("kueue: creating Service %s: %w", svc.Name, err)
			}
			slice := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: opts.Namespace,
					Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(svc.Spec.Ports[0].Name), Port: ptr.To(int32(webhookPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
			}
			if _, err := cs.DiscoveryV1().EndpointSlices(opts.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("kueue: creating EndpointSlice %s: %w", slice.Name, err)
			}
			serviceName = svc.Name
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := fromUnstructured(o, m); err != nil {
				return nil, err
			}
			m.Namespace = "" // cluster-scoped; the chart sets one anyway
			m.Webhooks = keepWebhooks(m.Webhooks, func(w admissionregistrationv1.MutatingWebhook) []admissionregistrationv1.RuleWithOperations {
				return w.Rules
			}, opts.PodNamespaces != nil)
			for i := range m.Webhooks {
				if isPodWebhook(m.Webhooks[i].Rules) {
					m.Webhooks[i].NamespaceSelector = opts.PodNamespaces
				}
			}
			if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("kueue: creating MutatingWebhookConfiguration %s: %w", m.Name, err)
			}
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := fromUnstructured(o, v); err != nil {
				return nil, err
			}
			v.Namespace = ""
			v.Webhooks = keepWebhooks(v.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) []admissionregistrationv1.RuleWithOperations {
				return w.Rules
			}, opts.PodNamespaces != nil)
			for i := range v.Webhooks {
				if isPodWebhook(v.Webhooks[i].Rules) {
					v.Webhooks[i].NamespaceSelector = opts.PodNamespaces
				}
			}
			if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("kueue: creating ValidatingWebhookConfiguration %s: %w", v.Name, err)
			}
		}
	}
	if serviceName == "" || len(crds) == 0 {
		return nil, fmt.Errorf("kueue: the chart in %s rendered no webhook Service or no CRDs", chart)
	}
	if err := c.InstallCRDs(ctx, crds...); err != nil {
		return nil, fmt.Errorf("kueue: %w", err)
	}
	certDir, secretName := filepath.Join(dir, "certs"), "kueue-webhook-server-cert"
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, fmt.Errorf("kueue: %w", err)
	}
	config := map[string]any{
		"apiVersion": "config.kueue.x-k8s.io/v1beta2",
		"kind":       "Configuration",
		"namespace":  opts.Namespace,
		"health":     map[string]any{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(healthPort)},
		// Off: the metrics server would need a certificate of its own.
		"metrics":        map[string]any{"bindAddress": "0"},
		"webhook":        map[string]any{"port": webhookPort, "certDir": certDir},
		"leaderElection": map[string]any{"leaderElect": false},
		"internalCertManagement": map[string]any{"enable": true, "webhookServiceName": serviceName,
			"webhookSecretName": secretName},
		"integrations":     map[string]any{"frameworks": []string{"batch/job"}},
		"clientConnection": map[string]any{"qps": 100, "burst": 200},
	}
	if opts.PodNamespaces != nil {
		config["integrations"] = map[string]any{"frameworks": []string{"batch/job", "pod"}}
		// Kueue's own check, besides the webhooks' selector: it manages pods only there.
		config["managedJobsNamespaceSelector"] = opts.PodNamespaces
	}
	b, err := yaml.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("kueue: encoding the configuration: %w", err)
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		return nil, fmt.Errorf("kueue: %w", err)
	}
	// The visibility server (an aggregated API) is off: nothing here reads it.
	args := []string{"--config=" + cfgFile, "--feature-gates=VisibilityOnDemand=false"}
	p, err := c.StartProcess(opts.Name, bin, args, []string{"KUBECONFIG=" + c.Kubeconfig()})
	if err != nil {
		return nil, err
	}
	k := &Kueue{Process: p, Namespace: opts.Namespace}
	go mountSecret(cs, opts.Namespace, secretName, certDir, p.Exited())
	if err := waitHealthy(ctx, p, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz", 2*time.Minute); err != nil {
		_ = p.Kill()
		return nil, err
	}
	if err := k.waitWebhook(ctx, cs); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return k, nil
}

// mountSecret does for the manager what the kubelet does for its pod's Secret volume: it
// writes the keys of the Secret that Kueue's certificate rotation fills (tls.crt, tls.key,
// ca.crt) into dir, and again whenever they change, until done closes. The rotation writes only
// the Secret and waits for the files to appear in its certificate directory.
func mountSecret(cs kubernetes.Interface, namespace, name, dir string, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-done
		cancel()
	}()
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(namespace, name), "dir", dir)
	written := map[string]string{}
	_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := cs.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, key := range []string{"ca.crt", "tls.key", "tls.crt"} {
			v, ok := s.Data[key]
			if !ok || len(v) == 0 || written[key] == string(v) {
				continue
			}
			// Rename into place, so that the manager never reads half a file.
			tmp := filepath.Join(dir, "."+key+".tmp")
			if err := os.WriteFile(tmp, v, 0o600); err != nil {
				logger.Error(err, "Writing a key of the Secret", "key", key)
				continue
			}
			if err := os.Rename(tmp, filepath.Join(dir, key)); err != nil {
				logger.Error(err, "Writing a key of the Secret", "key", key)
				continue
			}
			written[key] = string(v)
		}
		return false, nil
	})
}

// waitWebhook waits until the apiserver calls Kueue's Job webhook through the Service: a
// server-side dry run of a Job for a queue comes back suspended (Kueue suspends a queued Job
// until it admits it). Until the rotator has injected its CA the call fails.
func (k *Kueue) waitWebhook(ctx context.Context, cs kubernetes.Interface) error {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kueue-probe-", Namespace: "default", Labels: map[string]string{KueueQueueLabel: "probe"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "probe"}},
		}}},
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if !k.Running() {
			return false, errors.New("exited during start")
		}
		got, err := cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		if !ptr.Deref(got.Spec.Suspend, false) {
			last = errors.New("the dry-run Job came back not suspended: Kueue's Job webhook was not called")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kueue's webhook not reachable through its Service: %w (last: %w); last lines of %s:\n%s", err, last, k.LogPath(), k.LogTail(30))
	}
	return nil
}

// renderKueueChart renders Kueue's chart with helm template into its objects.
func renderKueueChart(ctx context.Context, helm, chart, namespace string) ([]*unstructured.Unstructured, error) {
	cmd := exec.CommandContext(ctx, helm, "template", "kueue", chart, "--namespace", namespace)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kueue: helm template %s: %w\n%s", chart, err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("kueue: decoding the chart's objects: %w", err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}

func fromUnstructured(o *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		return fmt.Errorf("kueue: decoding %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return nil
}

// keepWebhooks keeps the webhooks of Jobs and of Kueue's own objects, and of pods with pods.
func keepWebhooks[W any](ws []W, rules func(W) []admissionregistrationv1.RuleWithOperations, pods bool) []W {
	var keep []W
	for _, w := range ws {
		rs := rules(w)
		if pods && isPodWebhook(rs) {
			keep = append(keep, w)
			continue
		}
		for _, r := range rs {
			if len(r.APIGroups) == 1 && (r.APIGroups[0] == "batch" || r.APIGroups[0] == "kueue.x-k8s.io") {
				keep = append(keep, w)
				break
			}
		}
	}
	return keep
}

// isPodWebhook reports whether a webhook's rules are those of Kueue's pod integration: core
// pods only.
func isPodWebhook(rules []admissionregistrationv1.RuleWithOperations) bool {
	for _, r := range rules {
		if len(r.APIGroups) == 1 && r.APIGroups[0] == "" && len(r.Resources) == 1 && r.Resources[0] == "pods" {
			return true
		}
	}
	return false
}

// hostAddress is an IPv4 address of this host other than loopback, which an EndpointSlice may
// name.
func hostAddress() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("kueue: listing this host's addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("kueue: this host has no IPv4 address besides loopback for the webhook's EndpointSlice")
}
