package reference_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

const (
	credential      = "s3cret-instance-credential"
	provisioner     = "s3cret-provisioner-token"
	adminCredential = "s3cret-admin-credential"
)

var t0 = time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)

// env is a reference provider listening on loopback, with a fake clock and a plain HTTP client.
type env struct {
	t      *testing.T
	g      *WithT
	srv    *reference.Server
	url    string
	clock  *clocktesting.FakeClock
	client *http.Client
}

// start runs a provider on 127.0.0.1 with a fake clock at t0, a bbolt file in a temporary directory,
// the static credential and the provisioner token.
func start(t *testing.T, options ...func(*reference.Options)) *env {
	t.Helper()
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(10 * time.Second)
	clk := clocktesting.NewFakeClock(t0)
	opts := reference.Options{
		DBPath:           filepath.Join(t.TempDir(), "provider.db"),
		Credential:       credential,
		ProvisionerToken: provisioner,
		AdminCredential:  adminCredential,
		Clock:            clk,
		Faults:           faults.New(0),
	}
	for _, o := range options {
		o(&opts)
	}
	e := &env{t: t, g: g, clock: clk, client: newClient()}
	e.open(opts)
	return e
}

// open starts a server with opts and replaces e.srv and e.url.
func (e *env) open(opts reference.Options) {
	e.t.Helper()
	srv, err := reference.New(opts)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.t.Cleanup(func() { e.g.Expect(srv.Close()).To(Succeed()) })
	url, err := srv.Start("127.0.0.1:0")
	e.g.Expect(err).NotTo(HaveOccurred())
	e.srv, e.url = srv, url
}

// newClient returns a client that opens a connection per request, so that a fault on one request cannot
// be hidden by the transport silently retrying it on a fresh connection.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// request builds a request with the static credential; body, if not nil, is sent as JSON (a []byte as
// it is).
func (e *env) request(method, path string, body any) *http.Request {
	e.t.Helper()
	return e.requestAs(credential, method, path, body)
}

// adminRequest builds a request with the admin credential.
func (e *env) adminRequest(method, path string, body any) *http.Request {
	e.t.Helper()
	return e.requestAs(adminCredential, method, path, body)
}

// requestAs builds a request with the given bearer credential.
func (e *env) requestAs(token, method, path string, body any) *http.Request {
	e.t.Helper()
	req := e.newRequest(method, path, body)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", provider.ContentTypeJSON)
	}
	return req
}

// newRequest builds a request to the provider with no headers; body, if not nil, is encoded as JSON
// (a []byte is sent as it is).
func (e *env) newRequest(method, path string, body any) *http.Request {
	e.t.Helper()
	var reader io.Reader
	if body != nil {
		data, raw := body.([]byte)
		if !raw {
			var err error
			data, err = json.Marshal(body)
			e.g.Expect(err).NotTo(HaveOccurred())
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, e.url+path, reader)
	e.g.Expect(err).NotTo(HaveOccurred())
	return req
}

func (e *env) submitRequest(key string, body any) *http.Request {
	return e.submitRequestAs(credential, key, body)
}

func (e *env) submitRequestAs(token, key string, body any) *http.Request {
	req := e.requestAs(token, http.MethodPost, "/v1/requests", body)
	if key != "" {
		req.Header.Set(provider.HeaderIdempotencyKey, key)
	}
	return req
}

// try sends a request and reads the whole response.
func (e *env) try(req *http.Request) (response, error) {
	resp, err := e.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: body}, err
}

// do sends a request that must get a response; every response carries an X-Request-ID.
func (e *env) do(req *http.Request) response {
	e.t.Helper()
	r, err := e.try(req)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(uuid.Parse(r.header.Get(provider.HeaderRequestID))).Error().NotTo(HaveOccurred(),
		"%s %s: every response has an X-Request-ID", req.Method, req.URL.Path)
	return r
}

func (e *env) submit(key string, body any) response {
	e.t.Helper()
	return e.do(e.submitRequest(key, body))
}

// create submits refund() under key and returns the created request.
func (e *env) create(key string) provider.Request {
	e.t.Helper()
	return e.expectRequest(e.submit(key, refund()), http.StatusCreated)
}

func (e *env) get(id, query string) response {
	e.t.Helper()
	return e.do(e.request(http.MethodGet, "/v1/requests/"+id+query, nil))
}

func (e *env) cancel(id string) response {
	e.t.Helper()
	return e.do(e.request(http.MethodDelete, "/v1/requests/"+id, nil))
}

// strictly decodes an AAP object, refusing any field its schema does not have and anything after it.
func strictly(g *WithT, body []byte, into any) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	g.ExpectWithOffset(2, dec.Decode(into)).To(Succeed(), "%s", body)
	_, err := dec.Token()
	g.ExpectWithOffset(2, errors.Is(err, io.EOF)).To(BeTrue(), "nothing after the object: %s", body)
}

// The AAP objects exactly as openapi.yaml defines them: strict decoding into these fails on any
// field a provider adds.
type (
	aapDecision struct {
		Status    string     `json:"status"`
		Note      *string    `json:"note"`
		DecidedAt *time.Time `json:"decided_at"`
		ExpiresAt *time.Time `json:"expires_at"`
	}
	aapRequest struct {
		ID             string          `json:"id"`
		Tool           string          `json:"tool"`
		Arguments      json.RawMessage `json:"arguments"`
		Timeout        string          `json:"timeout"`
		AgentReasoning *string         `json:"agent_reasoning"`
		Context        json.RawMessage `json:"context"`
		Status         string          `json:"status"`
		CreatedAt      string          `json:"created_at"`
		DeadlineAt     string          `json:"deadline_at"`
		Decision       *aapDecision    `json:"decision"`
	}
	aapInstance struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Delivery json.RawMessage `json:"delivery"`
	}
	aapCredential struct {
		Token     string  `json:"token"`
		ExpiresAt *string `json:"expires_at"`
	}
	aapProvisioned struct {
		Instance   aapInstance   `json:"instance"`
		Credential aapCredential `json:"credential"`
	}
	aapError struct {
		Error struct {
			Type      string  `json:"type"`
			Code      string  `json:"code"`
			Message   string  `json:"message"`
			Param     *string `json:"param"`
			RequestID string  `json:"request_id"`
		} `json:"error"`
	}
)

// expectRequest checks a JSON response with the given status, decodes it strictly as an AAP
// ApprovalRequest (required fields present, timestamps RFC 3339 UTC, a decision exactly when
// terminal) and returns it as the provider package reads it.
func (e *env) expectRequest(r response, status int) provider.Request {
	e.t.Helper()
	e.g.Expect(r.status).To(Equal(status), string(r.body))
	e.g.Expect(r.header.Get("Content-Type")).To(Equal(provider.ContentTypeJSON))
	var wire aapRequest
	strictly(e.g, r.body, &wire)
	e.g.Expect(uuid.Parse(wire.ID)).Error().NotTo(HaveOccurred())
	e.g.Expect(wire.Tool).NotTo(BeEmpty())
	e.g.Expect(string(wire.Arguments)).To(HavePrefix("{"))
	e.g.Expect(wire.Timeout).To(MatchRegexp(`^[1-9][0-9]*(s|m|h)$`))
	for _, ts := range []string{wire.CreatedAt, wire.DeadlineAt} {
		e.g.Expect(ts).To(HaveSuffix("Z"))
		e.g.Expect(time.Parse(time.RFC3339, ts)).Error().NotTo(HaveOccurred())
	}
	e.g.Expect(wire.Status).To(BeElementOf(provider.StatusPending, provider.StatusApproved, provider.StatusDenied,
		provider.StatusExpired, provider.StatusCancelled))
	if wire.Status == provider.StatusPending {
		e.g.Expect(wire.Decision).To(BeNil(), "a pending request has no decision")
	} else {
		e.g.Expect(wire.Decision).NotTo(BeNil(), "a terminal request has its decision")
		e.g.Expect(wire.Decision.Status).To(Equal(wire.Status))
		e.g.Expect(wire.Decision.DecidedAt).NotTo(BeNil())
		if wire.Status == provider.StatusApproved {
			e.g.Expect(wire.Decision.ExpiresAt).NotTo(BeNil())
			e.g.Expect(*wire.Decision.ExpiresAt).To(BeTemporally(">", *wire.Decision.DecidedAt))
		} else {
			e.g.Expect(wire.Decision.ExpiresAt).To(BeNil(), "only an approval has expires_at")
		}
	}
	var req provider.Request
	e.g.Expect(json.Unmarshal(r.body, &req)).To(Succeed())
	return req
}

// expectError checks an ErrorResponse with the given status and code: strictly AAP's fields, the type
// AAP gives the status, a message, and request_id equal to the X-Request-ID header.
func (e *env) expectError(r response, status int, code string) provider.ErrorBody {
	e.t.Helper()
	e.g.Expect(r.status).To(Equal(status), string(r.body))
	e.g.Expect(r.header.Get("Content-Type")).To(Equal(provider.ContentTypeJSON))
	var wire aapError
	strictly(e.g, r.body, &wire)
	e.g.Expect(wire.Error.Code).To(Equal(code), string(r.body))
	e.g.Expect(wire.Error.Type).To(Equal(provider.TypeForStatus(status)))
	e.g.Expect(wire.Error.Code).To(MatchRegexp(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`))
	e.g.Expect(strings.TrimSpace(wire.Error.Message)).NotTo(BeEmpty())
	e.g.Expect(wire.Error.RequestID).To(Equal(r.header.Get(provider.HeaderRequestID)))
	if wire.Error.Param != nil {
		e.g.Expect(*wire.Error.Param).NotTo(BeEmpty())
	}
	var body provider.ErrorResponse
	e.g.Expect(json.Unmarshal(r.body, &body)).To(Succeed())
	return body.Error
}

func (e *env) stats() reference.Stats { return e.srv.Stats() }

func refund() provider.CreateApprovalRequest {
	return provider.CreateApprovalRequest{
		Tool:      "issue_refund",
		Arguments: json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}`),
		Timeout:   "30m",
	}
}

func ptr[T any](v T) *T { return &v }

// expectAdmin checks an admin API (or approval page) answer with a request and decodes it.
func (e *env) expectAdmin(r response, status int) reference.AdminRequest {
	e.t.Helper()
	e.g.Expect(r.status).To(Equal(status), string(r.body))
	e.g.Expect(r.header.Get("Content-Type")).To(Equal(provider.ContentTypeJSON))
	var out reference.AdminRequest
	strictly(e.g, r.body, &out)
	return out
}
