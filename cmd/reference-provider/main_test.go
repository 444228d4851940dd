package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

const credential = "reference-provider-test-credential"

// serve offers HTTP/2 over TLS only when asked: a client able to speak both gets HTTP/2 with --http2
// and HTTP/1.1 without it.
func TestServeOffersHTTP2WhenAsked(t *testing.T) {
	bin := th.Binary(t, "./cmd/reference-provider")
	ca := testcert.NewCA(t, "reference provider test CA")
	certFile, keyFile := writeKeyPair(t, ca.ServerCert(t))
	credFile := writeCredential(t)
	for _, c := range []struct {
		name      string
		flags     []string
		wantMajor int
	}{
		{"without --http2", nil, 1},
		{"with --http2", []string{"--http2"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "provider.db"),
				"--credential-file", credFile, "--tls-cert", certFile, "--tls-key", keyFile}, c.flags...)...)
			stdout, err := cmd.StdoutPipe()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Start()).To(Succeed())
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			base := servedURL(t, stdout)

			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			req, err := http.NewRequest(http.MethodGet, base+"/v1/requests/no-such-request", nil)
			g.Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+credential)
			resp, err := tr.RoundTrip(req)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resp.Body.Close()).To(Succeed())
			g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
			g.Expect(resp.ProtoMajor).To(Equal(c.wantMajor))
		})
	}
}

func TestServeRefusesHTTP2WithoutTLS(t *testing.T) {
	g := NewWithT(t)
	err := run([]string{"serve", "--http2", "--credential-file", writeCredential(t)}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("--http2 needs --tls-cert and --tls-key")))
}

// servedURL reads the provider's output until it prints where it serves, and returns the base URL.
func servedURL(t *testing.T, stdout io.Reader) string {
	t.Helper()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "approval page: "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			base, _, _ := strings.Cut(rest, "/ui/")
			return base
		}
	}
	t.Fatalf("the provider ended before saying where it serves: %v", lines.Err())
	return ""
}

func writeCredential(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credential")
	NewWithT(t).Expect(os.WriteFile(path, []byte(credential+"\n"), 0o600)).To(Succeed())
	return path
}

// writeKeyPair writes cert's chain and key as PEM files and returns their paths.
func writeKeyPair(t *testing.T, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
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

// serve --profile seed speaks exactly the seed's wire format, and Toolgate's provider client works
// against it: an approval and a denial are read back, and cancelling reports that the provider cannot.
func TestServeSeedProfileWorksWithTheClient(t *testing.T) {
	g := NewWithT(t)
	bin := th.Binary(t, "./cmd/reference-provider")
	credFile := writeCredential(t)
	cmd := exec.Command(bin, "serve", "--profile", "seed", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "provider.db"),
		"--credential-file", credFile)
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := servedURL(t, stdout)
	c, err := provider.NewHTTPClient(provider.Options{BaseURL: base, CredentialFile: credFile, MaxAttempts: 3})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := t.Context()

	for _, decision := range []string{"--approve", "--deny"} {
		sub := provider.Submission{IdempotencyKey: "toolcall" + decision, Tool: "issue_refund",
			Arguments: json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}`), Timeout: 30 * time.Minute}
		created, err := c.Submit(ctx, sub)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(created.Status).To(Equal(provider.StatusPending))
		g.Expect(created.ArgumentsSHA256).To(BeEmpty(), "the seed's fields only")
		replay, err := c.Submit(ctx, sub)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(replay.ID).To(Equal(created.ID))

		g.Expect(run([]string{"decide", "--url", base, "--credential-file", credFile, "--id", created.ID, decision}, io.Discard)).To(Succeed())
		ref, err := sub.Ref()
		g.Expect(err).NotTo(HaveOccurred())
		ref.ID = created.ID
		decided, err := c.Wait(ctx, ref, 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		if decision == "--approve" {
			g.Expect(decided.Status).To(Equal(provider.StatusApproved))
			g.Expect(decided.Decision.ExpiresAt).NotTo(BeNil())
			g.Expect(decided.Covers(sub.Arguments)).To(Succeed())
		} else {
			g.Expect(decided.Status).To(Equal(provider.StatusDenied))
		}
		_, err = c.Cancel(ctx, ref)
		g.Expect(provider.CannotCancel(err)).To(BeTrue(), "%v", err)
		g.Expect(provider.CodeOf(err)).To(Equal(provider.CodeCancelUnsupported))
	}
}

func TestServeRefusesAnUnknownProfile(t *testing.T) {
	g := NewWithT(t)
	err := run([]string{"serve", "--profile", "strict", "--credential-file", writeCredential(t)}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring(`--profile: unknown provider profile "strict"`)))
}
