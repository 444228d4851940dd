package provider_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
	"toolgate.dev/toolgate/test/testcert"
)

const (
	credential = "tg-instance-credential-5f0c2e9a7b41"
	tool       = "issue_refund"
	requestID  = "req-1"
)

var arguments = json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}`)

// --- helpers ---------------------------------------------------------------------------------------

func submission(key string) provider.Submission {
	return provider.Submission{IdempotencyKey: key, Tool: tool, Arguments: arguments, Timeout: 30 * time.Minute}
}

// refFor is what every response about request id (created from submission) is checked against.
func refFor(t *testing.T, id string) provider.Ref {
	t.Helper()
	ref, err := submission("").Ref()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	ref.ID = id
	return ref
}

func argumentsSHA256(t *testing.T) string {
	t.Helper()
	sum, err := provider.ArgumentsSHA256(arguments)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return sum
}

func newG(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(15 * time.Second)
	g.SetDefaultEventuallyPollingInterval(5 * time.Millisecond)
	return g
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startProvider runs the reference provider on a real loopback listener.
func startProvider(t *testing.T) (*reference.Server, string) {
	t.Helper()
	srv := newProvider(t)
	url, err := srv.Start("127.0.0.1:0")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return srv, url
}

func newProvider(t *testing.T) *reference.Server {
	t.Helper()
	srv, err := reference.New(reference.Options{
		DBPath:     filepath.Join(t.TempDir(), "provider.db"),
		Credential: credential,
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { NewWithT(t).Expect(srv.Close()).To(Succeed()) })
	return srv
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	NewWithT(t).Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
	return path
}

// newClient returns a client with a fast backoff and the right credential; opts adjust its options.
func newClient(t *testing.T, baseURL string, opts ...func(*provider.Options)) *provider.HTTPClient {
	t.Helper()
	o := provider.Options{
		BaseURL:        baseURL,
		CredentialFile: writeFile(t, "credential", credential+"\n"),
		BackoffBase:    10 * time.Millisecond,
		BackoffCap:     200 * time.Millisecond,
	}
	for _, f := range opts {
		f(&o)
	}
	c, err := provider.NewHTTPClient(o)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return c
}

func maxAttempts(n int) func(*provider.Options) {
	return func(o *provider.Options) { o.MaxAttempts = n }
}

// failures records the client's OnError reports.
type failures struct {
	mu    sync.Mutex
	start time.Time
	list  []failure
}

type failure struct {
	op, code string
	after    time.Duration
}

func newFailures() *failures { return &failures{start: time.Now()} }

func (f *failures) option(o *provider.Options) {
	o.OnError = func(op, code string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.list = append(f.list, failure{op: op, code: code, after: time.Since(f.start)})
	}
}

func (f *failures) codes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []string{}
	for _, x := range f.list {
		out = append(out, x.op+"/"+x.code)
	}
	return out
}

func (f *failures) all() []failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]failure(nil), f.list...)
}

// providerError asserts err is a *provider.Error and returns it.
func providerError(g *WithT, err error) *provider.Error {
	var pe *provider.Error
	g.Expect(errors.As(err, &pe)).To(BeTrue(), "want a *provider.Error, got %T: %v", err, err)
	return pe
}

// canned is a hand-written HTTP server on a real loopback socket that answers what a test tells it to.
type canned struct {
	url  string
	hits atomic.Int64
}

func startCanned(t *testing.T, h func(n int64, w http.ResponseWriter, r *http.Request)) *canned {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	c := &canned{url: "http://" + ln.Addr().String()}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h(c.hits.Add(1), w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return c
}

func respond(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// requestJSON renders a well-formed pending request about submission("...") with id req-1, changed by mutate.
func requestJSON(t *testing.T, mutate func(map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"id":               requestID,
		"tool":             tool,
		"arguments":        arguments,
		"arguments_sha256": argumentsSHA256(t),
		"timeout":          "30m",
		"status":           provider.StatusPending,
		"created_at":       "2026-09-16T12:00:00Z",
		"deadline_at":      "2026-09-16T12:30:00Z",
	}
	if mutate != nil {
		mutate(m)
	}
	b, err := json.Marshal(m)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return b
}

func approved(m map[string]any) {
	m["status"] = provider.StatusApproved
	m["decision"] = map[string]any{
		"status":     provider.StatusApproved,
		"decided_at": "2026-09-16T12:01:00Z",
		"expires_at": "2026-09-16T12:06:00Z",
	}
}

func problemJSON(t *testing.T, p provider.Problem) []byte {
	t.Helper()
	b, err := json.Marshal(p)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return b
}

// --- construction ------------------------------------------------------------------------------------

func TestNewHTTPClientValidation(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "credential")
	newG(t).Expect(os.WriteFile(good, []byte(credential), 0o600)).To(Succeed())
	blank := filepath.Join(dir, "blank")
	newG(t).Expect(os.WriteFile(blank, []byte(" \n\t\n"), 0o600)).To(Succeed())
	notPEM := filepath.Join(dir, "ca.pem")
	newG(t).Expect(os.WriteFile(notPEM, []byte("this is not a certificate\n"), 0o600)).To(Succeed())
	missing := filepath.Join(dir, "missing")

	cases := []struct {
		name     string
		opts     provider.Options
		wantErr  []string
		notExist bool
	}{
		{name: "empty URL", opts: provider.Options{CredentialFile: good},
			wantErr: []string{"provider URL", "absolute http(s) URL"}},
		{name: "URL without scheme", opts: provider.Options{BaseURL: "approvals.example.com", CredentialFile: good},
			wantErr: []string{`"approvals.example.com"`, "absolute http(s) URL"}},
		{name: "URL with another scheme", opts: provider.Options{BaseURL: "ftp://approvals.example.com", CredentialFile: good},
			wantErr: []string{`"ftp://approvals.example.com"`, "absolute http(s) URL"}},
		{name: "URL without host", opts: provider.Options{BaseURL: "https://", CredentialFile: good},
			wantErr: []string{"absolute http(s) URL"}},
		{name: "unparsable URL", opts: provider.Options{BaseURL: "http://[::1", CredentialFile: good},
			wantErr: []string{"absolute http(s) URL"}},
		{name: "no credential file", opts: provider.Options{BaseURL: "https://approvals.example.com"},
			wantErr: []string{"credential file is required"}},
		{name: "missing credential file", opts: provider.Options{BaseURL: "https://approvals.example.com", CredentialFile: missing},
			wantErr: []string{"reading provider credential file", missing}, notExist: true},
		{name: "empty credential file", opts: provider.Options{BaseURL: "https://approvals.example.com", CredentialFile: blank},
			wantErr: []string{"credential file", blank, "is empty"}},
		{name: "CA file without PEM", opts: provider.Options{BaseURL: "https://approvals.example.com", CredentialFile: good, CAFile: notPEM},
			wantErr: []string{"CA file", notPEM, "no PEM certificate"}},
		{name: "missing CA file", opts: provider.Options{BaseURL: "https://approvals.example.com", CredentialFile: good, CAFile: missing},
			wantErr: []string{"reading provider CA file", missing}, notExist: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newG(t)
			c, err := provider.NewHTTPClient(tc.opts)
			g.Expect(err).To(HaveOccurred())
			g.Expect(c).To(BeNil())
			for _, want := range tc.wantErr {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
			g.Expect(errors.Is(err, fs.ErrNotExist)).To(Equal(tc.notExist))
			g.Expect(err.Error()).NotTo(ContainSubstring(credential))
		})
	}

	t.Run("valid options", func(t *testing.T) {
		g := newG(t)
		c, err := provider.NewHTTPClient(provider.Options{BaseURL: "https://approvals.example.com/", CredentialFile: good})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c).NotTo(BeNil())
	})
}

// --- what goes on the wire -----------------------------------------------------------------------------

func TestRequestShape(t *testing.T) {
	type seen struct {
		method, uri, auth, key, contentType, accept string
		body                                        []byte
	}
	ref := refFor(t, requestID)
	cases := []struct {
		name   string
		call   func(context.Context, *provider.HTTPClient) (*provider.Request, error)
		status int
		method string
		uri    string
		key    string
		body   bool
	}{
		{
			name: "submit",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Submit(ctx, submission("toolcall-uid-1"))
			},
			status: http.StatusCreated, method: http.MethodPost, uri: "/v1/requests", key: "toolcall-uid-1", body: true,
		},
		{
			name: "wait with a long poll",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Wait(ctx, ref, 30*time.Second)
			},
			status: http.StatusOK, method: http.MethodGet, uri: "/v1/requests/req-1?wait=30s",
		},
		{
			name: "wait without waiting",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Wait(ctx, ref, 0)
			},
			status: http.StatusOK, method: http.MethodGet, uri: "/v1/requests/req-1",
		},
		{
			name: "cancel",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Cancel(ctx, ref)
			},
			status: http.StatusOK, method: http.MethodPost, uri: "/v1/requests/req-1/cancel",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			got := make(chan seen, 10)
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got <- seen{
					method: r.Method, uri: r.RequestURI, auth: r.Header.Get("Authorization"),
					key: r.Header.Get(provider.HeaderIdempotencyKey), contentType: r.Header.Get("Content-Type"),
					accept: r.Header.Get("Accept"), body: body,
				}
				respond(w, tc.status, provider.ContentTypeJSON, requestJSON(t, nil))
			})
			// A trailing slash on the base URL must not double the path's slash.
			c := newClient(t, srv.url+"/")

			req, err := tc.call(testContext(t), c)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.ID).To(Equal(requestID))
			g.Expect(req.Status).To(Equal(provider.StatusPending))
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1))

			var s seen
			g.Expect(got).To(Receive(&s))
			g.Expect(s.method).To(Equal(tc.method))
			g.Expect(s.uri).To(Equal(tc.uri))
			g.Expect(s.auth).To(Equal("Bearer " + credential))
			g.Expect(s.key).To(Equal(tc.key))
			g.Expect(s.accept).To(ContainSubstring(provider.ContentTypeJSON))
			if !tc.body {
				g.Expect(s.body).To(BeEmpty())
				return
			}
			g.Expect(s.contentType).To(Equal(provider.ContentTypeJSON))
			var body map[string]json.RawMessage
			g.Expect(json.Unmarshal(s.body, &body)).To(Succeed())
			g.Expect(body).To(HaveLen(3))
			g.Expect(body["tool"]).To(MatchJSON(`"issue_refund"`))
			g.Expect(body["arguments"]).To(MatchJSON(arguments))
			g.Expect(body["timeout"]).To(MatchJSON(`"30m"`))
		})
	}
}

// --- submit against the reference provider -----------------------------------------------------------------

func TestSubmitCreatesThenReplays(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)

	first, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.ID).NotTo(BeEmpty())
	g.Expect(first.Tool).To(Equal(tool))
	g.Expect(first.Arguments).To(MatchJSON(arguments))
	g.Expect(first.ArgumentsSHA256).To(Equal(argumentsSHA256(t)))
	g.Expect(first.Timeout).To(Equal("30m"))
	g.Expect(first.Status).To(Equal(provider.StatusPending))
	g.Expect(first.DeadlineAt.Sub(first.CreatedAt)).To(Equal(30 * time.Minute))
	g.Expect(srv.Stats().Responses[reference.OpSubmit]).To(Equal(map[int]int64{http.StatusCreated: 1}))

	replay, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(replay.ID).To(Equal(first.ID))

	st := srv.Stats()
	g.Expect(st.Submits).To(BeEquivalentTo(2))
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Expect(st.Replays).To(BeEquivalentTo(1))
	g.Expect(srv.List("")).To(HaveLen(1))

	other, err := c.Submit(ctx, submission("toolcall-uid-2"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.ID).NotTo(Equal(first.ID), "another key is another request")
}

func TestSubmitRecoversLostResponse(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	g.Expect(srv.Faults().Add(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultDropAfterCommit, Count: 1})).To(Succeed())

	req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusPending))

	all, err := srv.List("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(all).To(HaveLen(1))
	g.Expect(all[0].ID).To(Equal(req.ID), "the recovered request is the one committed before the response was lost")
	st := srv.Stats()
	g.Expect(st.Faults[reference.FaultDropAfterCommit]).To(BeEquivalentTo(1))
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Expect(st.Replays).To(BeEquivalentTo(1))
}

func TestSubmitRetriesTransientFailures(t *testing.T) {
	cases := []struct {
		name          string
		rule          reference.FaultRule
		wantResponses map[int]int64
		wantFailures  []string
	}{
		{
			name:          "connection reset twice",
			rule:          reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultReset, Count: 2},
			wantResponses: map[int]int64{0: 2, http.StatusCreated: 1},
		},
		{
			name:          "503 twice",
			rule:          reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultError5xx, Count: 2},
			wantResponses: map[int]int64{http.StatusServiceUnavailable: 2, http.StatusCreated: 1},
			wantFailures:  []string{"submit/internal", "submit/internal"},
		},
		{
			name:          "500 once",
			rule:          reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultError5xx, Status: 500, Count: 1},
			wantResponses: map[int]int64{http.StatusInternalServerError: 1, http.StatusCreated: 1},
			wantFailures:  []string{"submit/internal"},
		},
		{
			name:          "faults on any operation",
			rule:          reference.FaultRule{Op: reference.OpAny, Kind: reference.FaultError5xx, Status: 502, Count: 3},
			wantResponses: map[int]int64{http.StatusBadGateway: 3, http.StatusCreated: 1},
			wantFailures:  []string{"submit/internal", "submit/internal", "submit/internal"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			f := newFailures()
			c := newClient(t, url, f.option)
			g.Expect(srv.Faults().Add(tc.rule)).To(Succeed())

			req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.Status).To(Equal(provider.StatusPending))

			st := srv.Stats()
			g.Expect(st.Faults[tc.rule.Kind]).To(BeEquivalentTo(tc.rule.Count))
			g.Expect(st.Responses[reference.OpSubmit]).To(Equal(tc.wantResponses))
			g.Expect(st.Creates).To(BeEquivalentTo(1))
			g.Expect(srv.List("")).To(HaveLen(1))
			g.Expect(srv.Faults().Rules()).To(BeEmpty())
			if tc.wantFailures != nil {
				g.Expect(f.codes()).To(Equal(tc.wantFailures))
			} else {
				// A reset may be replayed by the transport itself; the client saw at most every reset.
				g.Expect(len(f.codes())).To(BeNumerically("<=", tc.rule.Count))
			}
		})
	}
}

func TestSubmitHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	f := newFailures()
	c := newClient(t, url, f.option)
	g.Expect(srv.Faults().Add(reference.FaultRule{
		Op: reference.OpSubmit, Kind: reference.FaultRateLimit, RetryAfter: time.Second, Count: 1,
	})).To(Succeed())

	start := time.Now()
	req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	elapsed := time.Since(start)

	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusPending))
	// The backoff (at most 10ms here) is raised to the provider's Retry-After.
	g.Expect(elapsed).To(BeNumerically(">=", 950*time.Millisecond))
	g.Expect(f.codes()).To(Equal([]string{"submit/" + provider.CodeRateLimited}))
	st := srv.Stats()
	g.Expect(st.Responses[reference.OpSubmit]).To(Equal(map[int]int64{http.StatusTooManyRequests: 1, http.StatusCreated: 1}))
	g.Expect(st.Creates).To(BeEquivalentTo(1))
}

func TestSubmitWaitsOutInFlightDuplicate(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	g.Expect(srv.Faults().Add(reference.FaultRule{
		Op: reference.OpSubmit, Kind: reference.FaultDelay, Delay: 2 * time.Second, Count: 1,
	})).To(Succeed())
	ctx := testContext(t)

	type result struct {
		req *provider.Request
		err error
	}
	firstDone := make(chan result, 1)
	first := newClient(t, url)
	go func() {
		req, err := first.Submit(ctx, submission("toolcall-uid-1"))
		firstDone <- result{req, err}
	}()
	// The first submission is delayed while holding its Idempotency-Key.
	g.Eventually(func() int64 { return srv.Stats().InFlight }).Should(BeEquivalentTo(1))

	f := newFailures()
	second := newClient(t, url, f.option)
	dup, err := second.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	var r result
	g.Eventually(firstDone).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(dup.ID).To(Equal(r.req.ID))

	g.Expect(f.codes()).NotTo(BeEmpty())
	for _, code := range f.codes() {
		g.Expect(code).To(Equal("submit/" + provider.CodeIdempotencyInFlight))
	}
	st := srv.Stats()
	g.Expect(st.Responses[reference.OpSubmit][http.StatusConflict]).To(BeNumerically(">=", 1))
	g.Expect(st.Responses[reference.OpSubmit][http.StatusCreated]).To(BeEquivalentTo(1))
	g.Expect(st.Responses[reference.OpSubmit][http.StatusOK]).To(BeEquivalentTo(1))
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Expect(st.Replays).To(BeEquivalentTo(1))
	g.Expect(srv.List("")).To(HaveLen(1))
}

func TestRetriesStatusesTheReferenceCannotProduce(t *testing.T) {
	cases := []struct {
		name     string
		answers  func(t *testing.T, n int64, w http.ResponseWriter)
		attempts int
		wantHits int64
		wantErr  *provider.Error
	}{
		{
			name:     "408 then created",
			answers:  failOnceThenCreated(http.StatusRequestTimeout, "text/plain", "request timeout"),
			wantHits: 2,
		},
		{
			name:     "non-problem 502 then created",
			answers:  failOnceThenCreated(http.StatusBadGateway, "text/html", "<html><body>bad gateway</body></html>"),
			wantHits: 2,
		},
		{
			// A proxy's error page over the body bound is still the 503 it says it is.
			name:     "503 page larger than the body bound then created",
			answers:  failOnceThenCreated(http.StatusServiceUnavailable, "text/html", "<html>"+strings.Repeat("unavailable ", 1<<20)+"</html>"),
			wantHits: 2,
		},
		{
			name: "non-problem 500 until attempts run out",
			answers: func(_ *testing.T, _ int64, w http.ResponseWriter) {
				respond(w, http.StatusInternalServerError, "text/plain", []byte("oops"))
			},
			attempts: 3,
			wantHits: 3,
			wantErr: &provider.Error{Op: "submit", StatusCode: 500, Code: provider.CodeHTTPStatus,
				Detail: "Internal Server Error", Retryable: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv := startCanned(t, func(n int64, w http.ResponseWriter, _ *http.Request) { tc.answers(t, n, w) })
			c := newClient(t, srv.url, maxAttempts(tc.attempts))

			req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
			g.Expect(srv.hits.Load()).To(Equal(tc.wantHits))
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(req.ID).To(Equal(requestID))
				return
			}
			g.Expect(req).To(BeNil())
			g.Expect(providerError(g, err)).To(Equal(tc.wantErr))
		})
	}
}

// failOnceThenCreated answers the first call with status and body, and every later one with 201.
func failOnceThenCreated(status int, contentType, body string) func(*testing.T, int64, http.ResponseWriter) {
	return func(t *testing.T, n int64, w http.ResponseWriter) {
		if n == 1 {
			respond(w, status, contentType, []byte(body))
			return
		}
		respond(w, http.StatusCreated, provider.ContentTypeJSON, requestJSON(t, nil))
	}
}

func TestNotRetried(t *testing.T) {
	cases := []struct {
		name       string
		credential string
		call       func(context.Context, *testing.T, *provider.HTTPClient, *reference.Server) (*provider.Request, error)
		status     int
		code       string
		attempts   func(reference.Stats) int64
	}{
		{
			name: "400 timeout of zero",
			call: func(ctx context.Context, _ *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				s := submission("toolcall-uid-1")
				s.Timeout = 0
				return c.Submit(ctx, s)
			},
			status: http.StatusBadRequest, code: provider.CodeInvalidTimeout,
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
		{
			name: "400 timeout over 24h",
			call: func(ctx context.Context, _ *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				s := submission("toolcall-uid-1")
				s.Timeout = 25 * time.Hour
				return c.Submit(ctx, s)
			},
			status: http.StatusBadRequest, code: provider.CodeInvalidTimeout,
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
		{
			name: "400 missing idempotency key",
			call: func(ctx context.Context, _ *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				return c.Submit(ctx, submission(""))
			},
			status: http.StatusBadRequest, code: provider.CodeIdempotencyKeyMissing,
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
		{
			name:       "401 wrong credential",
			credential: "tg-some-other-credential",
			call: func(ctx context.Context, _ *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				return c.Submit(ctx, submission("toolcall-uid-1"))
			},
			status: http.StatusUnauthorized, code: provider.CodeUnauthenticated,
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
		{
			name: "404 wait for an unknown id",
			call: func(ctx context.Context, t *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				return c.Wait(ctx, refFor(t, "no-such-request"), time.Second)
			},
			status: http.StatusNotFound, code: provider.CodeNotFound,
			attempts: func(s reference.Stats) int64 { return s.Gets },
		},
		{
			name: "404 cancel of an unknown id",
			call: func(ctx context.Context, t *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				return c.Cancel(ctx, refFor(t, "no-such-request"))
			},
			status: http.StatusNotFound, code: provider.CodeNotFound,
			attempts: func(s reference.Stats) int64 { return s.Cancels },
		},
		{
			name: "422 same key with other arguments",
			call: func(ctx context.Context, t *testing.T, c *provider.HTTPClient, srv *reference.Server) (*provider.Request, error) {
				if _, err := c.Submit(ctx, submission("toolcall-uid-1")); err != nil {
					return nil, err
				}
				srv.ResetStats()
				s := submission("toolcall-uid-1")
				s.Arguments = json.RawMessage(`{"payment_id": "payment_123", "amount": 4901, "currency": "GBP"}`)
				return c.Submit(ctx, s)
			},
			status: http.StatusUnprocessableEntity, code: provider.CodeIdempotencyKeyReused,
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			f := newFailures()
			opts := []func(*provider.Options){maxAttempts(5), f.option}
			if tc.credential != "" {
				opts = append(opts, func(o *provider.Options) { o.CredentialFile = writeFile(t, "other", tc.credential) })
			}
			c := newClient(t, url, opts...)

			req, err := tc.call(testContext(t), t, c, srv)
			g.Expect(req).To(BeNil())
			pe := providerError(g, err)
			g.Expect(pe.Code).To(Equal(tc.code))
			g.Expect(pe.StatusCode).To(Equal(tc.status))
			g.Expect(pe.Retryable).To(BeFalse())
			g.Expect(provider.IsRetryable(err)).To(BeFalse())
			g.Expect(provider.IsUntrusted(err)).To(BeFalse())
			g.Expect(pe.Detail).NotTo(BeEmpty(), "the provider's detail is kept")
			g.Expect(tc.attempts(srv.Stats())).To(BeEquivalentTo(1), "exactly one attempt reached the provider")
			g.Expect(f.codes()).To(HaveLen(1))
			g.Expect(srv.Stats().Creates).To(BeZero())
		})
	}
}

func TestMaxAttemptsBound(t *testing.T) {
	for _, attempts := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%d attempts", attempts), func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			g.Expect(srv.Faults().Add(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultError5xx, Probability: 1})).To(Succeed())
			c := newClient(t, url, maxAttempts(attempts))

			req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
			g.Expect(req).To(BeNil())
			pe := providerError(g, err)
			g.Expect(pe.Code).To(Equal(provider.CodeInternal))
			g.Expect(pe.StatusCode).To(Equal(http.StatusServiceUnavailable))
			g.Expect(pe.Retryable).To(BeTrue(), "the last error is still a retryable one")
			g.Expect(srv.Stats().Submits).To(BeEquivalentTo(attempts))
			g.Expect(srv.Stats().Creates).To(BeZero())
		})
	}
}

func TestContextCancellationStopsRetries(t *testing.T) {
	cases := []struct {
		name string
		rule reference.FaultRule
		// fired reports that the first attempt reached the point where the client is stuck.
		fired    func(reference.Stats) bool
		wantCode string
		canceled bool
	}{
		{
			name: "while backing off for a long Retry-After",
			rule: reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultRateLimit, RetryAfter: time.Minute, Probability: 1},
			fired: func(s reference.Stats) bool {
				return s.Responses[reference.OpSubmit][http.StatusTooManyRequests] == 1
			},
			wantCode: provider.CodeRateLimited,
		},
		{
			name:     "while an attempt is in flight",
			rule:     reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultDelay, Delay: time.Minute, Count: 1},
			fired:    func(s reference.Stats) bool { return s.InFlight == 1 },
			wantCode: provider.CodeNetwork,
			canceled: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			g.Expect(srv.Faults().Add(tc.rule)).To(Succeed())
			c := newClient(t, url)

			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			type result struct {
				req *provider.Request
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				req, err := c.Submit(ctx, submission("toolcall-uid-1"))
				done <- result{req, err, time.Now()}
			}()
			g.Eventually(func() bool { return tc.fired(srv.Stats()) }).Should(BeTrue())
			g.Consistently(done, 100*time.Millisecond).ShouldNot(Receive(), "the client keeps trying until cancelled")

			cancelled := time.Now()
			cancel()
			var r result
			g.Eventually(done, 5*time.Second).Should(Receive(&r))
			g.Expect(r.at.Sub(cancelled)).To(BeNumerically("<", 2*time.Second))
			g.Expect(r.req).To(BeNil())
			pe := providerError(g, r.err)
			g.Expect(pe.Code).To(Equal(tc.wantCode))
			g.Expect(errors.Is(r.err, context.Canceled)).To(Equal(tc.canceled))

			g.Expect(srv.Stats().Submits).To(BeEquivalentTo(1), "no attempt after the cancellation")
			// The abandoned submission is not performed.
			g.Eventually(func() int64 { return srv.Stats().InFlight }).Should(BeZero())
			g.Expect(srv.Stats().Creates).To(BeZero())
			g.Expect(srv.List("")).To(BeEmpty())
		})
	}
}

// --- wait -------------------------------------------------------------------------------------------------

func TestWaitReturnsEarlyOnDecision(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	type result struct {
		req     *provider.Request
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		req, err := c.Wait(ctx, refFor(t, created.ID), 30*time.Second)
		done <- result{req, err, time.Since(start)}
	}()
	g.Eventually(func() int64 { return srv.Stats().Waiting }).Should(BeEquivalentTo(1))
	g.Consistently(done, 100*time.Millisecond).ShouldNot(Receive(), "the long poll holds while the request is pending")

	decided, err := srv.Decide(created.ID, provider.StatusApproved, "ok by finance", nil)
	g.Expect(err).NotTo(HaveOccurred())

	var r result
	g.Eventually(done).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(r.elapsed).To(BeNumerically("<", 10*time.Second))
	g.Expect(r.req.ID).To(Equal(created.ID))
	g.Expect(r.req.Status).To(Equal(provider.StatusApproved))
	g.Expect(r.req.Decision).NotTo(BeNil())
	g.Expect(r.req.Decision.Status).To(Equal(provider.StatusApproved))
	g.Expect(r.req.Decision.Note).To(Equal("ok by finance"))
	g.Expect(r.req.Decision.ExpiresAt).NotTo(BeNil())
	g.Expect(*r.req.Decision.ExpiresAt).To(BeTemporally("==", *decided.Decision.ExpiresAt))
	g.Expect(*r.req.Decision.ExpiresAt).To(BeTemporally(">", time.Now()))
	g.Expect(srv.Stats().Gets).To(BeEquivalentTo(1))
}

func TestWaitShortPollReturnsPending(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	start := time.Now()
	req, err := c.Wait(ctx, refFor(t, created.ID), time.Second)
	elapsed := time.Since(start)

	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.ID).To(Equal(created.ID))
	g.Expect(req.Status).To(Equal(provider.StatusPending))
	g.Expect(req.Decision).To(BeNil())
	g.Expect(elapsed).To(BeNumerically(">=", 900*time.Millisecond), "the provider held the poll for the wait")
	g.Expect(elapsed).To(BeNumerically("<", 10*time.Second))
	g.Expect(srv.Stats().Gets).To(BeEquivalentTo(1))
}

func TestWaitAttemptTimeoutIsNotExpiry(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	f := newFailures()
	c := newClient(t, url, f.option)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	// The provider stalls the first poll far beyond the client's wait + 10s.
	g.Expect(srv.Faults().Add(reference.FaultRule{Op: reference.OpGet, Kind: reference.FaultDelay, Delay: time.Minute, Count: 1})).To(Succeed())

	f.start = time.Now()
	req, err := c.Wait(ctx, refFor(t, created.ID), time.Second)
	elapsed := time.Since(f.start)

	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.ID).To(Equal(created.ID))
	g.Expect(req.Status).To(Equal(provider.StatusPending), "a client timeout is not an expiry")
	g.Expect(req.Decision).To(BeNil())

	failed := f.all()
	g.Expect(failed).To(HaveLen(1))
	g.Expect(failed[0].op).To(Equal("wait"))
	g.Expect(failed[0].code).To(Equal(provider.CodeTimeout))
	// The attempt was given wait + 10s, no less and not much more.
	g.Expect(failed[0].after).To(BeNumerically(">=", 11*time.Second))
	g.Expect(failed[0].after).To(BeNumerically("<", 15*time.Second))
	g.Expect(elapsed).To(BeNumerically(">=", 12*time.Second), "the retry polled for its wait too")

	g.Expect(srv.Stats().Gets).To(BeEquivalentTo(2))
	g.Eventually(func() int64 { return srv.Stats().Responses[reference.OpGet][0] }).Should(BeEquivalentTo(1))
	current, err := srv.Get(created.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(current.Status).To(Equal(provider.StatusPending))
}

func TestWaitRetriesReset(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = srv.Decide(created.ID, provider.StatusDenied, "not today", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.Faults().Add(reference.FaultRule{Op: reference.OpGet, Kind: reference.FaultReset, Count: 1})).To(Succeed())
	srv.ResetStats()

	req, err := c.Wait(ctx, refFor(t, created.ID), 30*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusDenied))
	g.Expect(req.Decision.Note).To(Equal("not today"))
	st := srv.Stats()
	g.Expect(st.Faults[reference.FaultReset]).To(BeEquivalentTo(1))
	g.Expect(st.Responses[reference.OpGet]).To(Equal(map[int]int64{0: 1, http.StatusOK: 1}))
}

// --- cancel -----------------------------------------------------------------------------------------------

func TestCancelPendingThenAgain(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	for i := range 2 {
		req, err := c.Cancel(ctx, refFor(t, created.ID))
		g.Expect(err).NotTo(HaveOccurred(), "cancel #%d", i+1)
		g.Expect(req.ID).To(Equal(created.ID))
		g.Expect(req.Status).To(Equal(provider.StatusCancelled))
		g.Expect(req.Decision).NotTo(BeNil())
		g.Expect(req.Decision.Status).To(Equal(provider.StatusCancelled))
	}
	st := srv.Stats()
	g.Expect(st.Responses[reference.OpCancel]).To(Equal(map[int]int64{http.StatusOK: 2}))
	g.Expect(st.Cancellations).To(BeEquivalentTo(1))
}

func TestCancelDecidedReturnsRequest(t *testing.T) {
	for _, status := range []string{provider.StatusApproved, provider.StatusDenied} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			c := newClient(t, url)
			ctx := testContext(t)
			created, err := c.Submit(ctx, submission("toolcall-uid-1"))
			g.Expect(err).NotTo(HaveOccurred())
			decided, err := srv.Decide(created.ID, status, "decided first", nil)
			g.Expect(err).NotTo(HaveOccurred())

			req, err := c.Cancel(ctx, refFor(t, created.ID))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.ID).To(Equal(created.ID))
			g.Expect(req.Status).To(Equal(status))
			g.Expect(req.Decision.Note).To(Equal("decided first"))
			g.Expect(req.Decision.ExpiresAt == nil).To(Equal(decided.Decision.ExpiresAt == nil))
			st := srv.Stats()
			g.Expect(st.Responses[reference.OpCancel]).To(Equal(map[int]int64{http.StatusConflict: 1}), "one 409, not retried")
			g.Expect(st.Cancellations).To(BeZero())
		})
	}
}

// --- fail closed -------------------------------------------------------------------------------------------

func TestResponseVerification(t *testing.T) {
	type op int
	const (
		submit op = iota
		wait
		cancel
	)
	cases := []struct {
		name        string
		op          op
		status      int
		contentType string
		body        func(t *testing.T) []byte
		code        string
	}{
		{name: "different id", op: wait, status: 200,
			body: func(t *testing.T) []byte { return requestJSON(t, func(m map[string]any) { m["id"] = "req-2" }) },
			code: provider.CodeUntrusted},
		{name: "different id on cancel", op: cancel, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { m["id"] = "req-2"; m["status"] = provider.StatusCancelled })
			},
			code: provider.CodeUntrusted},
		{name: "different tool", op: submit, status: 201,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { m["tool"] = "delete_account" })
			},
			code: provider.CodeUntrusted},
		{name: "different tool on an approval", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { approved(m); m["tool"] = "delete_account" })
			},
			code: provider.CodeUntrusted},
		{name: "different arguments_sha256", op: submit, status: 201,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { m["arguments_sha256"] = strings.Repeat("0", 64) })
			},
			code: provider.CodeUntrusted},
		{name: "different arguments_sha256 on an approval", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { approved(m); m["arguments_sha256"] = strings.Repeat("f", 64) })
			},
			code: provider.CodeUntrusted},
		{name: "arguments not echoed", op: submit, status: 201,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { delete(m, "arguments"); delete(m, "arguments_sha256") })
			},
			code: provider.CodeUntrusted},
		{name: "arguments echoed as null on an approval", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { approved(m); m["arguments"] = nil; delete(m, "arguments_sha256") })
			},
			code: provider.CodeUntrusted},
		{name: "different arguments without a hash", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) {
					approved(m)
					m["arguments"] = json.RawMessage(`{"payment_id": "payment_123", "amount": 490000, "currency": "GBP"}`)
					delete(m, "arguments_sha256")
				})
			},
			code: provider.CodeUntrusted},
		{name: "different arguments with the submitted arguments' hash", op: submit, status: 201,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) {
					m["arguments"] = json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP", "to": "acct_9"}`)
				})
			},
			code: provider.CodeUntrusted},
		{name: "already_decided about another request", op: cancel, status: 409, contentType: provider.ContentTypeProblemJSON,
			body: func(t *testing.T) []byte {
				var r provider.Request
				NewWithT(t).Expect(json.Unmarshal(requestJSON(t, func(m map[string]any) { approved(m); m["id"] = "req-2" }), &r)).To(Succeed())
				return problemJSON(t, provider.Problem{Status: 409, Code: provider.CodeAlreadyDecided, Request: &r})
			},
			code: provider.CodeUntrusted},
		{name: "already_decided approved without expires_at", op: cancel, status: 409, contentType: provider.ContentTypeProblemJSON,
			body: func(t *testing.T) []byte {
				var r provider.Request
				NewWithT(t).Expect(json.Unmarshal(requestJSON(t, approved), &r)).To(Succeed())
				r.Decision.ExpiresAt = nil
				return problemJSON(t, provider.Problem{Status: 409, Code: provider.CodeAlreadyDecided, Request: &r})
			},
			code: provider.CodeMalformed},
		{name: "malformed JSON", op: wait, status: 200,
			body: func(t *testing.T) []byte { return []byte(`{"id": "req-1", "status": "approved",`) },
			code: provider.CodeMalformed},
		{name: "not an object", op: submit, status: 201,
			body: func(t *testing.T) []byte { return []byte(`["approved"]`) },
			code: provider.CodeMalformed},
		{name: "empty body", op: wait, status: 200,
			body: func(t *testing.T) []byte { return nil },
			code: provider.CodeMalformed},
		{name: "trailing data", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return append(requestJSON(t, nil), requestJSON(t, approved)...)
			},
			code: provider.CodeMalformed},
		{name: "body larger than MaxBodyBytes", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { approved(m); m["padding"] = strings.Repeat("x", 8<<10) })
			},
			code: provider.CodeTooLarge},
		{name: "approved without expires_at", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) {
					approved(m)
					delete(m["decision"].(map[string]any), "expires_at")
				})
			},
			code: provider.CodeMalformed},
		{name: "approved without a decision", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { m["status"] = provider.StatusApproved })
			},
			code: provider.CodeMalformed},
		{name: "approved with a denied decision", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) {
					approved(m)
					m["decision"].(map[string]any)["status"] = provider.StatusDenied
				})
			},
			code: provider.CodeMalformed},
		{name: "unknown status", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { m["status"] = "approved_ish" })
			},
			code: provider.CodeMalformed},
		{name: "no status", op: submit, status: 201,
			body: func(t *testing.T) []byte { return requestJSON(t, func(m map[string]any) { delete(m, "status") }) },
			code: provider.CodeMalformed},
		{name: "no id", op: submit, status: 201,
			body: func(t *testing.T) []byte { return requestJSON(t, func(m map[string]any) { delete(m, "id") }) },
			code: provider.CodeMalformed},
		{name: "unparsable created_at", op: submit, status: 201,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { m["created_at"] = "yesterday" })
			},
			code: provider.CodeMalformed},
		{name: "unparsable expires_at", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) {
					approved(m)
					m["decision"].(map[string]any)["expires_at"] = "16/09/2026 12:06"
				})
			},
			code: provider.CodeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := tc.body(t)
			contentType := tc.contentType
			if contentType == "" {
				contentType = provider.ContentTypeJSON
			}
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
				respond(w, tc.status, contentType, body)
			})
			c := newClient(t, srv.url, func(o *provider.Options) { o.MaxBodyBytes = 4 << 10 })
			ctx := testContext(t)

			var req *provider.Request
			var err error
			switch tc.op {
			case submit:
				req, err = c.Submit(ctx, submission("toolcall-uid-1"))
			case wait:
				req, err = c.Wait(ctx, refFor(t, requestID), time.Second)
			case cancel:
				req, err = c.Cancel(ctx, refFor(t, requestID))
			}
			g.Expect(req).To(BeNil(), "nothing is returned that could be acted on")
			pe := providerError(g, err)
			g.Expect(pe.Code).To(Equal(tc.code), pe.Error())
			g.Expect(pe.StatusCode).To(Equal(tc.status))
			g.Expect(pe.Retryable).To(BeFalse())
			g.Expect(provider.IsUntrusted(err)).To(BeTrue())
			g.Expect(provider.CodeOf(err)).To(Equal(tc.code))
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1), "refused, not retried")
		})
	}
}

func TestCodeHelpersOnOtherErrors(t *testing.T) {
	g := newG(t)
	g.Expect(provider.IsUntrusted(errors.New("plain"))).To(BeFalse())
	g.Expect(provider.IsRetryable(errors.New("plain"))).To(BeFalse())
	g.Expect(provider.CodeOf(errors.New("plain"))).To(BeEmpty())
	wrapped := errors.Join(errors.New("context"), &provider.Error{Op: "wait", Code: provider.CodeUntrusted})
	g.Expect(provider.IsUntrusted(wrapped)).To(BeTrue())
	g.Expect(provider.CodeOf(wrapped)).To(Equal(provider.CodeUntrusted))
}

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
		c := newClient(t, url, maxAttempts(2), func(o *provider.Options) { o.CAFile = writeFile(t, "ca.pem", string(other.PEM)) })
		req, err := c.Submit(testContext(t), submission("toolcall-uid-tls-2"))
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
		c := newClient(t, url, maxAttempts(1))
		_, err := c.Submit(testContext(t), submission("toolcall-uid-tls-3"))
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
					respond(w, 503, provider.ContentTypeProblemJSON, problemJSON(t, provider.Problem{Status: 503, Code: provider.CodeInternal}))
				}).url
			},
		},
		{
			name: "provider echoes the Authorization header in a problem detail",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					respond(w, http.StatusBadRequest, provider.ContentTypeProblemJSON, problemJSON(t, provider.Problem{
						Status: 400, Code: provider.CodeInvalidRequest, Detail: "rejected Authorization: " + r.Header.Get("Authorization"),
					}))
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
			name: "provider echoes the credential as a problem code",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					respond(w, http.StatusBadRequest, provider.ContentTypeProblemJSON, problemJSON(t, provider.Problem{
						Status: 400, Code: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
					}))
				}).url
			},
		},
		{
			name: "provider echoes the credential in a problem title",
			baseURL: func(t *testing.T) string {
				return startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
					respond(w, http.StatusForbidden, provider.ContentTypeProblemJSON, problemJSON(t, provider.Problem{
						Status: 403, Code: "forbidden", Title: "forbidden for " + r.Header.Get("Authorization"),
					}))
				}).url
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			c := newClient(t, tc.baseURL(t), maxAttempts(2), func(o *provider.Options) {
				o.CredentialFile = writeFile(t, "credential", secret+"\n")
			})
			ctx := testContext(t)
			for _, call := range []func() (*provider.Request, error){
				func() (*provider.Request, error) { return c.Submit(ctx, submission("toolcall-uid-1")) },
				func() (*provider.Request, error) { return c.Wait(ctx, refFor(t, requestID), 0) },
				func() (*provider.Request, error) { return c.Cancel(ctx, refFor(t, requestID)) },
			} {
				_, err := call()
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).NotTo(ContainSubstring(secret))
				g.Expect(providerError(g, err).Detail).NotTo(ContainSubstring(secret))
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
	g.Expect(st.Responses[reference.OpSubmit]).To(Equal(map[int]int64{http.StatusUnauthorized: 1, http.StatusCreated: 1}))
	g.Expect(st.Creates).To(BeEquivalentTo(1))

	// The reloaded credential stays in use.
	polled, err := c.Wait(testContext(t), refFor(t, req.ID), 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(polled.ID).To(Equal(req.ID))
	g.Expect(srv.Stats().Responses[reference.OpGet]).To(Equal(map[int]int64{http.StatusOK: 1}))
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
		respond(w, http.StatusUnauthorized, provider.ContentTypeProblemJSON,
			problemJSON(t, provider.Problem{Status: 401, Code: provider.CodeUnauthenticated}))
	})
	c := newClient(t, srv.url, maxAttempts(5), func(o *provider.Options) { o.CredentialFile = credFile })

	_, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	pe := providerError(g, err)
	g.Expect(pe.Code).To(Equal(provider.CodeUnauthenticated))
	g.Expect(pe.Retryable).To(BeFalse())
	g.Expect(srv.hits.Load()).To(BeEquivalentTo(2), "one attempt, one repeat with the reloaded credential")
}
