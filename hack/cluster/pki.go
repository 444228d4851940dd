package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// users are the cluster's client identities: each gets a certificate and a kubeconfig
// (kubeconfig-<name>; the admin's is kubeconfig). The names are those the apiserver's default RBAC
// and Node authorizer expect.
var users = []struct{ file, cn, org string }{
	{"admin", "toolgate-admin", "system:masters"},
	{"kube-controller-manager", "system:kube-controller-manager", ""},
	{"kube-scheduler", "system:kube-scheduler", ""},
	{"kubelet", "system:node:" + nodeName, "system:nodes"},
	{"kube-proxy", "system:kube-proxy", ""},
	{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"},
}

// writePKI writes a fresh CA, the apiserver's serving certificate, a client certificate and
// kubeconfig per user, and the ServiceAccount token signing key.
func (c *cluster) writePKI() error {
	pki := c.path("pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := newKey()
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "toolgate-cluster-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCert(c.path("pki", "ca.crt"), caDER); err != nil {
		return err
	}
	if err := writeKey(c.path("pki", "ca.key"), caKey); err != nil {
		return err
	}
	serial := int64(2)
	issue := func(name string, tmpl *x509.Certificate) error {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		serial++
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(365*24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writeCert(c.path("pki", name+".crt"), der); err != nil {
			return err
		}
		return writeKey(c.path("pki", name+".key"), key)
	}
	if err := issue("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP(bridgeIP), net.ParseIP(kubernetesServiceIP), net.ParseIP("127.0.0.1")},
	}); err != nil {
		return err
	}
	if err := issue("kubelet-serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{nodeName},
		IPAddresses: []net.IP{net.ParseIP(bridgeIP)},
	}); err != nil {
		return err
	}
	for _, u := range users {
		subject := pkix.Name{CommonName: u.cn}
		if u.org != "" {
			subject.Organization = []string{u.org}
		}
		if err := issue(u.file, &x509.Certificate{Subject: subject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			return err
		}
		kubeconfig := c.path("kubeconfig-" + u.file)
		if u.file == "admin" {
			kubeconfig = c.path("kubeconfig")
		}
		if err := c.writeKubeconfig(kubeconfig, u.file); err != nil {
			return err
		}
	}
	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(c.path("pki", "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	return os.WriteFile(c.path("pki", "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func (c *cluster) writeKubeconfig(path, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["toolgate"] = &clientcmdapi.Cluster{Server: c.apiserverURL(), CertificateAuthority: c.path("pki", "ca.crt")}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: c.path("pki", user+".crt"), ClientKey: c.path("pki", user+".key")}
	cfg.Contexts["toolgate"] = &clientcmdapi.Context{Cluster: "toolgate", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "toolgate"
	if err := clientcmdapi.FlattenConfig(cfg); err != nil { // embed the files: the kubeconfig works alone
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
