package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

const (
	credential      = "reference-provider-test-credential"
	adminCredential = "reference-provider-test-admin-credential"
)

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
				"--admin-credential-file", writeAdminCredential(t), "--credential-file", credFile, "--tls-cert", certFile, "--tls-key", keyFile}, c.flags...)...)
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
			req, err := http.NewRequest(http.MethodGet, base+"/v1/requests/"+uuid.NewString(), nil)
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
	err := run([]string{"serve", "--admin-credential-file", writeAdminCredential(t), "--http2", "--credential-file", writeCredential(t)}, io.Discard)
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

// writeAdminCredential writes the admin credential to a file and returns its path.
func writeAdminCredential(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-credential")
	NewWithT(t).Expect(os.WriteFile(path, []byte(adminCredential+"\n"), 0o600)).To(Succeed())
	return path
}

// writeKeyPair writes cert's chain and key as PEM files and returns their paths.
func writeKeyPair(t *testing.T, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	return testcert.WriteKeyPair(t, t.TempDir(), cert)
}

// startServe runs `reference-provider serve` with flags on a free port and returns its base URL.
func startServe(t *testing.T, bin string, flags ...string) string {
	t.Helper()
	g := NewWithT(t)
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "provider.db"),
		"--admin-credential-file", writeAdminCredential(t)}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return servedURL(t, stdout)
}

// serve --profile seed is a conforming AAP provider with the fewest fields, and Toolgate's provider
// client works against it: an approval and a denial are read back, a replay finds the same request,
// cancelling a decided request returns its decision, and cancelling a pending one cancels it.
func TestServeSeedProfileWorksWithTheClient(t *testing.T) {
	g := NewWithT(t)
	bin := th.Binary(t, "./cmd/reference-provider")
	credFile := writeCredential(t)
	base := startServe(t, bin, "--profile", "seed", "--credential-file", credFile)
	c, err := provider.NewHTTPClient(provider.Options{BaseURL: base, CredentialFile: credFile})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := t.Context()
	submission := func(key string) provider.Submission {
		return provider.Submission{IdempotencyKey: key, Tool: "issue_refund", AgentReasoning: "The customer was charged twice.",
			Arguments: json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}`), Timeout: 30 * time.Minute}
	}
	refOf := func(sub provider.Submission, id string) provider.Ref {
		ref, err := sub.Ref()
		g.Expect(err).NotTo(HaveOccurred())
		ref.ID = id
		return ref
	}

	for _, decision := range []string{"--approve", "--deny"} {
		sub := submission("toolcall" + decision)
		created, err := c.Submit(ctx, sub)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(created.Status).To(Equal(provider.StatusPending))
		g.Expect(created.AgentReasoning).To(BeEmpty(), "the seed profile echoes the required fields only")
		replay, err := c.Submit(ctx, sub)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(replay.ID).To(Equal(created.ID))

		g.Expect(run([]string{"decide", "--url", base, "--credential-file", writeAdminCredential(t), "--id", created.ID, decision}, io.Discard)).To(Succeed())
		ref := refOf(sub, created.ID)
		decided, err := c.Wait(ctx, ref, 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		if decision == "--approve" {
			g.Expect(decided.Status).To(Equal(provider.StatusApproved))
			g.Expect(decided.Decision.DecidedAt).NotTo(BeNil())
			g.Expect(decided.Decision.ExpiresAt).NotTo(BeNil())
			// serve's --approval-validity, 5m by default, since decide gave no --valid-for.
			g.Expect(decided.Decision.ExpiresAt.Sub(*decided.Decision.DecidedAt)).To(BeNumerically("~", 5*time.Minute, time.Second))
		} else {
			g.Expect(decided.Status).To(Equal(provider.StatusDenied))
		}
		current, err := c.Cancel(ctx, ref)
		g.Expect(err).NotTo(HaveOccurred(), "a decided request is returned with its decision")
		g.Expect(current.Status).To(Equal(decided.Status))
	}

	sub := submission("toolcall-abandoned")
	created, err := c.Submit(ctx, sub)
	g.Expect(err).NotTo(HaveOccurred())
	cancelled, err := c.Cancel(ctx, refOf(sub, created.ID))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cancelled.Status).To(Equal(provider.StatusCancelled))
}

// serve --provisioner-token-file lets the provisioner create instances, whose credentials make
// requests of their own, beside the static credential's default instance; list says whose each is.
func TestServeProvisionsInstances(t *testing.T) {
	g := NewWithT(t)
	bin := th.Binary(t, "./cmd/reference-provider")
	credFile := writeCredential(t)
	tokenFile := filepath.Join(t.TempDir(), "provisioner")
	g.Expect(os.WriteFile(tokenFile, []byte("provisioner-token\n"), 0o600)).To(Succeed())
	base := startServe(t, bin, "--credential-file", credFile, "--provisioner-token-file", tokenFile, "--max-window", "10m")

	send := func(token, method, path, key, body string) (int, []byte) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(provider.HeaderIdempotencyKey, key)
		}
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Header.Get(provider.HeaderRequestID)).NotTo(BeEmpty())
		return resp.StatusCode, data
	}
	status, data := send("provisioner-token", http.MethodPost, "/v1/instances", "laptop", `{"instance_name":"codex-laptop"}`)
	g.Expect(status).To(Equal(http.StatusCreated), string(data))
	var provisioned provider.ProvisionInstanceResponse
	g.Expect(json.Unmarshal(data, &provisioned)).To(Succeed())

	refund := `{"tool":"issue_refund","arguments":{"amount":4900},"timeout":"30m"}`
	status, data = send(provisioned.Credential.Token, http.MethodPost, "/v1/requests", "k1", refund)
	g.Expect(status).To(Equal(http.StatusCreated), string(data))
	var req provider.Request
	g.Expect(json.Unmarshal(data, &req)).To(Succeed())
	g.Expect(req.DeadlineAt.Sub(req.CreatedAt)).To(Equal(10*time.Minute), "--max-window shortens the window")
	status, _ = send(credential, http.MethodPost, "/v1/requests", "k2", refund)
	g.Expect(status).To(Equal(http.StatusCreated))
	status, _ = send("provisioner-token", http.MethodPost, "/v1/requests", "k3", refund)
	g.Expect(status).To(Equal(http.StatusForbidden))

	var out bytes.Buffer
	g.Expect(run([]string{"list", "--url", base, "--credential-file", writeAdminCredential(t)}, &out)).To(Succeed())
	g.Expect(out.String()).To(MatchRegexp(`(?m)^ID\s+TOOL\s+STATUS\s+INSTANCE\s+DEADLINE\s+ARGUMENTS$`))
	g.Expect(out.String()).To(ContainSubstring("codex-laptop"))
	g.Expect(out.String()).To(ContainSubstring("default"))
	out.Reset()
	g.Expect(run([]string{"list", "--url", base, "--credential-file", writeAdminCredential(t), "--instance", provisioned.Instance.ID}, &out)).To(Succeed())
	g.Expect(strings.Count(out.String(), "issue_refund")).To(Equal(1))

	status, _ = send("provisioner-token", http.MethodDelete, "/v1/instances/"+provisioned.Instance.ID, "", "")
	g.Expect(status).To(Equal(http.StatusNoContent))
	status, _ = send(provisioned.Credential.Token, http.MethodGet, "/v1/requests/"+req.ID, "", "")
	g.Expect(status).To(Equal(http.StatusUnauthorized), "deletion revoked the credential")
}

func TestServeRefusesMissingCredentials(t *testing.T) {
	g := NewWithT(t)
	tokenFile := filepath.Join(t.TempDir(), "provisioner")
	g.Expect(os.WriteFile(tokenFile, []byte("p\n"), 0o600)).To(Succeed())
	err := run([]string{"serve"}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("--credential-file is required")))
	err = run([]string{"serve", "--provisioner-token-file", tokenFile}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("--admin-credential-file is required")))
	err = run([]string{"serve", "--credential-file", writeCredential(t)}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("--admin-credential-file is required: the admin API and the approval page decide every request")))
	err = run([]string{"serve", "--credential-file", writeCredential(t), "--admin-credential-file", writeCredential(t)}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("the admin credential is the static instance credential")))
	err = run([]string{"serve", "--admin-credential-file", writeAdminCredential(t), "--credential-file", writeCredential(t), "--retention", "24h"}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("at least 168h")))
}

func TestServeRefusesAnUnknownProfile(t *testing.T) {
	g := NewWithT(t)
	err := run([]string{"serve", "--admin-credential-file", writeAdminCredential(t), "--profile", "strict", "--credential-file", writeCredential(t)}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring(`--profile: unknown provider profile "strict"`)))
}

// serve logs on stderr, as JSON lines at info unless --zap-log-level says otherwise; stdout carries
// only the approval page's address.
func TestServeLogsOnStderr(t *testing.T) {
	bin := th.Binary(t, "./cmd/reference-provider")
	credFile := writeCredential(t)
	for _, c := range []struct {
		name        string
		flags       []string
		wantServing bool
	}{
		{"by default", nil, true},
		{"with --zap-log-level error", []string{"--zap-log-level", "error"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "provider.db"),
				"--admin-credential-file", writeAdminCredential(t), "--credential-file", credFile}, c.flags...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Start()).To(Succeed())
			t.Cleanup(func() { _ = cmd.Process.Kill() }) // if the test stops before the provider does
			lines := bufio.NewScanner(stdout)
			g.Expect(lines.Scan()).To(BeTrue(), "stdout: %v", lines.Err())
			g.Expect(lines.Text()).To(HavePrefix("approval page: "))
			// The "serving" line is written before the address is printed; stop the provider to read
			// the whole of stderr.
			g.Expect(cmd.Process.Signal(os.Interrupt)).To(Succeed())
			g.Expect(lines.Scan()).To(BeFalse(), "stdout has a line besides the address: %s", lines.Text())
			g.Expect(cmd.Wait()).To(Succeed())

			var msgs []string
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				if line == "" {
					continue
				}
				var l struct {
					Level, Msg, URL string
				}
				g.Expect(json.Unmarshal([]byte(line), &l)).To(Succeed(), "a JSON line on stderr: %s", line)
				msgs = append(msgs, l.Msg)
				if l.Msg == "serving" {
					g.Expect(l.Level).To(Equal("info"))
					g.Expect(l.URL).To(HavePrefix("http://127.0.0.1:"))
				}
			}
			if c.wantServing {
				g.Expect(msgs).To(ContainElement("serving"))
			} else {
				g.Expect(msgs).To(BeEmpty())
			}
		})
	}
}
