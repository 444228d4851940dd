package controllers_test

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

// With MetricsCertDir (--metrics-cert-dir), the metrics endpoint serves the certificate found there,
// which a scraper verifies against its CA; without it, a self-signed one no CA vouches for. Either
// way a caller without a token is refused (401) once the TLS handshake is done.
func TestMetricsCertificateIsVerifiable(t *testing.T) {
	for _, withCert := range []bool{true, false} {
		t.Run(map[bool]string{true: "given", false: "self-signed"}[withCert], func(t *testing.T) {
			h := th.New(t, env)
			g := h.G
			addr, err := th.FreeAddr()
			g.Expect(err).NotTo(HaveOccurred())
			ca := testcert.NewCA(t, "metrics CA")
			h.Opts.MetricsBindAddress, h.Opts.MetricsSecure = addr, true
			if withCert {
				dir := t.TempDir()
				testcert.WriteKeyPair(t, dir, ca.ServerCert(t))
				h.Opts.MetricsCertDir = dir
			}
			h.Start()

			scraper := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
			scrape := func() (int, error) {
				resp, err := scraper.Get("https://" + addr + "/metrics")
				if err != nil {
					return 0, err
				}
				_ = resp.Body.Close()
				return resp.StatusCode, nil
			}
			if withCert {
				g.Eventually(scrape).WithTimeout(30*time.Second).Should(Equal(http.StatusUnauthorized), "verified, then refused without a token")
				return
			}
			g.Eventually(func() error { _, err := scrape(); return err }).WithTimeout(30*time.Second).Should(
				MatchError(ContainSubstring("certificate signed by unknown authority")), "the self-signed certificate is not the CA's")
		})
	}
}
