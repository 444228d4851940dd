package provider_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
	"toolgate.dev/toolgate/test/testcert"
)

// --- TLS ----------------------------------------------------------------------------------------------------

func TestTLS(t *testing.T) {
	g := newG(t)
	ca := testcert.NewCA(t, "toolgate test CA")
	srv := newProvider(t)
	url, err := srv.StartTLS("127.0.0.1:0", ca.ServerCert(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(url).To(HavePrefix("https://"))

	t.Run("trusted CA", func(t *testing.T) {
		g := newG(t)
		c := newClient(t, url, func(o *provider.Options) { o.CAFile = writeFile(t, "ca.pem", string(ca.PEM)) })
		ctx := testContext(t)
		req, err := c.Submit(ctx, submission("toolcall-uid-tls"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(req.Status).To(Equal(provider.StatusPending))
		polled, err := c.Wait(ctx, refFor(t, req.ID), 0)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(polled.ID).To(Equal(req.ID))
	})

	t.Run("another CA", func(t *testing.T) {
		g := newG(t)
		other := testcert.NewCA(t, "some other CA")
		before := srv.Stats().Submits
		lim := limitAttempts(2)
		c := newClient(t, url, func(o *provider.Options) { o.CAFile = writeFile(t, "ca.pem", string(other.PEM)) }, lim.option)
		req, err := c.Submit(lim.ctx(t), submission("toolcall-uid-tls-2"))
		g.Expect(req).To(BeNil())
		pe := providerError(g, err)
		g.Expect(pe.Code).To(Equal(provider.CodeNetwork))
		g.Expect(pe.StatusCode).To(BeZero())
		g.Expect(err.Error()).To(ContainSubstring("x509"))
		g.Expect(err.Error()).To(ContainSubstring("certificate"))
		var unknown x509.UnknownAuthorityError
		g.Expect(errors.As(err, &unknown)).To(BeTrue(), "the cause stays inspectable: %v", err)
		g.Expect(srv.Stats().Submits).To(Equal(before), "no request got past the handshake")
	})

	t.Run("system roots only", func(t *testing.T) {
		g := newG(t)
		lim := limitAttempts(1)
		c := newClient(t, url, lim.option)
		_, err := c.Submit(lim.ctx(t), submission("toolcall-uid-tls-3"))
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("certificate"))
	})
}

// --- credential ----------------------------------------------------------------------------------------------

func TestCredentialNeverInErrors(t *testing.T) {
	const secret = "tg-secret-3b8e1f0d92c4-do-not-log"
	cases := []struct {
		name    string
		baseURL func(t *testing.T) string
	}{
		{
			name: "401 from the provider",
			baseURL: func(t *testing.T) string {
				_, url := startProvider(t)
				return url
			},
		},
		{
			name: "connection refused",
			baseURL: func(t *testing.T) string {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				addr := ln.Addr().String()
				NewWithT(t).Expect(ln.Close()).To(Succeed())
				return "http://" + addr
			},
		},
		{
			name: "503 until attempts run out",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
					respondError(t, w, 503, provider.CodeUnavailable, "down for maintenance")
				}).url
			},
		},
		{
			name: "provider echoes the Authorization header in an error message",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					respondError(t, w, http.StatusBadRequest, provider.CodeInvalidRequest, "rejected Authorization: "+r.Header.Get("Authorization"))
				}).url
			},
		},
		{
			name: "provider echoes the credential in a response field",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
					respond(w, http.StatusCreated, provider.ContentTypeJSON, requestJSON(t, func(m map[string]any) { m["status"] = token }))
				}).url
			},
		},
		{
			name: "provider echoes the credential as an error code",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					respondError(t, w, http.StatusBadRequest, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "refused")
				}).url
			},
		},
		{
			name: "provider echoes the credential as the param",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					respond(w, http.StatusForbidden, provider.ContentTypeJSON,
						errorJSON(t, 403, provider.CodeForbidden, "forbidden", r.Header.Get("Authorization")))
				}).url
			},
		},
		{
			name: "provider echoes the credential across the end of a long message",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					respondError(t, w, http.StatusBadRequest, provider.CodeInvalidRequest, strings.Repeat("x", 500)+r.Header.Get("Authorization"))
				}).url
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			lim := limitAttempts(2)
			c := newClient(t, tc.baseURL(t), func(o *provider.Options) {
				o.CredentialFile = writeFile(t, "credential", secret+"\n")
			}, lim.option)
			for _, call := range []func(context.Context) (*provider.Request, error){
				func(ctx context.Context) (*provider.Request, error) {
					return c.Submit(ctx, submission("toolcall-uid-1"))
				},
				func(ctx context.Context) (*provider.Request, error) { return c.Wait(ctx, refFor(t, requestID), 0) },
				func(ctx context.Context) (*provider.Request, error) { return c.Cancel(ctx, refFor(t, requestID)) },
			} {
				_, err := call(lim.ctx(t))
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).NotTo(ContainSubstring(secret))
				g.Expect(providerError(g, err).Detail).NotTo(ContainSubstring(secret))
				g.Expect(err.Error()).NotTo(ContainSubstring(secret[:5]), "not even the start of it, cut off with a long message")
			}
		})
	}
}

func TestCredentialReloadedAfter401(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	credFile := writeFile(t, "credential", "tg-previous-credential\n")
	f := newFailures()
	c := newClient(t, url, f.option, func(o *provider.Options) { o.CredentialFile = credFile })

	// The Secret is rotated: the file now holds the credential the provider accepts.
	g.Expect(os.WriteFile(credFile, []byte(credential+"\n"), 0o600)).To(Succeed())
	req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusPending))

	g.Expect(f.codes()).To(Equal([]string{"submit/" + provider.CodeUnauthenticated}))
	st := srv.Stats()
	g.Expect(st.Responses[faults.OpSubmit]).To(Equal(map[int]int64{http.StatusUnauthorized: 1, http.StatusCreated: 1}))
	g.Expect(st.Creates).To(BeEquivalentTo(1))

	// The reloaded credential stays in use.
	polled, err := c.Wait(testContext(t), refFor(t, req.ID), 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(polled.ID).To(Equal(req.ID))
	g.Expect(srv.Stats().Responses[faults.OpGet]).To(Equal(map[int]int64{http.StatusOK: 1}))
}

func TestCredentialReloadedOnlyOnce(t *testing.T) {
	t.Parallel()
	g := newG(t)
	// Every request is refused, and the credential file changes after every refusal.
	credFile := writeFile(t, "credential", "tg-credential-0\n")
	var rotations atomic.Int64
	srv := startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		n := rotations.Add(1)
		_ = os.WriteFile(credFile, []byte("tg-credential-"+strings.Repeat("x", int(n))+"\n"), 0o600)
		respondError(t, w, http.StatusUnauthorized, provider.CodeUnauthenticated, "unknown credential")
	})
	c := newClient(t, srv.url, func(o *provider.Options) { o.CredentialFile = credFile })

	_, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	pe := providerError(g, err)
	g.Expect(pe.Code).To(Equal(provider.CodeUnauthenticated))
	g.Expect(pe.Retryable).To(BeFalse())
	g.Expect(srv.hits.Load()).To(BeEquivalentTo(2), "one attempt, one repeat with the reloaded credential")
}
