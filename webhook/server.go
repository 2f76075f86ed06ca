package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Paths the server answers on.
const (
	PathMutate   = "/mutate"
	PathValidate = "/validate"
	PathHealthz  = "/healthz"
	PathReadyz   = "/readyz"
	PathMetrics  = "/metrics"
)

// Defaults for Config.
const (
	DefaultAddr = ":8443"
	// DefaultMaxRequestBytes bounds an AdmissionReview body. A review holds the object and, on
	// UPDATE, the old object; etcd caps one object at about 1.5 MiB, so 7 MiB leaves room while
	// refusing bodies that only serve to exhaust memory.
	DefaultMaxRequestBytes = 7 << 20
	// DefaultShutdownGrace is how long in-flight requests may finish after the context ends.
	DefaultShutdownGrace = 10 * time.Second
)

// Config configures a Server.
type Config struct {
	// Addr is where Run listens (host:port). Serve takes a listener instead.
	Addr string
	// CertFile and KeyFile are the serving certificate (PEM, may include intermediates) and key.
	// They are re-read when they change on disk, so a rotated certificate needs no restart.
	CertFile, KeyFile string
	// EnvMode selects the variables the mutating webhook injects.
	EnvMode EnvMode
	// Scheduler is who may write the allocation annotations.
	Scheduler SchedulerIdentity
	// SchedulerName is the spec.schedulerName of the pods this release mutates
	// (gpuv1.SchedulerName when empty).
	SchedulerName string
	// Resource adds the device plugin's GPU resource to claim pods when its Name is set.
	Resource ResourceConfig
	// SiblingSchedulerNames are the schedulerNames of other gpu-scheduler releases in the
	// cluster. Their schedulers' Bindings of their own pods reach this release's guard too (a
	// Binding names no scheduler); the guard lets those through and leaves them to the sibling's
	// guard. SiblingPod reads a pod's schedulerName (ClusterReader.SiblingPod); required with
	// SiblingSchedulerNames.
	SiblingSchedulerNames []string
	SiblingPod            func(ctx context.Context, namespace, name string) (string, error)
	// RefuseOtherSchedulers refuses pods that name a claim or a claim template but ask for a
	// scheduler other than SchedulerName, a sibling's or the default one (which the webhook
	// replaces with SchedulerName).
	RefuseOtherSchedulers bool
	// ClientCAFile, when set, is a PEM bundle of the CAs whose client certificates may call
	// /mutate and /validate (the kube-apiserver's, configured in its AdmissionConfiguration).
	// Callers without such a certificate get 403: they could otherwise read other namespaces'
	// claims through the answers and spend the webhook's API budget.
	ClientCAFile string
	// ClientNames, with ClientCAFile, also limits the callers to certificates whose common
	// name or a DNS name is one of these. Empty: any certificate of the CA.
	ClientNames []string
	// MaxRequestBytes bounds a request body; larger bodies get 413.
	MaxRequestBytes int64
	// ShutdownGrace bounds how long in-flight requests may finish when the context ends.
	ShutdownGrace time.Duration
	// MetricsGuard wraps /metrics so that only callers the apiserver authorises reach it
	// (metricsauth.NewGuard). Nil serves no /metrics at all: the endpoint is never open to
	// anonymous callers by omission.
	MetricsGuard func(http.Handler) http.Handler
}

// DefaultConfig returns the configuration the flags start from.
func DefaultConfig() Config {
	return Config{
		Addr:            DefaultAddr,
		EnvMode:         EnvModeCUDA,
		Scheduler:       SchedulerIdentity{Users: []string{DefaultSchedulerUser}},
		MaxRequestBytes: DefaultMaxRequestBytes,
		ShutdownGrace:   DefaultShutdownGrace,
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.CertFile == "" || c.KeyFile == "" {
		errs = append(errs, errors.New("both a serving certificate file and a key file are required: the webhook serves HTTPS only"))
	}
	if _, err := ParseEnvMode(string(c.EnvMode)); err != nil {
		errs = append(errs, err)
	}
	if c.Resource.Name != "" && c.Resource.Count == nil {
		return fmt.Errorf("resource %s: no way to read the pods' GPU counts (Resource.Count)", c.Resource.Name)
	}
	if c.Resource.Name != "" && c.EnvMode != EnvModeNone {
		// The device plugin sets the variables to the container's own numbering; ours would
		// override them with host IDs.
		return fmt.Errorf("resource %s: the device plugin hands the GPUs over, so the visible-devices env must be %q, not %q", c.Resource.Name, EnvModeNone, c.EnvMode)
	}
	if len(c.Scheduler.Users) == 0 && len(c.Scheduler.Groups) == 0 {
		errs = append(errs, errors.New("no scheduler identity: name at least one user or group that may write the GPU allocation"))
	}
	own := c.SchedulerName
	if own == "" {
		own = gpuv1.SchedulerName
	}
	for _, n := range c.SiblingSchedulerNames {
		if n == "" || n == own {
			errs = append(errs, fmt.Errorf("sibling scheduler name %q: must be another release's scheduler name, not empty or this release's %q", n, own))
		}
	}
	if len(c.SiblingSchedulerNames) > 0 && c.SiblingPod == nil {
		errs = append(errs, errors.New("sibling scheduler names need a way to read pods (SiblingPod)"))
	}
	if len(c.ClientNames) > 0 && c.ClientCAFile == "" {
		errs = append(errs, errors.New("client names need a client CA file: names are read from verified certificates only"))
	}
	if c.MaxRequestBytes <= 0 {
		errs = append(errs, fmt.Errorf("max request bytes %d must be positive", c.MaxRequestBytes))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("shutdown grace %s must not be negative", c.ShutdownGrace))
	}
	return errors.Join(errs...)
}

// Server is the HTTPS admission webhook server.
type Server struct {
	cfg      Config
	admitter *Admitter
	metrics  *serverMetrics
	cert     *dynamiccertificates.DynamicCertKeyPairContent
	clientCA *dynamiccertificates.DynamicFileCAContent
	tls      *dynamiccertificates.DynamicServingCertificateController
	ready    atomic.Bool
}

// New validates cfg and loads the serving certificate, so that a missing or broken certificate
// fails at start-up rather than at the first TLS handshake.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhook config: %w", err)
	}
	cert, err := dynamiccertificates.NewDynamicServingContentFromFiles("gpu-webhook", cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load serving certificate %s and key %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The kube-apiserver speaks HTTP/2 to webhooks when offered.
		NextProtos: []string{"h2", "http/1.1"},
	}
	var (
		clientCA         *dynamiccertificates.DynamicFileCAContent
		clientCAProvider dynamiccertificates.CAContentProvider
	)
	if cfg.ClientCAFile != "" {
		if clientCA, err = dynamiccertificates.NewDynamicCAContentFromFile("gpu-webhook-client-ca", cfg.ClientCAFile); err != nil {
			return nil, fmt.Errorf("load client CA %s: %w", cfg.ClientCAFile, err)
		}
		clientCAProvider = clientCA
		// Verified when given: the kubelet's probes of /healthz and /readyz present none. The
		// admission paths refuse a request without one (callerAllowed).
		base.ClientAuth = tls.VerifyClientCertIfGiven
	}
	ctrl := dynamiccertificates.NewDynamicServingCertificateController(base, clientCAProvider, cert, nil, nil)
	cert.AddListener(ctrl)
	if clientCA != nil {
		clientCA.AddListener(ctrl)
	}
	if err := ctrl.RunOnce(); err != nil {
		return nil, fmt.Errorf("build TLS config from %s: %w", cfg.CertFile, err)
	}
	return &Server{
		cfg: cfg,
		admitter: &Admitter{Mode: cfg.EnvMode, Scheduler: cfg.Scheduler, SchedulerName: cfg.SchedulerName, Resource: cfg.Resource,
			SiblingSchedulerNames: cfg.SiblingSchedulerNames, SiblingPod: cfg.SiblingPod, RefuseOtherSchedulers: cfg.RefuseOtherSchedulers},
		metrics:  newServerMetrics(),
		cert:     cert,
		clientCA: clientCA,
		tls:      ctrl,
	}, nil
}

// Run listens on cfg.Addr and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves HTTPS on ln until ctx ends, then lets in-flight requests finish (up to
// ShutdownGrace). It closes ln. Tests run the server in-process this way on a loopback port.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Watch the certificate files and rebuild the TLS config when they change.
	go s.cert.Run(ctx, 1)
	if s.clientCA != nil {
		go s.clientCA.Run(ctx, 1)
	}
	go s.tls.Run(1, ctx.Done())

	srv := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         &tls.Config{GetConfigForClient: s.tls.GetConfigForClient},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Requests keep the logger but not the cancellation: in-flight reviews may finish
		// during the grace period after ctx ends.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.ServeTLS(ln, "", "") }()
	s.ready.Store(true)
	logger.Info("Serving admission webhook", "address", ln.Addr().String(), "visibleDevicesEnv", s.cfg.EnvMode)

	select {
	case err := <-errCh:
		s.ready.Store(false)
		return fmt.Errorf("serve webhook on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.ready.Store(false)
	logger.Info("Shutting down admission webhook", "address", ln.Addr().String())
	shutdownCtx, done := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownGrace)
	defer done()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down webhook on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Handler routes the webhook, health and metrics paths. It is exported so that tests can
// drive it without TLS.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(PathMutate, s.admissionHandler("mutate", s.admitter.Mutate))
	mux.Handle(PathValidate, s.admissionHandler("validate", s.admitter.Validate))
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok") })
	mux.HandleFunc(PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			writeText(w, http.StatusServiceUnavailable, "not serving")
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	if s.cfg.MetricsGuard != nil {
		mux.Handle(PathMetrics, s.cfg.MetricsGuard(s.metrics.handler()))
	}
	return mux
}

// callerAllowed checks the caller's client certificate when ClientCAFile is set: the TLS
// handshake verified it against the CA when one was given, so a request without a verified
// chain came without a certificate.
func (s *Server) callerAllowed(r *http.Request) (string, bool) {
	if s.cfg.ClientCAFile == "" {
		return "", true
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "a client certificate signed by the webhook's client CA is required", false
	}
	if len(s.cfg.ClientNames) == 0 {
		return "", true
	}
	leaf := r.TLS.VerifiedChains[0][0]
	if slices.Contains(s.cfg.ClientNames, leaf.Subject.CommonName) {
		return "", true
	}
	for _, n := range leaf.DNSNames {
		if slices.Contains(s.cfg.ClientNames, n) {
			return "", true
		}
	}
	return fmt.Sprintf("client certificate %q is not one of the allowed callers", leaf.Subject.CommonName), false
}

// AdmitFunc answers one decoded admission request.
type AdmitFunc func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, Outcome)

func (s *Server) admissionHandler(name string, admit AdmitFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if msg, ok := s.callerAllowed(r); !ok {
			s.metrics.observe(name, http.StatusForbidden, Outcome{}, start)
			klog.FromContext(r.Context()).V(2).Info("Refused an admission request from a caller without an allowed client certificate", "webhook", name, "remote", r.RemoteAddr, "reason", msg)
			writeText(w, http.StatusForbidden, msg)
			return
		}
		code, body, outcome := s.review(r, w, admit)
		s.metrics.observe(name, code, outcome, start)
		if outcome.Mutated {
			s.metrics.mutations.WithLabelValues(fmt.Sprint(outcome.Replaced)).Inc()
		}
		if outcome.DenyReason != "" {
			s.metrics.denials.WithLabelValues(name, outcome.DenyReason).Inc()
		}
		if code != http.StatusOK {
			klog.FromContext(r.Context()).V(2).Info("Refused an admission request", "webhook", name, "code", code, "error", string(body))
			writeText(w, code, string(body))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
}

// review reads, decodes and answers one request. Anything that is not a well-formed
// AdmissionReview gets a non-200 code with a one-line reason and never reaches admit.
func (s *Server) review(r *http.Request, w http.ResponseWriter, admit AdmitFunc) (code int, body []byte, outcome Outcome) {
	if r.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, []byte("only POST is served"), Outcome{}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return http.StatusUnsupportedMediaType, []byte("Content-Type must be application/json"), Outcome{}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return http.StatusRequestEntityTooLarge, fmt.Appendf(nil, "request body is larger than %d bytes", mbe.Limit), Outcome{}
		}
		return http.StatusBadRequest, fmt.Appendf(nil, "read request body: %v", err), Outcome{}
	}
	return Respond(r.Context(), data, admit)
}

// Respond turns a request body into the response body. It is the part of the server that sees
// untrusted bytes, so it is what the fuzz tests drive; a panic in admit becomes a 500.
func Respond(ctx context.Context, data []byte, admit AdmitFunc) (code int, body []byte, outcome Outcome) {
	review, err := DecodeReview(data)
	if err != nil {
		return http.StatusBadRequest, []byte(err.Error()), Outcome{}
	}
	defer func() {
		if p := recover(); p != nil {
			klog.FromContext(ctx).Error(fmt.Errorf("%v", p), "Admission panicked", "uid", review.Request.UID)
			code, body, outcome = http.StatusInternalServerError, fmt.Appendf(nil, "internal error answering request %s", review.Request.UID), Outcome{}
		}
	}()
	resp, outcome := admit(ctx, review.Request)
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	body, err = json.Marshal(out)
	if err != nil {
		return http.StatusInternalServerError, fmt.Appendf(nil, "encode response to request %s: %v", review.Request.UID, err), Outcome{}
	}
	return http.StatusOK, body, outcome
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}
