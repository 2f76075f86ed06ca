// Package certrotation makes and renews the webhook's serving certificate inside the webhook,
// without cert-manager: open-policy-agent's cert-controller keeps a CA and a serving certificate
// in a Secret (ca.crt, ca.key, tls.crt, tls.key), renews them before they expire, and writes the
// CA into the caBundle of the webhook configurations. The Secret is mounted into the pod; the
// server re-reads the mounted files when the kubelet updates them.
//
// The chart ships the Secret empty, so a re-render (helm template, Argo CD) never produces a new
// certificate: only the rotator writes one.
package certrotation

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Defaults of Options.
const (
	DefaultCAValidity     = 10 * 365 * 24 * time.Hour
	DefaultCertValidity   = 365 * 24 * time.Hour
	DefaultRenewBefore    = 90 * 24 * time.Hour
	DefaultCheckFrequency = 12 * time.Hour
)

// Options say which Secret holds the certificate, whom it names and which configurations get
// its CA.
type Options struct {
	// Secret is the Secret the rotator owns; it must exist (the chart creates it empty).
	Secret types.NamespacedName
	// Service is the webhook's Service: the certificate is for its DNS names.
	Service types.NamespacedName
	// WebhookConfigurations are the names of MutatingWebhookConfigurations and
	// ValidatingWebhookConfigurations whose every webhook gets the CA bundle.
	Mutating, Validating []string
	// CertFile is where the Secret's tls.crt is mounted; the rotator reports ready once it is
	// there (the key is tls.key in the same folder).
	CertFile string
	// Validity of the CA and of the serving certificate, how long before its end the serving
	// certificate is renewed, and how often that is checked. Zero: the defaults above.
	CAValidity, CertValidity, RenewBefore, CheckFrequency time.Duration
}

// Validate names the first option that cannot work.
func (o Options) Validate() error {
	switch {
	case o.Secret.Namespace == "" || o.Secret.Name == "":
		return fmt.Errorf("certificate Secret %q: want namespace/name", o.Secret.String())
	case o.Service.Namespace == "" || o.Service.Name == "":
		return fmt.Errorf("webhook Service %q: want namespace/name", o.Service.String())
	case len(o.Mutating)+len(o.Validating) == 0:
		return errors.New("no webhook configuration to write the CA bundle into")
	case o.CertFile == "" || filepath.Base(o.CertFile) != "tls.crt":
		return fmt.Errorf("certificate file %q: the rotator's Secret is mounted with the key tls.crt, so the file must be named tls.crt", o.CertFile)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"CA validity", o.CAValidity}, {"certificate validity", o.CertValidity}, {"renew-before", o.RenewBefore}, {"check frequency", o.CheckFrequency}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s is negative", d.name, d.v)
		}
	}
	cert, renew := or(o.CertValidity, DefaultCertValidity), or(o.RenewBefore, DefaultRenewBefore)
	if renew >= cert {
		return fmt.Errorf("renew-before %s must be shorter than the certificate validity %s, or the certificate is renewed at every check", renew, cert)
	}
	if ca := or(o.CAValidity, DefaultCAValidity); cert > ca {
		return fmt.Errorf("certificate validity %s outlives the CA validity %s", cert, ca)
	}
	return nil
}

func or(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// DNSName is the name the serving certificate is issued for (the Service's in-cluster name);
// the certificate also holds the shorter forms and the cluster.local one.
func (o Options) DNSName() string { return o.Service.Name + "." + o.Service.Namespace + ".svc" }

// Start runs the rotator until ctx ends. ready is closed once the certificate is mounted at
// CertFile and the CA is in every configuration; done receives the rotator's end (nil after ctx
// ends, else why it stopped: the process should exit then).
func Start(ctx context.Context, cfg *rest.Config, o Options) (ready <-chan struct{}, done <-chan error, err error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	logger := klog.FromContext(ctx)
	// cert-controller logs through controller-runtime's logger.
	ctrl.SetLogger(logger)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, fmt.Errorf("certificate rotator scheme: %w", err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme: scheme,
		// The webhook serves its own metrics and probes; every replica rotates (writes conflict
		// on resourceVersion and are retried), so no leader is elected.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Logger:                 logger,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("certificate rotator: %w", err)
	}
	svc := o.Service
	isReady := make(chan struct{})
	var hooks []rotator.WebhookInfo
	for _, n := range o.Mutating {
		hooks = append(hooks, rotator.WebhookInfo{Name: n, Type: rotator.Mutating})
	}
	for _, n := range o.Validating {
		hooks = append(hooks, rotator.WebhookInfo{Name: n, Type: rotator.Validating})
	}
	cr := &rotator.CertRotator{
		SecretKey:      o.Secret,
		CertDir:        filepath.Dir(o.CertFile),
		CAName:         svc.Name + "-ca",
		CAOrganization: "gpu-scheduler",
		DNSName:        o.DNSName(),
		ExtraDNSNames: []string{svc.Name, svc.Name + "." + svc.Namespace,
			svc.Name + "." + svc.Namespace + ".svc.cluster.local"},
		// controller-runtime refuses a second controller of the same name in one process, and
		// tests start several rotators in one.
		ControllerName:         fmt.Sprintf("cert-rotator-%d", rotators.Add(1)),
		IsReady:                isReady,
		Webhooks:               hooks,
		FieldOwner:             "gpu-webhook",
		CaCertDuration:         or(o.CAValidity, DefaultCAValidity),
		ServerCertDuration:     or(o.CertValidity, DefaultCertValidity),
		LookaheadInterval:      or(o.RenewBefore, DefaultRenewBefore),
		RotationCheckFrequency: or(o.CheckFrequency, DefaultCheckFrequency),
	}
	if err := rotator.AddRotator(mgr, cr); err != nil {
		return nil, nil, fmt.Errorf("certificate rotator for Secret %s: %w", o.Secret, err)
	}
	errc := make(chan error, 1)
	go func() {
		err := mgr.Start(ctx)
		if err != nil {
			err = fmt.Errorf("certificate rotator for Secret %s: %w", o.Secret, err)
		}
		errc <- err
	}()
	logger.Info("Rotating the webhook certificate", "secret", o.Secret, "dnsName", o.DNSName(), "mutating", o.Mutating, "validating", o.Validating)
	return isReady, errc, nil
}

// rotators numbers the rotators of this process.
var rotators atomic.Int64
