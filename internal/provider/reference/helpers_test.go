package reference_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
)

const credential = "s3cret-instance-credential"

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

// start runs a provider on 127.0.0.1 with a fake clock at t0 and a bbolt file in a temporary directory.
func start(t *testing.T, options ...func(*reference.Options)) *env {
	t.Helper()
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(10 * time.Second)
	clk := clocktesting.NewFakeClock(t0)
	opts := reference.Options{
		DBPath:     filepath.Join(t.TempDir(), "provider.db"),
		Credential: credential,
		Clock:      clk,
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

// request builds an authenticated request; body, if not nil, is sent as JSON (a []byte as it is).
func (e *env) request(method, path string, body any) *http.Request {
	e.t.Helper()
	req := e.newRequest(method, path, body)
	req.Header.Set("Authorization", "Bearer "+credential)
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
	req := e.request(http.MethodPost, "/v1/requests", body)
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

// do sends a request that must get a response.
func (e *env) do(req *http.Request) response {
	e.t.Helper()
	r, err := e.try(req)
	e.g.Expect(err).NotTo(HaveOccurred())
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
	return e.do(e.request(http.MethodPost, "/v1/requests/"+id+"/cancel", nil))
}

// expectRequest checks a JSON response with the given status and decodes its request.
func (e *env) expectRequest(r response, status int) provider.Request {
	e.t.Helper()
	e.g.Expect(r.status).To(Equal(status), string(r.body))
	e.g.Expect(r.header.Get("Content-Type")).To(Equal(provider.ContentTypeJSON))
	var req provider.Request
	e.g.Expect(json.Unmarshal(r.body, &req)).To(Succeed())
	return req
}

// expectProblem checks a problem+json response with the given status and code and decodes it.
func (e *env) expectProblem(r response, status int, code string) provider.Problem {
	e.t.Helper()
	e.g.Expect(r.status).To(Equal(status), string(r.body))
	e.g.Expect(r.header.Get("Content-Type")).To(Equal(provider.ContentTypeProblemJSON))
	var p provider.Problem
	e.g.Expect(json.Unmarshal(r.body, &p)).To(Succeed())
	e.g.Expect(p.Code).To(Equal(code))
	e.g.Expect(p.Status).To(Equal(status))
	e.g.Expect(p.Title).To(Equal(http.StatusText(status)))
	return p
}

func (e *env) stats() reference.Stats { return e.srv.Stats() }

func refund() provider.SubmitBody {
	return provider.SubmitBody{
		Tool:      "issue_refund",
		Arguments: json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}`),
		Timeout:   "30m",
	}
}

func ptr[T any](v T) *T { return &v }
