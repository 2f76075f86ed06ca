// Package run starts the webhook server for tests: apart from webhooktest, which the webhook's
// own internal tests import, so that it may import the webhook.
package run

import (
	"context"
	"net"
	"testing"

	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest"
)

// Webhook runs a webhook server with cfg on a loopback port until the test ends, with a serving
// certificate from a throw-away CA filled into cfg, and returns its URL and that CA's PEM (the
// caBundle of the webhook configurations that point at it).
func Webhook(ctx context.Context, t testing.TB, cfg webhook.Config) (url string, caPEM []byte) {
	t.Helper()
	ca, err := webhooktest.NewCA("gpu-webhook-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue("gpu-webhook", webhooktest.Loopback.IPs, webhooktest.Loopback.DNSNames)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CertFile, cfg.KeyFile, err = pair.Write(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	srv, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	})
	return "https://" + ln.Addr().String(), ca.PEM
}
