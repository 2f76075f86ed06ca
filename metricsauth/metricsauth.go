// Package metricsauth guards the components' /metrics endpoints the way kube-scheduler guards
// its own: the caller's bearer token is checked with a TokenReview and its right to GET the
// path with a SubjectAccessReview, both answered by the apiserver. A request without a token
// gets 401, a token without the right gets 403; nothing is served anonymously. Health probes
// (/healthz, /readyz) stay open, as the kubelet probes them without credentials.
//
// The checks are controller-runtime's metrics filters (the gpu-controller's manager uses them
// directly); this package applies the same filter to the plain http.Handlers of the agent and
// the webhook, and gives the agent a serving certificate when it has none of its own.
package metricsauth

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// Guard wraps handlers so that only callers the apiserver authenticates and authorises for
// the request's path and verb reach them.
type Guard func(http.Handler) http.Handler

// NewGuard builds a Guard that asks the apiserver behind cfg. cfg's identity needs create on
// tokenreviews.authentication.k8s.io and subjectaccessreviews.authorization.k8s.io (the
// chart's system:auth-delegator binding).
func NewGuard(cfg *rest.Config, component string) (Guard, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: HTTP client for the metrics authentication: %w", component, err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("%s: delegated authentication and authorisation of /metrics: %w", component, err)
	}
	logger := klog.Background().WithName(component).WithName("metrics-auth")
	return func(h http.Handler) http.Handler {
		guarded, err := filter(logger, h)
		if err != nil {
			// controller-runtime's filter never fails to wrap; refuse everything if it ever does
			// rather than serve unguarded.
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "metrics authentication unavailable", http.StatusInternalServerError)
			})
		}
		return guarded
	}, nil
}

// ServingTLS returns the TLS configuration of a metrics endpoint: the certificate and key
// files when both are given (a mounted Secret, say), otherwise a self-signed certificate made
// at start-up for host, as kube-scheduler and controller-runtime do. Prometheus then scrapes
// with insecureSkipVerify, which still keeps the bearer token off the wire in clear text.
func ServingTLS(certFile, keyFile, host string) (*tls.Config, error) {
	var (
		cert tls.Certificate
		err  error
	)
	switch {
	case certFile != "" && keyFile != "":
		cert, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the metrics serving certificate %s and key %s: %w", certFile, keyFile, err)
		}
	case certFile != "" || keyFile != "":
		return nil, fmt.Errorf("metrics serving certificate %q and key %q: give both or neither", certFile, keyFile)
	default:
		if host == "" {
			if host, err = os.Hostname(); err != nil {
				host = "localhost"
			}
		}
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("generating a self-signed metrics serving certificate for %s: %w", host, err)
		}
		if cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return nil, fmt.Errorf("parsing the self-signed metrics serving certificate: %w", err)
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}
