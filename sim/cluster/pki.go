package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is long enough for any test or simulation run; the CA lives and dies with the
// cluster's work directory.
const certValidity = 7 * 24 * time.Hour

// identity is a client the apiserver authenticates by certificate: CN is the user, O the groups.
type identity struct {
	file   string // kubeconfig file name in the pki dir
	user   string
	groups []string
	// pair, when set, also writes the certificate and key as <pair>.crt and <pair>.key, for a
	// client that takes files rather than a kubeconfig (the apiserver's kubelet client).
	pair string
}

// The identities the components use. The controller manager and scheduler get the users the
// default RBAC policy binds (system:kube-controller-manager, system:kube-scheduler), so RBAC is
// exercised as in a real cluster; kwok plays every kubelet and so is an administrator.
var (
	idAdmin             = identity{file: "admin.kubeconfig", user: "gpu-sim-admin", groups: []string{"system:masters"}}
	idControllerManager = identity{file: "kube-controller-manager.kubeconfig", user: "system:kube-controller-manager"}
	idScheduler         = identity{file: "kube-scheduler.kubeconfig", user: "system:kube-scheduler"}
	idKwok              = identity{file: "kwok.kubeconfig", user: "kwok", groups: []string{"system:masters"}}
	// The real node's clients (Config.RealNode): kube-proxy as the default RBAC policy's
	// system:kube-proxy, and the apiserver's client of the kubelet API, which the kubelet
	// authorizes through SubjectAccessReview (nodes/proxy, nodes/log: an administrator).
	idKubeProxy     = identity{file: "kube-proxy.kubeconfig", user: "system:kube-proxy"}
	idKubeletClient = identity{file: "apiserver-kubelet-client.kubeconfig", user: "kube-apiserver-kubelet-client",
		groups: []string{"system:masters"}, pair: "apiserver-kubelet-client"}
)

// idKubelet is the identity of the real node's kubelet: the Node authorizer's system:node:<name>.
func idKubelet(node string) identity {
	return identity{file: "kubelet.kubeconfig", user: "system:node:" + node, groups: []string{"system:nodes"}}
}

// pki holds the paths of the files written by writePKI.
type pki struct {
	dir           string
	caCert        string
	servingCert   string
	servingKey    string
	serviceAcctKy string
	caPEM         []byte
}

func (p pki) kubeconfig(id identity) string { return filepath.Join(p.dir, id.file) }

// writePKI creates a CA, the apiserver's serving certificate for 127.0.0.1 (and extraIPs), the
// service-account signing key and a kubeconfig with a client certificate for each identity.
// ECDSA P-256 keys keep this to milliseconds.
func writePKI(dir, server string, extraIPs []net.IP, ids ...identity) (pki, error) {
	p := pki{
		dir:           dir,
		caCert:        filepath.Join(dir, "ca.crt"),
		servingCert:   filepath.Join(dir, "apiserver.crt"),
		servingKey:    filepath.Join(dir, "apiserver.key"),
		serviceAcctKy: filepath.Join(dir, "service-account.key"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, fmt.Errorf("creating pki dir %s: %w", dir, err)
	}
	caKey, err := newKey()
	if err != nil {
		return p, err
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "gpu-sim-ca"}, caKey)
	if err != nil {
		return p, fmt.Errorf("creating CA certificate: %w", err)
	}
	if p.caPEM, err = cert.EncodeCertificates(ca); err != nil {
		return p, fmt.Errorf("encoding CA certificate: %w", err)
	}
	if err := os.WriteFile(p.caCert, p.caPEM, 0o600); err != nil {
		return p, fmt.Errorf("writing %s: %w", p.caCert, err)
	}

	serving := cert.Config{
		CommonName: "kube-apiserver",
		AltNames: cert.AltNames{
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"},
			IPs: append([]net.IP{net.ParseIP(loopback), net.ParseIP(serviceClusterIP)}, extraIPs...),
		},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	certPEM, keyPEM, err := signedPair(ca, caKey, serving)
	if err != nil {
		return p, fmt.Errorf("creating apiserver serving certificate: %w", err)
	}
	if err := writePair(p.servingCert, certPEM, p.servingKey, keyPEM); err != nil {
		return p, err
	}

	saKey, err := newKey()
	if err != nil {
		return p, err
	}
	saPEM, err := keyutil.MarshalPrivateKeyToPEM(saKey)
	if err != nil {
		return p, fmt.Errorf("encoding service-account key: %w", err)
	}
	if err := os.WriteFile(p.serviceAcctKy, saPEM, 0o600); err != nil {
		return p, fmt.Errorf("writing %s: %w", p.serviceAcctKy, err)
	}

	for _, id := range ids {
		certPEM, keyPEM, err := signedPair(ca, caKey, cert.Config{
			CommonName:   id.user,
			Organization: id.groups,
			Usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		if err != nil {
			return p, fmt.Errorf("creating client certificate for %s: %w", id.user, err)
		}
		if err := writeKubeconfig(p.kubeconfig(id), server, p.caPEM, certPEM, keyPEM, id.user); err != nil {
			return p, err
		}
		if id.pair != "" {
			if err := writePair(filepath.Join(dir, id.pair+".crt"), certPEM, filepath.Join(dir, id.pair+".key"), keyPEM); err != nil {
				return p, err
			}
		}
	}
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating ECDSA key: %w", err)
	}
	return k, nil
}

// signedPair issues a certificate for cfg signed by the CA and returns it and its new key as PEM.
func signedPair(ca *x509.Certificate, caKey crypto.Signer, cfg cert.Config) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	if err != nil {
		return nil, nil, fmt.Errorf("generating serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cfg.CommonName, Organization: cfg.Organization},
		DNSNames:     cfg.AltNames.DNSNames,
		IPAddresses:  cfg.AltNames.IPs,
		NotBefore:    now.Add(-time.Minute), // tolerate a little clock skew between processes
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  cfg.Usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate %s: %w", cfg.CommonName, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing certificate %s: %w", cfg.CommonName, err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding key for %s: %w", cfg.CommonName, err)
	}
	certPEM, err = cert.EncodeCertificates(parsed)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding certificate %s: %w", cfg.CommonName, err)
	}
	return certPEM, keyPEM, nil
}

func writePair(certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if err := os.WriteFile(certPath, certPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", certPath, err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", keyPath, err)
	}
	return nil
}

// writeKubeconfig writes a self-contained kubeconfig (everything embedded) for one client.
func writeKubeconfig(path, server string, caPEM, certPEM, keyPEM []byte, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpu-sim"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["gpu-sim"] = &clientcmdapi.Context{Cluster: "gpu-sim", AuthInfo: user}
	cfg.CurrentContext = "gpu-sim"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
