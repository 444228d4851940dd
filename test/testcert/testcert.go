// Package testcert makes a throwaway certificate authority and server certificates for 127.0.0.1,
// for tests that serve TLS on a loopback listener.
package testcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// CA is a certificate authority valid for an hour around now (NewCA), or longer (NewCAValidFor).
type CA struct {
	Cert *x509.Certificate
	// PEM is Cert PEM-encoded, as a CA file holds it.
	PEM []byte
	key crypto.Signer
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	return NewCAValidFor(t, name, time.Hour)
}

// NewCAValidFor makes a CA named name valid from an hour ago until d from now, for runs longer
// than an hour (the benchmarks); its server certificates are valid as long.
func NewCAValidFor(t testing.TB, name string, d time.Duration) *CA {
	t.Helper()
	g := NewWithT(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(d),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	g.Expect(err).NotTo(HaveOccurred())
	cert, err := x509.ParseCertificate(der)
	g.Expect(err).NotTo(HaveOccurred())
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool is a certificate pool that trusts only this CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// ServerCert issues a server certificate for 127.0.0.1 signed by the CA, with the CA in its chain.
func (ca *CA) ServerCert(t testing.TB) tls.Certificate {
	t.Helper()
	g := NewWithT(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "approvals provider"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	g.Expect(err).NotTo(HaveOccurred())
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key}
}

// WriteKeyPair writes cert's chain and key as PEM into dir, as a kubernetes.io/tls Secret mounts
// them: tls.crt and tls.key (PKCS #8). It returns their paths.
func WriteKeyPair(t testing.TB, dir string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	g := NewWithT(t)
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	g.Expect(err).NotTo(HaveOccurred())
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	g.Expect(os.WriteFile(certFile, chain, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600)).To(Succeed())
	return certFile, keyFile
}
