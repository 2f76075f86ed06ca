package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest"
)

var reviewType = metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}

// newTestServer builds a Server on a fresh certificate in a temporary directory.
func newTestServer(t *testing.T) (*Server, *webhooktest.CA, string) {
	t.Helper()
	ca, err := webhooktest.NewCA("test-ca")
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
	cfg := DefaultConfig()
	cfg.CertFile, cfg.KeyFile = certFile, keyFile
	cfg.Scheduler = testScheduler
	cfg.MaxRequestBytes = 64 << 10
	cfg.MetricsGuard = testGuard
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, ca, dir
}

func reviewBody(t testing.TB, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	data, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: reviewType, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func post(h http.Handler, path, contentType string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decodeResponse(t testing.TB, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %s", err, body)
	}
	if out.APIVersion != reviewType.APIVersion || out.Kind != reviewType.Kind || out.Response == nil {
		t.Fatalf("response review %s", body)
	}
	return out.Response
}

func TestHandlerMutate(t *testing.T) {
	s, _, _ := newTestServer(t)
	h := s.Handler()
	pod := gpuPod([]corev1.EnvVar{env(EnvCUDAVisibleDevices, "0")})
	w := post(h, PathMutate, "application/json", reviewBody(t, request(t, admissionv1.Create, "", "Pod", alice, pod, nil)))
	if w.Code != http.StatusOK {
		t.Fatalf("code %d: %s", w.Code, w.Body)
	}
	resp := decodeResponse(t, w.Body.Bytes())
	if !resp.Allowed || resp.UID != "uid-1" || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v", resp)
	}
	var ops []PatchOp
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	got := applyPatch(t, pod, ops)
	if !equality.Semantic.DeepEqual(got.Spec.Containers[0].Env, EnvModeCUDA.Env()) {
		t.Errorf("env after patch: %+v", got.Spec.Containers[0].Env)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "CUDA_VISIBLE_DEVICES from the pod was replaced") {
		t.Errorf("warnings %q", resp.Warnings)
	}

	// A pod that asks for no GPU: allowed, no patch.
	plain := podWith("", nil)
	resp = decodeResponse(t, post(h, PathMutate, "application/json", reviewBody(t, request(t, admissionv1.Create, "", "Pod", alice, plain, nil))).Body.Bytes())
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
		t.Errorf("plain pod: %+v", resp)
	}

	if err := testutil.GatherAndCompare(s.metrics.registry, strings.NewReader(`
# HELP gpu_scheduler_webhook_admissions_total [ALPHA] Admission requests answered, by webhook path and result: allowed (mutated or not), denied, or error (the request never got a review answer).
# TYPE gpu_scheduler_webhook_admissions_total counter
gpu_scheduler_webhook_admissions_total{result="allowed",webhook="mutate"} 2
gpu_scheduler_webhook_admissions_total{result="denied",webhook="mutate"} 0
gpu_scheduler_webhook_admissions_total{result="error",webhook="mutate"} 0
gpu_scheduler_webhook_admissions_total{result="allowed",webhook="validate"} 0
gpu_scheduler_webhook_admissions_total{result="denied",webhook="validate"} 0
gpu_scheduler_webhook_admissions_total{result="error",webhook="validate"} 0
# HELP gpu_scheduler_webhook_mutations_total [ALPHA] Pods the mutating webhook patched, by whether a user-set variable was replaced.
# TYPE gpu_scheduler_webhook_mutations_total counter
gpu_scheduler_webhook_mutations_total{replaced="true"} 1
# HELP gpu_scheduler_webhook_requests_total [ALPHA] Admission requests served, by webhook path and HTTP status code.
# TYPE gpu_scheduler_webhook_requests_total counter
gpu_scheduler_webhook_requests_total{code="200",webhook="mutate"} 2
`), "gpu_scheduler_webhook_admissions_total", "gpu_scheduler_webhook_mutations_total", "gpu_scheduler_webhook_requests_total"); err != nil {
		t.Error(err)
	}
}

func TestAdmitterMutateEphemeralContainers(t *testing.T) {
	a := &Admitter{Mode: EnvModeCUDA, Scheduler: testScheduler}
	old := gpuPod(nil)
	pod := old.DeepCopy()
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
	req := request(t, admissionv1.Update, "ephemeralcontainers", "Pod", alice, pod, old)
	resp, out := a.Mutate(context.Background(), req)
	if !resp.Allowed || !out.Mutated || string(resp.Patch) == "" {
		t.Fatalf("response %+v outcome %+v", resp, out)
	}
	if !strings.Contains(string(resp.Patch), `"path":"/spec/ephemeralContainers/0/env"`) {
		t.Errorf("patch %s", resp.Patch)
	}
	// A plain pod UPDATE is not mutated (the spec is immutable).
	resp, out = a.Mutate(context.Background(), request(t, admissionv1.Update, "", "Pod", alice, pod, old))
	if !resp.Allowed || out.Mutated || resp.Patch != nil {
		t.Errorf("pod update: %+v", resp)
	}
	resp, _ = a.Mutate(context.Background(), request(t, admissionv1.Update, "status", "Pod", alice, pod, old))
	if resp.Allowed || resp.Result.Message != `mutate: expected a v1 Pod, got /v1, Kind=Pod (resource /v1, Resource=pods, subresource "status")` {
		t.Errorf("pods/status: %+v", resp.Result)
	}
}

func TestHandlerValidateDenialMetric(t *testing.T) {
	s, _, _ := newTestServer(t)
	h := s.Handler()
	req := request(t, admissionv1.Create, "binding", "Binding", alice, bindingWith("node-a", map[string]string{ids: "0"}), nil)
	w := post(h, PathValidate, "application/json; charset=utf-8", reviewBody(t, req))
	resp := decodeResponse(t, w.Body.Bytes())
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusForbidden {
		t.Fatalf("response %+v", resp)
	}
	if err := testutil.GatherAndCompare(s.metrics.registry, strings.NewReader(`
# HELP gpu_scheduler_webhook_denials_total [ALPHA] Admission requests denied, by webhook path and reason.
# TYPE gpu_scheduler_webhook_denials_total counter
gpu_scheduler_webhook_denials_total{reason="binding",webhook="validate"} 1
`), "gpu_scheduler_webhook_denials_total"); err != nil {
		t.Error(err)
	}
	if got, err := testutil.GetCounterMetricValue(s.metrics.admissions.WithLabelValues("validate", resultDenied)); err != nil || got != 1 {
		t.Errorf("admissions{validate,denied} = %v (%v), want 1", got, err)
		t.Error(err)
	}
}

func TestHandlerBadInput(t *testing.T) {
	s, _, _ := newTestServer(t)
	h := s.Handler()
	huge := reviewBody(t, request(t, admissionv1.Create, "", "Pod", alice, gpuPod([]corev1.EnvVar{env("BIG", strings.Repeat("x", 70<<10))}), nil))
	deployment := request(t, admissionv1.Create, "", "Deployment", alice, podWith("", nil), nil)
	deployment.Kind.Group, deployment.Resource.Group, deployment.Resource.Resource = "apps", "apps", "deployments"
	tests := []struct {
		name        string
		path        string
		method      string
		contentType string
		body        []byte
		wantCode    int
		wantBody    string
	}{
		{"GET", PathMutate, http.MethodGet, "application/json", nil, http.StatusMethodNotAllowed, "only POST is served\n"},
		{"not JSON", PathMutate, http.MethodPost, "text/plain", []byte("{}"), http.StatusUnsupportedMediaType, "Content-Type must be application/json\n"},
		{"no content type", PathValidate, http.MethodPost, "", []byte("{}"), http.StatusUnsupportedMediaType, "Content-Type must be application/json\n"},
		{"huge body", PathMutate, http.MethodPost, "application/json", huge, http.StatusRequestEntityTooLarge, "request body is larger than 65536 bytes\n"},
		{"malformed JSON", PathMutate, http.MethodPost, "application/json", []byte(`{"apiVersion":`), http.StatusBadRequest, "decode AdmissionReview: unexpected end of JSON input\n"},
		{"wrong review version", PathValidate, http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`),
			http.StatusBadRequest, "decode AdmissionReview: got apiVersion \"admission.k8s.io/v1beta1\" kind \"AdmissionReview\", want admission.k8s.io/v1 AdmissionReview\n"},
		{"no request", PathMutate, http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "AdmissionReview has no request\n"},
		{"no uid", PathMutate, http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`), http.StatusBadRequest, "decode AdmissionReview: request has no uid\n"},
		{"mixed-case fields are not read", PathMutate, http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","Request":{"uid":"x"}}`), http.StatusBadRequest, "AdmissionReview has no request\n"},
		{"wrong kind", PathMutate, http.MethodPost, "application/json", reviewBody(t, deployment), http.StatusOK,
			`"message":"mutate: expected a v1 Pod, got apps/v1, Kind=Deployment (resource apps/v1, Resource=deployments, subresource \"\")"`},
		{"object is not a pod", PathMutate, http.MethodPost, "application/json",
			[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","namespace":"ml","object":{"spec":{"containers":7}}}}`),
			http.StatusOK, `"message":"mutate pod ml/: decode object: json: cannot unmarshal number into Go struct field PodSpec.spec.containers of type []v1.Container"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", w.Code, tc.wantCode, w.Body)
			}
			if tc.wantCode == http.StatusOK {
				if !strings.Contains(w.Body.String(), tc.wantBody) || !strings.Contains(w.Body.String(), `"allowed":false`) {
					t.Errorf("body %s\nwant it to deny with %s", w.Body, tc.wantBody)
				}
				return
			}
			if w.Body.String() != tc.wantBody {
				t.Errorf("body %q, want %q", w.Body, tc.wantBody)
			}
		})
	}
}

func TestRespondRecoversFromPanic(t *testing.T) {
	body := reviewBody(t, request(t, admissionv1.Create, "", "Pod", alice, podWith("", nil), nil))
	code, out, _ := Respond(context.Background(), body, func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, Outcome) {
		panic("boom")
	})
	if code != http.StatusInternalServerError || string(out) != "internal error answering request uid-1" {
		t.Errorf("got %d %q", code, out)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{EnvMode: "gpu", MaxRequestBytes: 0, ShutdownGrace: -time.Second}
	err := cfg.Validate()
	want := "both a serving certificate file and a key file are required: the webhook serves HTTPS only\n" +
		"visible devices env \"gpu\" is not one of cuda, nvidia, both, none\n" +
		"no scheduler identity: name at least one user or group that may write the GPU allocation\n" +
		"max request bytes 0 must be positive\n" +
		"shutdown grace -1s must not be negative"
	if err == nil || err.Error() != want {
		t.Errorf("Validate() = %v\nwant %s", err, want)
	}
	cfg = DefaultConfig()
	cfg.CertFile, cfg.KeyFile = "/nonexistent/tls.crt", "/nonexistent/tls.key"
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "load serving certificate /nonexistent/tls.crt") {
		t.Errorf("New with missing files: %v", err)
	}
}

// TestServeTLSAndRotation runs the server on a loopback port, checks health, readiness and a
// review over TLS, then rotates the certificate files to one from another CA and waits until
// new connections are served with it.
func TestServeTLSAndRotation(t *testing.T) {
	s, ca, dir := newTestServer(t)
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
		if s.ready.Load() {
			t.Error("still ready after shutdown")
		}
	})
	base := "https://" + ln.Addr().String()

	client := func(caPEM []byte) *http.Client {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		// No keep-alive: every request is a new handshake, so it sees the current certificate.
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true, ForceAttemptHTTP2: true}}
	}
	oldClient := client(ca.PEM)
	get := func(c *http.Client, path string) (int, string, error) {
		resp, err := c.Get(base + path)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	for _, p := range []string{PathHealthz, PathReadyz} {
		code, body, err := get(oldClient, p)
		if err != nil || code != http.StatusOK || body != "ok\n" {
			t.Fatalf("GET %s: %d %q %v", p, code, body, err)
		}
	}
	resp, err := oldClient.Post(base+PathMutate, "application/json", bytes.NewReader(reviewBody(t, request(t, admissionv1.Create, "", "Pod", alice, gpuPod(nil), nil))))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if r := decodeResponse(t, b); !r.Allowed || len(r.Patch) == 0 {
		t.Fatalf("mutate over TLS: %s", b)
	}
	code, body, err := get(oldClient, PathMetrics)
	if err != nil || code != http.StatusUnauthorized {
		t.Fatalf("GET %s without a token: %d %v, want 401 from the guard\n%s", PathMetrics, code, err, body)
	}
	req, err := http.NewRequest(http.MethodGet, base+PathMetrics, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err = oldClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "gpu_scheduler_webhook_requests_total") {
		t.Fatalf("GET %s with a token: %d\n%s", PathMetrics, resp.StatusCode, b)
	}
	// Go's TLS server answers plain HTTP with a 400 and closes; nothing is served.
	if resp, err := http.Get("http://" + ln.Addr().String() + PathHealthz); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP got %d; the server must be HTTPS only", resp.StatusCode)
		}
	}

	// Rotate to a certificate from a new CA.
	newCA, err := webhooktest.NewCA("rotated-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := newCA.Issue("gpu-webhook", webhooktest.Loopback.IPs, webhooktest.Loopback.DNSNames)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pair.Write(dir); err != nil {
		t.Fatal(err)
	}
	newClient := client(newCA.PEM)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _, err := get(newClient, PathHealthz)
		return err == nil && code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the rotated certificate was not served: %v", err)
	}
	var certErr *tls.CertificateVerificationError
	if _, _, err := get(oldClient, PathHealthz); !errors.As(err, &certErr) {
		t.Errorf("a client trusting only the old CA got %v; want a certificate verification error", err)
	}
}

// testToken is the one bearer token testGuard lets through; the real guard asks the apiserver
// (metricsauth), which the integration tests exercise.
const testToken = "metrics-reader"

func testGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Without a guard the server has no /metrics: it is never served unguarded by omission.
func TestHandlerNoMetricsWithoutGuard(t *testing.T) {
	s, _, _ := newTestServer(t)
	s.cfg.MetricsGuard = nil
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, PathMetrics, nil))
	if w.Code != http.StatusNotFound {
		t.Errorf("GET %s without a guard: %d, want 404", PathMetrics, w.Code)
	}
}

func TestAdmitterMutateSchedulerNameAndUnknownKeys(t *testing.T) {
	a := &Admitter{Mode: EnvModeCUDA, Scheduler: testScheduler, SchedulerName: "canary", SiblingSchedulerNames: []string{"team-b"}, RefuseOtherSchedulers: true}
	ctx := context.Background()

	// A claim pod of the default scheduler goes to this release's.
	pod := gpuPod(nil)
	pod.Spec.SchedulerName = corev1.DefaultSchedulerName
	resp, out := a.Mutate(ctx, request(t, admissionv1.Create, "", "Pod", alice, pod, nil))
	if !resp.Allowed || !out.Mutated {
		t.Fatalf("default scheduler: %+v %+v", resp, out)
	}
	var ops []PatchOp
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	if got := applyPatch(t, pod, ops); got.Spec.SchedulerName != "canary" || len(got.Spec.Containers[0].Env) == 0 {
		t.Errorf("after patch: schedulerName %q, env %+v", got.Spec.SchedulerName, got.Spec.Containers[0].Env)
	}

	// Another scheduler: refused, naming the annotation and both schedulers.
	pod.Spec.SchedulerName = "volcano"
	resp, out = a.Mutate(ctx, request(t, admissionv1.Create, "", "Pod", alice, pod, nil))
	if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity || out.DenyReason != ReasonInvalid ||
		!strings.Contains(resp.Result.Message, "pod ml/train: spec.schedulerName: the pod names a GpuClaim in annotation gpu.scheduling/claim, which only the scheduler \"canary\" places, but asks for scheduler \"volcano\"") {
		t.Errorf("other scheduler: %+v %+v", resp.Result, out)
	}
	// A sibling release's pod is left to it.
	pod.Spec.SchedulerName = "team-b"
	if resp, _ = a.Mutate(ctx, request(t, admissionv1.Create, "", "Pod", alice, pod, nil)); !resp.Allowed {
		t.Errorf("sibling scheduler: %+v", resp.Result)
	}

	// A misspelt key under our prefix: refused with the key named, whatever the scheduler.
	typo := podWith("", nil)
	typo.Annotations = map[string]string{"gpu.scheduling/claim-templat": "t"}
	resp, out = a.Mutate(ctx, request(t, admissionv1.Create, "", "Pod", alice, typo, nil))
	if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity || out.DenyReason != ReasonInvalid ||
		!strings.Contains(resp.Result.Message, `metadata.annotations: unknown key "gpu.scheduling/claim-templat" under gpu.scheduling/: known keys are gpu.scheduling/claim, gpu.scheduling/claim-template`) {
		t.Errorf("unknown key: %+v %+v", resp.Result, out)
	}
}
