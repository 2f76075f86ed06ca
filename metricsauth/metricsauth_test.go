package metricsauth

import (
	"crypto/x509"
	"strings"
	"testing"
)

func TestServingTLS(t *testing.T) {
	cfg, err := ServingTLS("", "", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 1 {
		t.Fatalf("%d certificates, want 1 self-signed", len(cfg.Certificates))
	}
	cert, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
	if _, err := ServingTLS("/etc/tls.crt", "", ""); err == nil || !strings.Contains(err.Error(), "give both or neither") {
		t.Errorf("a certificate without a key: %v", err)
	}
	if _, err := ServingTLS("/nonexistent.crt", "/nonexistent.key", ""); err == nil || !strings.Contains(err.Error(), "/nonexistent.crt") {
		t.Errorf("missing files: %v", err)
	}
}
