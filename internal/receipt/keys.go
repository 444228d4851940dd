package receipt

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"
)

// Key is a receipt signing key: an ECDSA P-256 or Ed25519 private key, or (to verify only) the
// public half of one.
type Key interface {
	dsse.SignerVerifier
}

// ErrKeyType is returned for a key that is neither ECDSA P-256 nor Ed25519.
var ErrKeyType = errors.New("a receipt key must be ECDSA P-256 or Ed25519")

// ParseKey reads a PEM key: a private key (PKCS #8, or SEC 1 "EC PRIVATE KEY") to sign with, or a
// public key (PKIX "PUBLIC KEY", as cosign writes cosign.pub) to verify with.
func ParseKey(pemBytes []byte) (Key, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block found: a receipt key is PEM text (-----BEGIN PRIVATE KEY----- or -----BEGIN PUBLIC KEY-----)")
	}
	if block.Type == "ENCRYPTED SIGSTORE PRIVATE KEY" || block.Type == "ENCRYPTED COSIGN PRIVATE KEY" {
		return nil, errors.New("the key is encrypted with a password (cosign generate-key-pair): give the manager an unencrypted PKCS #8 key, e.g. openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256")
	}
	k, err := signerverifier.LoadKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("reading the PEM key: %w", err)
	}
	switch k.KeyType {
	case signerverifier.ECDSAKeyType:
		sv, err := signerverifier.NewECDSASignerVerifierFromSSLibKey(k)
		if err != nil {
			return nil, err
		}
		if pub, ok := sv.Public().(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
			return nil, fmt.Errorf("%w: this ECDSA key is on another curve", ErrKeyType)
		}
		return sv, nil
	case signerverifier.ED25519KeyType:
		return signerverifier.NewED25519SignerVerifierFromSSLibKey(k)
	}
	return nil, fmt.Errorf("%w: got a %s key", ErrKeyType, k.KeyType)
}

// PublicPEM is the PKIX PEM of k's public key: the file `cosign verify-blob-attestation --key` reads.
func PublicPEM(k Key) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// KeyID is k's id, as the envelope's signatures name it.
func KeyID(k Key) string {
	id, _ := k.KeyID()
	return id
}

// GenerateECDSA makes a new ECDSA P-256 key, as PKCS #8 PEM.
func GenerateECDSA() ([]byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// GenerateEd25519 makes a new Ed25519 key, as PKCS #8 PEM.
func GenerateEd25519() ([]byte, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
