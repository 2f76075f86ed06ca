package cluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestWritePKI(t *testing.T) {
	dir := t.TempDir()
	server := "https://127.0.0.1:6443"
	p, err := writePKI(dir, server, nil, idAdmin, idScheduler)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	serving := readCert(t, p.servingCert)
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("serving certificate not valid for 127.0.0.1: %v", err)
	}
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kubernetes.default.svc"}); err != nil {
		t.Errorf("serving certificate not valid for kubernetes.default.svc: %v", err)
	}
	for _, id := range []identity{idAdmin, idScheduler} {
		cfg, err := clientcmd.LoadFromFile(p.kubeconfig(id))
		if err != nil {
			t.Fatalf("kubeconfig for %s: %v", id.user, err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if cfg.Clusters[ctx.Cluster].Server != server {
			t.Errorf("%s: server %q", id.user, cfg.Clusters[ctx.Cluster].Server)
		}
		block, _ := pem.Decode(cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData)
		if block == nil {
			t.Fatalf("%s: no client certificate", id.user)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if c.Subject.CommonName != id.user || !slices.Equal(c.Subject.Organization, id.groups) {
			t.Errorf("%s: subject %v, want CN=%s O=%v", id.user, c.Subject, id.user, id.groups)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: client certificate does not verify: %v", id.user, err)
		}
	}
	if _, err := os.Stat(p.serviceAcctKy); err != nil {
		t.Errorf("service-account key: %v", err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
