package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest"
)

// A second release's scheduler binds its own pods with the allocation: this release's guard,
// told about the sibling, lets the Binding through (the sibling's guard judges it); a Binding of
// this release's pod, of a pod of no listed sibling, or of a pod that cannot be read by anyone
// else is refused as before.
func TestValidateSiblingBinding(t *testing.T) {
	canary := authenticationv1.UserInfo{Username: "system:serviceaccount:gpu-canary:gpu-canary"}
	pods := map[string]string{"ml/train": "gpu-canary"}
	a := &Admitter{Mode: EnvModeCUDA, Scheduler: testScheduler, SchedulerName: "gpu-scheduler", SiblingSchedulerNames: []string{"gpu-canary"},
		SiblingPod: func(_ context.Context, ns, name string) (string, error) {
			s, ok := pods[ns+"/"+name]
			if !ok {
				return "", errors.New("not found")
			}
			return s, nil
		}}
	bind := func(user authenticationv1.UserInfo) *admissionv1.AdmissionResponse {
		resp, _ := a.Validate(context.Background(), request(t, admissionv1.Create, "binding", "Binding", user, bindingWith("node-a", map[string]string{alloc: "node-a:0", ids: "0"}), nil))
		return resp
	}
	if resp := bind(canary); !resp.Allowed {
		t.Fatalf("the sibling scheduler's Binding of its own pod was refused: %+v", resp.Result)
	}
	for name, sched := range map[string]string{"this release's pod": "gpu-scheduler", "a pod of no listed sibling": "other"} {
		pods["ml/train"] = sched
		if resp := bind(canary); resp.Allowed || !strings.Contains(resp.Result.Message, "may not bind pod ml/train") {
			t.Errorf("%s: allowed %v %+v, want refused", name, resp.Allowed, resp.Result)
		}
	}
	delete(pods, "ml/train")
	if resp := bind(canary); resp.Allowed || !strings.Contains(resp.Result.Message, "reading the pod") {
		t.Errorf("unreadable pod: allowed %v %+v, want refused naming the read", resp.Allowed, resp.Result)
	}
	// Without siblings, the other scheduler's Binding is refused (the two-release bug).
	a.SiblingSchedulerNames = nil
	pods["ml/train"] = "gpu-canary"
	if resp := bind(canary); resp.Allowed {
		t.Error("the Binding was allowed without a sibling configured")
	}
}

// With a client CA, only callers presenting a certificate it signed (and, with ClientNames, of
// an allowed name) get an answer from /mutate and /validate; probes need none.
func TestServeClientCertificates(t *testing.T) {
	ca, err := webhooktest.NewCA("serving-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue("gpu-webhook", webhooktest.Loopback.IPs, webhooktest.Loopback.DNSNames)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := pair.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := webhooktest.NewCA("apiserver-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.CertFile, cfg.KeyFile, cfg.Scheduler = certFile, keyFile, testScheduler
	cfg.ClientCAFile, cfg.ClientNames = caFile, []string{"kube-apiserver"}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	client := func(c *webhooktest.ServingPair) *http.Client {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.PEM)
		tc := &tls.Config{RootCAs: pool}
		if c != nil {
			kp, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{kp}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	}
	body := reviewBody(t, request(t, admissionv1.Create, "", "Pod", alice, gpuPod(nil), nil))
	call := func(c *http.Client) (int, string) {
		t.Helper()
		resp, err := c.Post("https://"+ln.Addr().String()+PathMutate, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	apiserver, err := clientCA.IssueClient("kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := clientCA.IssueClient("someone")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := ca.IssueClient("kube-apiserver") // right name, wrong CA
	if err != nil {
		t.Fatal(err)
	}
	if code, b := call(client(apiserver)); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) {
		t.Fatalf("the apiserver's certificate: %d %s", code, b)
	}
	if code, b := call(client(nil)); code != http.StatusForbidden || !strings.Contains(b, "client certificate") {
		t.Errorf("no certificate: %d %s, want 403", code, b)
	}
	if code, b := call(client(stranger)); code != http.StatusForbidden || !strings.Contains(b, `"someone" is not one of the allowed callers`) {
		t.Errorf("another name: %d %s, want 403", code, b)
	}
	if code, _ := call(client(forged)); code == http.StatusOK {
		t.Errorf("a certificate of another CA was answered")
	}
	resp, err := client(nil).Get("https://" + ln.Addr().String() + PathHealthz)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("probe without a certificate: %d", resp.StatusCode)
	}
}
