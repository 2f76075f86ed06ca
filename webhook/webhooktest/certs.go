// Package webhooktest has helpers for tests that run the webhook server: a throw-away CA and a
// serving certificate signed by it, written where the server reads them.
package webhooktest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// CA is a throw-away certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate, what a webhook configuration's caBundle holds.
	PEM []byte
}

// NewCA creates a CA named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for CA %q: %w", commonName, err)
	}
	c, err := cert.NewSelfSignedCACert(cert.Config{CommonName: commonName}, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA %q: %w", commonName, err)
	}
	pem, err := cert.EncodeCertificates(c)
	if err != nil {
		return nil, fmt.Errorf("encode CA %q: %w", commonName, err)
	}
	return &CA{Cert: c, Key: key, PEM: pem}, nil
}

// ServingPair is a serving certificate and its key, PEM encoded.
type ServingPair struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a serving certificate for the given IPs and DNS names (the apiserver checks
// subject alternative names only), valid for a day.
func (ca *CA) Issue(commonName string, ips []net.IP, dnsNames []string) (*ServingPair, error) {
	return ca.sign(commonName, x509.ExtKeyUsageServerAuth, ips, dnsNames)
}

// sign signs a certificate of one extended key usage for commonName, valid for a day.
func (ca *CA) sign(commonName string, usage x509.ExtKeyUsage, ips []net.IP, dnsNames []string) (*ServingPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for %q: %w", commonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("serial for %q: %w", commonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate %q: %w", commonName, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate %q: %w", commonName, err)
	}
	certPEM, err := cert.EncodeCertificates(leaf)
	if err != nil {
		return nil, fmt.Errorf("encode certificate %q: %w", commonName, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, fmt.Errorf("encode key of %q: %w", commonName, err)
	}
	return &ServingPair{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Write writes the pair to dir/tls.crt and dir/tls.key (the names a kubernetes.io/tls secret
// mounts) and returns the paths. The key is written first and both are renamed into place, so a
// watcher never reads a certificate whose key is not there yet.
func (p *ServingPair) Write(dir string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, f := range []struct {
		path string
		data []byte
	}{{keyFile, p.KeyPEM}, {certFile, p.CertPEM}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			return "", "", fmt.Errorf("write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			return "", "", fmt.Errorf("rename %s to %s: %w", tmp, f.path, err)
		}
	}
	return certFile, keyFile, nil
}

// Loopback is what a certificate for a server on 127.0.0.1 should name.
var Loopback = struct {
	IPs      []net.IP
	DNSNames []string
}{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}

// IssueClient signs a client certificate for commonName (the kube-apiserver's, calling the
// webhook), valid for a day.
func (ca *CA) IssueClient(commonName string) (*ServingPair, error) {
	return ca.sign(commonName, x509.ExtKeyUsageClientAuth, nil, nil)
}
