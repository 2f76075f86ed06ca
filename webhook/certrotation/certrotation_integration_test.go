//go:build integration

package certrotation_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/certrotation"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
)

const (
	ns      = "gpu-cert-itest"
	svcName = "gpu-scheduler-webhook"
	secret  = "gpu-scheduler-webhook-cert"
)

// The rotator fills the empty Secret the chart ships, writes its CA into every webhook of both
// configurations, writes it again when an upgrade drops it, renews the serving certificate under
// the same CA, and keeps the CA across restarts.
func TestRotatorAgainstAPIServer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Name: "cert-itest"})
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What the chart renders: an empty Secret and the configurations without a CA bundle (the
	// apiserver accepts that; the webhooks cannot be called until the bundle is written).
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}, Type: corev1.SecretTypeOpaque}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m, v, err := manifests.Render(manifests.Options{Name: svcName, Namespace: ns, CABundle: []byte("placeholder"),
		Service: &manifests.ServiceRef{Namespace: ns, Name: svcName, Port: 443}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = nil
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = nil
	}
	if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	certDir := t.TempDir()
	go mountSecret(ctx, kube, certDir)
	opts := certrotation.Options{
		Secret:     types.NamespacedName{Namespace: ns, Name: secret},
		Service:    types.NamespacedName{Namespace: ns, Name: svcName},
		Mutating:   []string{svcName},
		Validating: []string{svcName},
		CertFile:   filepath.Join(certDir, "tls.crt"),
	}
	stop := start(t, ctx, c, opts)
	first := checkIssued(t, ctx, kube, certDir)

	t.Run("CA bundle written again after an upgrade drops it", func(t *testing.T) {
		cur, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, svcName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range cur.Webhooks {
			cur.Webhooks[i].ClientConfig.CABundle = nil
		}
		if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitBundles(t, ctx, kube, first["ca.crt"])
	})

	t.Run("restart keeps the CA and certificate", func(t *testing.T) {
		stop()
		stop = start(t, ctx, c, opts)
		again := checkIssued(t, ctx, kube, certDir)
		for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
			if !bytes.Equal(again[k], first[k]) {
				t.Errorf("%s changed across a restart of the webhook", k)
			}
		}
	})

	t.Run("serving certificate renewed under the same CA", func(t *testing.T) {
		stop()
		// A certificate of 2h renewed 2h-3s before its end is due 3 s after it is made; checked
		// every second.
		short := opts
		short.CertValidity, short.RenewBefore, short.CheckFrequency = 2*time.Hour, 2*time.Hour-3*time.Second, time.Second
		// The one-year certificate would not be due for a year: drop it, keeping the CA, so that
		// the rotator issues a short one.
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(s.Data, "tls.crt")
		delete(s.Data, "tls.key")
		if _, err := kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stop = start(t, ctx, c, short)
		defer stop()
		issued := checkIssued(t, ctx, kube, certDir)["tls.crt"]
		var renewed map[string][]byte
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			s, err := kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			renewed = s.Data
			return len(s.Data["tls.crt"]) > 0 && !bytes.Equal(s.Data["tls.crt"], issued), nil
		})
		if err != nil {
			t.Fatalf("the serving certificate due for renewal was not renewed: %v", err)
		}
		if !bytes.Equal(renewed["ca.crt"], first["ca.crt"]) {
			t.Error("renewing the serving certificate replaced the CA (the apiserver would distrust the running replicas)")
		}
		verifyServingCert(t, renewed)
		waitBundles(t, ctx, kube, first["ca.crt"])
	})
}

// start runs a rotator and waits for it to be ready; the returned function stops it.
func start(t *testing.T, ctx context.Context, c *cluster.Cluster, opts certrotation.Options) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	ready, done, err := certrotation.Start(ctx, c.RESTConfig(), opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("rotator stopped before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("rotator not ready after 2 minutes")
	}
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rotator: %v", err)
		}
	}
}

// checkIssued checks the Secret's certificate, the CA bundles and the mounted files, and
// returns the Secret's data.
func checkIssued(t *testing.T, ctx context.Context, kube kubernetes.Interface, certDir string) map[string][]byte {
	t.Helper()
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if len(s.Data[k]) == 0 {
			t.Fatalf("Secret %s has no %s", secret, k)
		}
	}
	verifyServingCert(t, s.Data)
	waitBundles(t, ctx, kube, s.Data["ca.crt"])
	if _, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")); err != nil {
		t.Errorf("mounted certificate: %v", err)
	}
	return s.Data
}

// waitBundles waits until every webhook of both configurations has ca as its CA bundle.
func waitBundles(t *testing.T, ctx context.Context, kube kubernetes.Interface, ca []byte) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, svcName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, svcName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var cfgs []admissionregistrationv1.WebhookClientConfig
		for _, w := range m.Webhooks {
			cfgs = append(cfgs, w.ClientConfig)
		}
		for _, w := range v.Webhooks {
			cfgs = append(cfgs, w.ClientConfig)
		}
		for _, cc := range cfgs {
			if !bytes.Equal(cc.CABundle, ca) {
				last = string(cc.CABundle)
				return false, nil
			}
		}
		return len(cfgs) > 0, nil
	})
	if err != nil {
		t.Fatalf("webhook CA bundles are not the Secret's ca.crt (last seen %q): %v", last, err)
	}
}

// verifyServingCert checks that tls.crt chains to ca.crt for the Service's DNS names and that
// tls.key is its key.
func verifyServingCert(t *testing.T, data map[string][]byte) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{svcName + "." + ns + ".svc", svcName + "." + ns, svcName, svcName + "." + ns + ".svc.cluster.local"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"]); err != nil {
		t.Errorf("tls.key does not match tls.crt: %v", err)
	}
}

// mountSecret does what the kubelet does for the webhook's Secret volume: it keeps the
// Secret's keys as files in dir.
func mountSecret(ctx context.Context, kube kubernetes.Interface, dir string) {
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for k, v := range s.Data {
			_ = os.WriteFile(filepath.Join(dir, k), v, 0o600)
		}
		return false, nil
	})
}
