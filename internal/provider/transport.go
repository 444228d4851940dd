package provider

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// newTransport is a client's HTTP transport: many idle connections kept per host (each pending long
// poll holds one), and the CA bundle of Options.CABundle or Options.CAFile if set.
func newTransport(opts Options) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 1024
	tr.MaxConnsPerHost = opts.MaxConnsPerHost
	tr.IdleConnTimeout = 90 * time.Second
	pem, from := opts.CABundle, "the provider's CA bundle"
	if len(pem) == 0 && opts.CAFile != "" {
		b, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading provider CA file %s: %w", opts.CAFile, err)
		}
		pem, from = b, "provider CA file "+opts.CAFile
	}
	if len(pem) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", from)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return tr, nil
}

// ReloadCredential reads the instance credential again, as the client does itself when the provider
// answers 401: a rotated Secret or file is used from the next call on.
func (c *HTTPClient) ReloadCredential() error { return c.reloadCredential() }

// reloadCredential reads the instance credential from its source (Options.Credential) or file.
func (c *HTTPClient) reloadCredential() error {
	var cred string
	switch {
	case c.opts.Credential != nil:
		got, err := c.opts.Credential()
		if err != nil {
			return err
		}
		cred = strings.TrimSpace(got)
		if cred == "" {
			return fmt.Errorf("the provider credential is empty")
		}
	case c.opts.CredentialFile == "":
		return fmt.Errorf("a provider credential file is required (--provider-credential-file)")
	default:
		b, err := os.ReadFile(c.opts.CredentialFile)
		if err != nil {
			return fmt.Errorf("reading provider credential file %s: %w", c.opts.CredentialFile, err)
		}
		cred = strings.TrimSpace(string(b))
		if cred == "" {
			return fmt.Errorf("provider credential file %s is empty", c.opts.CredentialFile)
		}
	}
	c.credMu.Lock()
	c.cred = cred
	c.readHeader = requestHeader(cred)
	c.credMu.Unlock()
	return nil
}

// requestHeader is what every request carries.
func requestHeader(cred string) http.Header {
	return http.Header{"Authorization": {"Bearer " + cred}, "Accept": {ContentTypeJSON}}
}

// sharedReadHeader returns the shared header for cred, or a new one if the credential changed since.
func (c *HTTPClient) sharedReadHeader(cred string) http.Header {
	c.credMu.RLock()
	defer c.credMu.RUnlock()
	if c.cred == cred {
		return c.readHeader
	}
	return requestHeader(cred)
}

func (c *HTTPClient) credential() string {
	c.credMu.RLock()
	defer c.credMu.RUnlock()
	return c.cred
}

// redact removes the credential from text taken from a response, so that a provider echoing it
// cannot put it into an error.
func redact(text, cred string) string {
	if cred == "" {
		return text
	}
	return strings.ReplaceAll(text, cred, "[redacted]")
}
