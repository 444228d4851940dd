package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
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
		Faults:     faults.New(0),
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

// attemptLimit ends a call after its n-th failed attempt. The client retries a retryable failure
// until the call's context ends, and tells OnError of every failed attempt: the limit ends the
// context there, so the call returns that attempt's error instead of trying again.
type attemptLimit struct {
	n      int
	mu     sync.Mutex
	failed int
	cancel context.CancelFunc
}

func limitAttempts(n int) *attemptLimit { return &attemptLimit{n: n} }

// option installs the limit after any OnError already set, which it still calls (apply it last).
func (l *attemptLimit) option(o *provider.Options) {
	prev := o.OnError
	o.OnError = func(op, code string) {
		if prev != nil {
			prev(op, code)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.failed++; l.failed >= l.n && l.cancel != nil {
			l.cancel()
		}
	}
}

// ctx is the context of the next call, which the limit ends after that call's n-th failed attempt.
func (l *attemptLimit) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(testContext(t))
	t.Cleanup(cancel)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed, l.cancel = 0, cancel
	return ctx
}

// failures records the client's OnError reports, and counts its OnAttempt reports by operation.
type failures struct {
	mu       sync.Mutex
	start    time.Time
	list     []failure
	attempts map[string]int
}

type failure struct {
	op, code string
	after    time.Duration
}

func newFailures() *failures { return &failures{start: time.Now(), attempts: map[string]int{}} }

func (f *failures) option(o *provider.Options) {
	o.OnAttempt = func(op string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.attempts[op]++
	}
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

// attemptsOf is how many attempts of op OnAttempt was told about.
func (f *failures) attemptsOf(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts[op]
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
		"id":          requestID,
		"tool":        tool,
		"arguments":   arguments,
		"timeout":     "30m",
		"status":      provider.StatusPending,
		"created_at":  "2026-09-16T12:00:00Z",
		"deadline_at": "2026-09-16T12:30:00Z",
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

// terminal makes a request another outcome than an approval, with the decision AAP gives it.
func terminal(status string) func(map[string]any) {
	return func(m map[string]any) {
		m["status"] = status
		m["decision"] = map[string]any{"status": status, "decided_at": "2026-09-16T12:01:00Z"}
	}
}

// errorJSON is an ErrorResponse as AAP writes one: the type its status has, the code, the message and,
// when not empty, the param.
func errorJSON(t *testing.T, status int, code, message, param string) []byte {
	t.Helper()
	b, err := json.Marshal(provider.ErrorResponse{Error: provider.ErrorBody{
		Type: provider.TypeForStatus(status), Code: code, Message: message, Param: param,
		RequestID: "1184dfc5-0e86-4f88-9b68-882b1dc60467",
	}})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return b
}

// respondError answers an ErrorResponse.
func respondError(t *testing.T, w http.ResponseWriter, status int, code, message string) {
	respond(w, status, provider.ContentTypeJSON, errorJSON(t, status, code, message, ""))
}

// unknownID is a request id the reference provider never assigned.
func unknownID() string { return uuid.NewString() }

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
		{name: "URL with a query", opts: provider.Options{BaseURL: "https://approvals.example.com/api/aap?tenant=1", CredentialFile: good},
			wantErr: []string{"no user information, query or fragment", "https://approvals.example.com/api/aap"}},
		{name: "URL with a fragment", opts: provider.Options{BaseURL: "https://approvals.example.com/api/aap#v1", CredentialFile: good},
			wantErr: []string{"no user information, query or fragment"}},
		{name: "URL with a password", opts: provider.Options{BaseURL: "https://toolgate:" + credential + "@approvals.example.com", CredentialFile: good},
			wantErr: []string{"no user information, query or fragment", "--provider-credential-file"}},
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

	for _, base := range []string{"https://approvals.example.com/", "https://approvals.example.com/api/aap", "http://127.0.0.1:8080/api/aap/"} {
		t.Run("valid "+base, func(t *testing.T) {
			g := newG(t)
			c, err := provider.NewHTTPClient(provider.Options{BaseURL: base, CredentialFile: good})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c).NotTo(BeNil())
		})
	}
}

// --- what goes on the wire -----------------------------------------------------------------------------

type seen struct {
	method, uri, auth, key, contentType, accept string
	header                                      http.Header
	body                                        []byte
}

func TestRequestShape(t *testing.T) {
	ref := refFor(t, requestID)
	cases := []struct {
		name   string
		call   func(context.Context, *provider.HTTPClient) (*provider.Request, error)
		status int
		answer func(map[string]any)
		method string
		uri    string
		key    string
		// body is the CreateApprovalRequest expected, nil for none.
		body map[string]string
	}{
		{
			name: "submit",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Submit(ctx, submission("toolcall-uid-1"))
			},
			status: http.StatusCreated, method: http.MethodPost, uri: "/v1/requests", key: "toolcall-uid-1",
			body: map[string]string{"tool": `"issue_refund"`, "arguments": string(arguments), "timeout": `"30m"`},
		},
		{
			name: "submit with agent_reasoning and context, the timeout in one unit",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				s := submission("toolcall-uid-1")
				s.Timeout = 44*time.Minute + 29*time.Second + 900*time.Millisecond
				s.AgentReasoning = "The customer was charged twice; \"refund\" the duplicate."
				s.Context = json.RawMessage(`{"namespace": "payments", "toolcall": {"name": "refund-1"}}`)
				return c.Submit(ctx, s)
			},
			status: http.StatusCreated, method: http.MethodPost, uri: "/v1/requests", key: "toolcall-uid-1",
			body: map[string]string{
				"tool": `"issue_refund"`, "arguments": string(arguments), "timeout": `"2669s"`,
				"agent_reasoning": `"The customer was charged twice; \"refund\" the duplicate."`,
				"context":         `{"namespace": "payments", "toolcall": {"name": "refund-1"}}`,
			},
		},
		{
			name: "wait with a long poll",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Wait(ctx, ref, 30*time.Second)
			},
			status: http.StatusOK, method: http.MethodGet, uri: "/v1/requests/req-1?wait=30s",
		},
		{
			name: "wait longer than AAP's cap",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Wait(ctx, ref, 2*time.Minute)
			},
			status: http.StatusOK, method: http.MethodGet, uri: "/v1/requests/req-1?wait=30s",
		},
		{
			name: "wait with a fraction of a second",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Wait(ctx, ref, 2500*time.Millisecond)
			},
			status: http.StatusOK, method: http.MethodGet, uri: "/v1/requests/req-1?wait=2s",
		},
		{
			name: "wait under a second",
			call: func(ctx context.Context, c *provider.HTTPClient) (*provider.Request, error) {
				return c.Wait(ctx, ref, 200*time.Millisecond)
			},
			status: http.StatusOK, method: http.MethodGet, uri: "/v1/requests/req-1?wait=1s",
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
			status: http.StatusOK, answer: terminal(provider.StatusCancelled), method: http.MethodDelete, uri: "/v1/requests/req-1",
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
					accept: r.Header.Get("Accept"), header: r.Header.Clone(), body: body,
				}
				respond(w, tc.status, provider.ContentTypeJSON, requestJSON(t, tc.answer))
			})
			// A trailing slash on the base URL must not double the path's slash.
			c := newClient(t, srv.url+"/")

			req, err := tc.call(testContext(t), c)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.ID).To(Equal(requestID))
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1))

			var s seen
			g.Expect(got).To(Receive(&s))
			g.Expect(s.method).To(Equal(tc.method))
			g.Expect(s.uri).To(Equal(tc.uri))
			g.Expect(s.auth).To(Equal("Bearer " + credential))
			g.Expect(s.key).To(Equal(tc.key))
			g.Expect(s.accept).To(Equal(provider.ContentTypeJSON))
			g.Expect(s.header).NotTo(HaveKey("Toolgate-Requester"), "who asked travels in context, not a header")
			if tc.body == nil {
				g.Expect(s.body).To(BeEmpty())
				return
			}
			g.Expect(s.contentType).To(Equal(provider.ContentTypeJSON))
			var body map[string]json.RawMessage
			g.Expect(json.Unmarshal(s.body, &body)).To(Succeed())
			g.Expect(body).To(HaveLen(len(tc.body)), "exactly a CreateApprovalRequest: %s", s.body)
			for field, want := range tc.body {
				g.Expect(body[field]).To(MatchJSON(want), field)
			}
		})
	}
}

// What no provider could accept is refused before anything is sent, with the field and the fix.
func TestSubmitRefusesWhatAAPCannotCarry(t *testing.T) {
	cases := []struct {
		name   string
		change func(*provider.Submission)
		detail []string
	}{
		{"no idempotency key", func(s *provider.Submission) { s.IdempotencyKey = "" }, []string{"idempotency key is required"}},
		{"no tool", func(s *provider.Submission) { s.Tool = "" }, []string{"tool is required"}},
		{"arguments an array", func(s *provider.Submission) { s.Arguments = json.RawMessage(`[1, 2]`) }, []string{"arguments must be a JSON object"}},
		{"arguments not JSON", func(s *provider.Submission) { s.Arguments = json.RawMessage(`{"amount": `) }, []string{"arguments are not JSON"}},
		{"context a string", func(s *provider.Submission) { s.Context = json.RawMessage(`"payments"`) }, []string{"context must be a JSON object"}},
		{"context null", func(s *provider.Submission) { s.Context = json.RawMessage(`null`) }, []string{"context must be a JSON object"}},
		{"timeout zero", func(s *provider.Submission) { s.Timeout = 0 }, []string{"timeout", "shorter than 1s"}},
		{"timeout under a second", func(s *provider.Submission) { s.Timeout = 999 * time.Millisecond }, []string{"timeout", "999ms", "shorter than 1s"}},
		{"timeout negative", func(s *provider.Submission) { s.Timeout = -time.Minute }, []string{"timeout", "shorter than 1s"}},
	}
	srv := startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		respond(w, http.StatusCreated, provider.ContentTypeJSON, requestJSON(t, nil))
	})
	c := newClient(t, srv.url)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newG(t)
			s := submission("toolcall-uid-1")
			tc.change(&s)
			req, err := c.Submit(testContext(t), s)
			g.Expect(req).To(BeNil())
			pe := providerError(g, err)
			g.Expect(pe.Op).To(Equal("submit"))
			g.Expect(pe.Code).To(Equal(provider.CodeInvalidRequest))
			g.Expect(pe.StatusCode).To(BeZero())
			g.Expect(pe.Retryable).To(BeFalse())
			for _, want := range tc.detail {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
		})
	}
	newG(t).Expect(srv.hits.Load()).To(BeZero(), "nothing was sent")

	t.Run("a request id is needed to wait or cancel", func(t *testing.T) {
		g := newG(t)
		for _, call := range []func() (*provider.Request, error){
			func() (*provider.Request, error) { return c.Wait(testContext(t), refFor(t, ""), time.Second) },
			func() (*provider.Request, error) { return c.Cancel(testContext(t), refFor(t, "")) },
		} {
			req, err := call()
			g.Expect(req).To(BeNil())
			g.Expect(provider.CodeOf(err)).To(Equal(provider.CodeInvalidRequest))
			g.Expect(err.Error()).To(ContainSubstring("id is unknown"))
		}
		g.Expect(srv.hits.Load()).To(BeZero())
	})
}

// A base URL with a path prefixes every call: ids are escaped as one path segment, and the wait
// query follows the escaped path.
func TestBaseURLWithPath(t *testing.T) {
	const prefix = "/api/aap"
	t.Run("paths, escaping and the wait query", func(t *testing.T) {
		g := newG(t)
		const id = "a/b c?d#e%f"
		got := make(chan string, 10)
		srv := startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
			got <- r.Method + " " + r.RequestURI
			m := func(m map[string]any) { m["id"] = id }
			switch r.Method {
			case http.MethodPost:
				respond(w, http.StatusCreated, provider.ContentTypeJSON, requestJSON(t, m))
			case http.MethodDelete:
				respond(w, http.StatusOK, provider.ContentTypeJSON, requestJSON(t, func(x map[string]any) { m(x); terminal(provider.StatusCancelled)(x) }))
			default:
				respond(w, http.StatusOK, provider.ContentTypeJSON, requestJSON(t, m))
			}
		})
		c := newClient(t, srv.url+prefix+"/")
		ctx := testContext(t)
		created, err := c.Submit(ctx, submission("toolcall-uid-1"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(created.ID).To(Equal(id))
		_, err = c.Wait(ctx, refFor(t, id), 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Wait(ctx, refFor(t, id), 0)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Cancel(ctx, refFor(t, id))
		g.Expect(err).NotTo(HaveOccurred())
		var uris []string
		for range 4 {
			var u string
			g.Expect(got).To(Receive(&u))
			uris = append(uris, u)
		}
		escaped := prefix + "/v1/requests/a%2Fb%20c%3Fd%23e%25f"
		g.Expect(uris).To(HaveExactElements(
			"POST "+prefix+"/v1/requests", "GET "+escaped+"?wait=5s", "GET "+escaped, "DELETE "+escaped))
	})

	t.Run("the reference provider mounted under the prefix", func(t *testing.T) {
		g := newG(t)
		ref := newProvider(t)
		mux := http.NewServeMux()
		mux.Handle(prefix+"/", http.StripPrefix(prefix, ref.Handler()))
		url := serveLoopback(t, mux)
		c := newClient(t, url+prefix)
		ctx := testContext(t)

		created, err := c.Submit(ctx, submission("toolcall-uid-1"))
		g.Expect(err).NotTo(HaveOccurred())
		replay, err := c.Submit(ctx, submission("toolcall-uid-1"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(replay.ID).To(Equal(created.ID))
		polled, err := c.Wait(ctx, refFor(t, created.ID), time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(polled.Status).To(Equal(provider.StatusPending))
		cancelled, err := c.Cancel(ctx, refFor(t, created.ID))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cancelled.Status).To(Equal(provider.StatusCancelled))
		st := ref.Stats()
		g.Expect(st.Responses[faults.OpSubmit]).To(Equal(map[int]int64{http.StatusCreated: 1, http.StatusOK: 1}))
		g.Expect(st.Responses[faults.OpGet]).To(Equal(map[int]int64{http.StatusOK: 1}))
		g.Expect(st.Responses[faults.OpCancel]).To(Equal(map[int]int64{http.StatusOK: 1}))
		g.Expect(st.Cancellations).To(BeEquivalentTo(1))

		// Without the prefix, the same client configuration reaches nothing.
		bare := newClient(t, url)
		_, err = bare.Submit(ctx, submission("toolcall-uid-2"))
		g.Expect(provider.CodeOf(err)).To(Equal(provider.CodeNotFound))
	})
}
