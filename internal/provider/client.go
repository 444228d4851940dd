package provider

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gowebpki/jcs"
)

// Client is the provider API as the controller uses it. Every call is idempotent: Submit is keyed by
// the caller's idempotency key, Wait only reads, Cancel of a cancelled request succeeds again.
type Client interface {
	// Submit creates the approval request, or returns the one already created for the same key.
	Submit(ctx context.Context, s Submission) (*Request, error)
	// Wait long-polls the request for up to wait and returns its current state (which may be pending).
	Wait(ctx context.Context, ref Ref, wait time.Duration) (*Request, error)
	// Cancel cancels a pending request. A request decided meanwhile is returned as it is, with no error.
	Cancel(ctx context.Context, ref Ref) (*Request, error)
}

// Submission is what Submit sends.
type Submission struct {
	IdempotencyKey string
	Tool           string
	Arguments      json.RawMessage
	Timeout        time.Duration
	// Requester is who asked (a username); sent in the optional Toolgate-Requester header when set.
	Requester string
}

// Ref returns what every response about this submission is checked against.
func (s Submission) Ref() (Ref, error) {
	canonical, err := jcs.Transform(s.Arguments)
	if err != nil {
		return Ref{}, fmt.Errorf("canonicalising arguments: %w", err)
	}
	return Ref{Tool: s.Tool, Arguments: string(canonical), ArgumentsSHA256: sha256Hex(canonical)}, nil
}

// Options configure an HTTPClient.
type Options struct {
	// BaseURL is the provider's base URL, e.g. https://approvals.example.com.
	BaseURL string
	// CredentialFile holds the instance credential (bearer token). Re-read when the provider answers 401.
	CredentialFile string
	// CAFile is a PEM bundle of CAs to trust instead of the system pool (optional).
	CAFile string
	// BackoffBase and BackoffCap bound the full-jitter backoff between attempts (defaults 500ms, 30s).
	BackoffBase, BackoffCap time.Duration
	// MaxAttempts bounds attempts per call; 0 retries until the context ends.
	MaxAttempts int
	// RequestTimeout bounds one non-polling HTTP attempt (default 30s). A long poll gets wait+10s.
	RequestTimeout time.Duration
	// MaxBodyBytes bounds how much of a response body is read (default 1 MiB).
	MaxBodyBytes int64
	// MaxConnsPerHost bounds connections to the provider (default 0: unbounded, as long polls each hold one).
	MaxConnsPerHost int
	// OnError, when set, is told about every failed attempt (for metrics).
	OnError func(op, code string)
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper
}

// HTTPClient implements Client over the provider's HTTP API.
type HTTPClient struct {
	base *url.URL
	// rt carries every attempt. Calls go to it directly rather than through an http.Client: redirects
	// are never followed, there is no cookie jar, and a client would copy every request's headers
	// for redirects that never happen, which a long poll would hold for its whole wait.
	rt   http.RoundTripper
	opts Options

	credMu sync.RWMutex
	cred   string
	// readHeader is the header of every request without a body or an idempotency key (the long
	// polls), built once per credential and shared: a transport only reads a request's header, and
	// thousands of polls in flight need not each hold a copy.
	readHeader http.Header
}

var _ Client = (*HTTPClient)(nil)

// NewHTTPClient returns a client for the provider at opts.BaseURL.
func NewHTTPClient(opts Options) (*HTTPClient, error) {
	base, err := url.Parse(strings.TrimRight(opts.BaseURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("provider URL %q must be an absolute http(s) URL such as https://approvals.example.com", opts.BaseURL)
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = 500 * time.Millisecond
	}
	if opts.BackoffCap <= 0 {
		opts.BackoffCap = 30 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	c := &HTTPClient{base: base, opts: opts}
	if err := c.reloadCredential(); err != nil {
		return nil, err
	}
	rt := opts.Transport
	if rt == nil {
		tr, err := newTransport(opts)
		if err != nil {
			return nil, err
		}
		rt = tr
	}
	c.rt = rt
	return c, nil
}

func newTransport(opts Options) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 1024
	tr.MaxConnsPerHost = opts.MaxConnsPerHost
	tr.IdleConnTimeout = 90 * time.Second
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading provider CA file %s: %w", opts.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("provider CA file %s holds no PEM certificate", opts.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return tr, nil
}

func (c *HTTPClient) reloadCredential() error {
	if c.opts.CredentialFile == "" {
		return fmt.Errorf("a provider credential file is required (--provider-credential-file)")
	}
	b, err := os.ReadFile(c.opts.CredentialFile)
	if err != nil {
		return fmt.Errorf("reading provider credential file %s: %w", c.opts.CredentialFile, err)
	}
	cred := strings.TrimSpace(string(b))
	if cred == "" {
		return fmt.Errorf("provider credential file %s is empty", c.opts.CredentialFile)
	}
	c.credMu.Lock()
	c.cred = cred
	c.readHeader = requestHeader(cred)
	c.credMu.Unlock()
	return nil
}

// requestHeader is what every request carries.
func requestHeader(cred string) http.Header {
	return http.Header{"Authorization": {"Bearer " + cred}, "Accept": {ContentTypeJSON + ", " + ContentTypeProblemJSON}}
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

// Submit implements Client.
func (c *HTTPClient) Submit(ctx context.Context, s Submission) (*Request, error) {
	ref, err := s.Ref()
	if err != nil {
		return nil, &Error{Op: "submit", Code: CodeInvalidRequest, Detail: "arguments are not canonical JSON", Err: err}
	}
	body, err := json.Marshal(SubmitBody{Tool: s.Tool, Arguments: s.Arguments, Timeout: FormatTimeout(s.Timeout)})
	if err != nil {
		return nil, &Error{Op: "submit", Code: CodeInvalidRequest, Err: err}
	}
	return c.do(ctx, &call{op: "submit", method: http.MethodPost, path: "/v1/requests", body: body, header: submitHeader(s), ref: ref})
}

// submitHeader is what a submission adds to the headers every request carries.
func submitHeader(s Submission) http.Header {
	h := http.Header{}
	if s.IdempotencyKey != "" {
		h.Set(HeaderIdempotencyKey, s.IdempotencyKey)
	}
	if s.Requester != "" {
		h.Set(HeaderRequester, EncodeHeaderValue(s.Requester))
	}
	return h
}

// EncodeHeaderValue writes s as a header value: printable ASCII as it is, every other byte (and "%")
// percent-encoded, so that any username fits in a header. url.PathUnescape reads it back.
func EncodeHeaderValue(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Wait implements Client.
func (c *HTTPClient) Wait(ctx context.Context, ref Ref, wait time.Duration) (*Request, error) {
	path := "/v1/requests/" + url.PathEscape(ref.ID)
	if wait > 0 {
		path += "?wait=" + url.QueryEscape(FormatTimeout(wait))
	}
	return c.do(ctx, &call{op: "wait", method: http.MethodGet, path: path, ref: ref, timeout: wait + 10*time.Second})
}

// Cancel implements Client. A provider that answers 409 without the current request in the body has
// decided the request meanwhile: Cancel reads it and returns it. A provider without the cancel
// endpoint (404, 405 or 501 on it) gets an error for which CannotCancel is true.
func (c *HTTPClient) Cancel(ctx context.Context, ref Ref) (*Request, error) {
	req, err := c.do(ctx, &call{op: "cancel", method: http.MethodPost, path: "/v1/requests/" + url.PathEscape(ref.ID) + "/cancel", ref: ref})
	var pe *Error
	if errors.As(err, &pe) && pe.StatusCode == http.StatusConflict && pe.Code == CodeAlreadyDecided {
		return c.Wait(ctx, ref, 0)
	}
	return req, err
}

type call struct {
	op, method, path string
	body             []byte
	// header holds the call's own headers, added to the ones every request carries.
	header  http.Header
	ref     Ref
	timeout time.Duration
}

// do runs a call with retries: full-jitter exponential backoff with Retry-After as a floor, until
// the call succeeds, fails with a non-retryable error, MaxAttempts is reached or ctx ends.
//
// A long poll spends its whole wait inside do, attempt and the transport, on a goroutine of its own
// for each waiting request. The frames on that path are kept small (the call travels by pointer;
// building the request, reading the answer and judging a failure are functions of their own) so that
// the goroutine's stack stays at its smallest size while it waits.
func (c *HTTPClient) do(ctx context.Context, cl *call) (*Request, error) {
	var st retryState
	for {
		if ctx.Err() != nil && st.last != nil {
			// The deadline ended the retries: the last failure says why they were needed.
			return nil, st.last
		}
		cred := c.credential()
		req, err := c.attempt(ctx, cl, cred)
		if err == nil {
			return req, nil
		}
		delay, pe := c.failed(cl, err, cred, &st)
		if pe != nil {
			return nil, pe
		}
		if !sleepCtx(ctx, delay) {
			return nil, st.last
		}
	}
}

// retryState is what do carries from one failed attempt to the next.
type retryState struct {
	attempt  int
	reloaded bool
	last     *Error
}

// failed judges a failed attempt: it returns the error to give up with, or the delay before trying again.
func (c *HTTPClient) failed(cl *call, err error, cred string, st *retryState) (time.Duration, *Error) {
	var pe *Error
	if !errors.As(err, &pe) {
		pe = &Error{Op: cl.op, Code: CodeNetwork, Retryable: true, Err: err}
	}
	st.last = pe
	if c.opts.OnError != nil {
		c.opts.OnError(cl.op, metricCode(pe.Code))
	}
	if pe.Code == CodeUnauthenticated && !st.reloaded {
		// A rotated Secret: read the credential again and repeat once, if it changed.
		st.reloaded = true
		if rerr := c.reloadCredential(); rerr == nil && c.credential() != cred {
			return 0, nil
		}
	}
	attempt := st.attempt
	st.attempt++
	if !pe.Retryable || (c.opts.MaxAttempts > 0 && attempt+1 >= c.opts.MaxAttempts) {
		return 0, pe
	}
	delay := fullJitter(c.opts.BackoffBase, c.opts.BackoffCap, attempt)
	if pe.RetryAfter > delay {
		delay = pe.RetryAfter
	}
	return delay, nil
}

// sleepCtx waits for d, or less if ctx ends first; it reports whether the whole delay passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fullJitter returns a random delay in [0, min(cap, base*2^attempt)).
func fullJitter(base, ceiling time.Duration, attempt int) time.Duration {
	d := ceiling
	if attempt < 32 {
		if exp := base << attempt; exp > 0 && exp < ceiling {
			d = exp
		}
	}
	return rand.N(d) + 1
}

// attempt makes one HTTP request of the call.
func (c *HTTPClient) attempt(ctx context.Context, cl *call, cred string) (*Request, error) {
	hreq, cancel, err := c.newRequest(ctx, cl, cred)
	if err != nil {
		return nil, err
	}
	defer cancel()
	resp, err := c.rt.RoundTrip(hreq)
	return c.answer(cl, hreq, resp, err, cred)
}

// newRequest builds one attempt's HTTP request, bounded by the call's timeout.
func (c *HTTPClient) newRequest(ctx context.Context, cl *call, cred string) (*http.Request, context.CancelFunc, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, &Error{Op: cl.op, Code: CodeTimeout, Detail: "gave up waiting for the provider", Err: err}
	}
	timeout := cl.timeout
	if timeout <= 0 {
		timeout = c.opts.RequestTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	hreq, err := http.NewRequestWithContext(actx, cl.method, c.base.String()+cl.path, body)
	if err != nil {
		cancel()
		return nil, nil, &Error{Op: cl.op, Code: CodeInvalidRequest, Err: err}
	}
	if cl.body == nil && len(cl.header) == 0 {
		hreq.Header = c.sharedReadHeader(cred)
		return hreq, cancel, nil
	}
	hreq.Header = requestHeader(cred)
	if cl.body != nil {
		hreq.Header.Set("Content-Type", ContentTypeJSON)
	}
	for k, v := range cl.header {
		hreq.Header[k] = v
	}
	return hreq, cancel, nil
}

// answer reads and judges the response to one attempt (or the transport's error).
func (c *HTTPClient) answer(cl *call, hreq *http.Request, resp *http.Response, err error, cred string) (*Request, error) {
	if err != nil {
		code := CodeNetwork
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			code = CodeTimeout
		}
		// The same text an http.Client gives: the method and URL, then the cause. The transport
		// error text can carry the URL but never the Authorization header.
		err = &url.Error{Op: urlErrorOp(cl.method), URL: hreq.URL.String(), Err: err}
		return nil, &Error{Op: cl.op, Code: code, Retryable: true, Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxBodyBytes+1))
	if err != nil {
		return nil, &Error{Op: cl.op, StatusCode: resp.StatusCode, Code: CodeNetwork, Retryable: true, Err: err}
	}
	if int64(len(data)) > c.opts.MaxBodyBytes {
		// An oversized answer is never trusted; an oversized error page (a proxy's 502) is still the
		// status it carries, and retried as such.
		ok := resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated
		return nil, &Error{Op: cl.op, StatusCode: resp.StatusCode, Code: CodeTooLarge, Detail: fmt.Sprintf("response body exceeds %d bytes", c.opts.MaxBodyBytes),
			Retryable: !ok && retryableStatus(resp.StatusCode, codeForStatus(cl.op, resp.StatusCode)), RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		return c.trusted(cl, data, resp.StatusCode, cred)
	}
	return c.problem(cl, resp, data, cred)
}

// redact removes the credential from text taken from a response, so that a provider echoing it
// cannot put it into an error.
func redact(text, cred string) string {
	if cred == "" {
		return text
	}
	return strings.ReplaceAll(text, cred, "[redacted]")
}

// trusted decodes a success body and refuses it unless it is about the submitted request.
func (c *HTTPClient) trusted(cl *call, data []byte, status int, cred string) (*Request, error) {
	r, err := DecodeRequest(data)
	if err != nil {
		return nil, &Error{Op: cl.op, StatusCode: status, Code: CodeMalformed, Detail: redact(err.Error(), cred)}
	}
	if err := cl.ref.Matches(r); err != nil {
		return nil, &Error{Op: cl.op, StatusCode: status, Code: CodeUntrusted, Detail: redact(err.Error(), cred)}
	}
	return r, nil
}

// problem judges an error response. The status code decides; a problem+json code refines it where the
// status alone is ambiguous (a 409). A body that is not problem+json (plain JSON, text, an HTML page,
// nothing) is classified by the status code alone.
func (c *HTTPClient) problem(cl *call, resp *http.Response, data []byte, cred string) (*Request, error) {
	var p Problem
	perr := json.Unmarshal(data, &p)
	var syntax *json.SyntaxError
	if errors.As(perr, &syntax) {
		p = Problem{} // not JSON at all: the status alone
	}
	code := p.Code
	if !codeFits(code, resp.StatusCode) || unsupported(cl.op, resp.StatusCode) {
		code = codeForStatus(cl.op, resp.StatusCode)
	}
	if cl.op == "cancel" && resp.StatusCode == http.StatusConflict && p.Code == CodeAlreadyDecided && (perr != nil || p.Request != nil) {
		// Cancel of a request decided meanwhile: the body holds the current request. A body that says so
		// but decodes only in part must not be acted on.
		if perr != nil {
			return nil, &Error{Op: cl.op, StatusCode: resp.StatusCode, Code: CodeMalformed, Detail: redact("already_decided response does not decode: "+perr.Error(), cred)}
		}
		if err := checkWellFormed(p.Request); err != nil {
			return nil, &Error{Op: cl.op, StatusCode: resp.StatusCode, Code: CodeMalformed, Detail: redact(err.Error(), cred)}
		}
		if err := cl.ref.Matches(p.Request); err != nil {
			return nil, &Error{Op: cl.op, StatusCode: resp.StatusCode, Code: CodeUntrusted, Detail: redact(err.Error(), cred)}
		}
		return p.Request, nil
	}
	detail := p.Detail
	if detail == "" {
		detail = p.Title
	}
	if detail == "" {
		detail = http.StatusText(resp.StatusCode)
	}
	if p.Code != "" && p.Code != code {
		detail = p.Code + ": " + detail // a code the API does not define: kept for people, not acted on
	}
	return nil, &Error{
		Op: cl.op, StatusCode: resp.StatusCode, Code: code, Detail: redact(detail, cred),
		Retryable:  retryableStatus(resp.StatusCode, code),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
	}
}

// codeFits reports whether a problem code is one the API defines for this status: only then does it
// refine what the status says. A code the API does not define, one that contradicts the status, or
// one of the client's own (untrusted_response...) is not the provider's to send.
func codeFits(code string, status int) bool {
	switch code {
	case CodeInvalidRequest, CodeIdempotencyKeyMissing, CodeInvalidTimeout:
		return status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge
	case CodeUnauthenticated:
		return status == http.StatusUnauthorized
	case CodeNotFound:
		return status == http.StatusNotFound
	case CodeIdempotencyInFlight, CodeAlreadyDecided:
		return status == http.StatusConflict
	case CodeIdempotencyKeyReused:
		return status == http.StatusUnprocessableEntity
	case CodeRateLimited:
		return status == http.StatusTooManyRequests
	case CodeInternal:
		return status >= 500
	}
	return false
}

// unsupported reports whether status says the provider does not offer the operation at all, whatever
// the body says: the cancel endpoint is not in the seed's wire format.
func unsupported(op string, status int) bool {
	return op == "cancel" && (status == http.StatusMethodNotAllowed || status == http.StatusNotImplemented)
}

// codeForStatus is the code of an error response that names none the API defines.
func codeForStatus(op string, status int) string {
	switch {
	case unsupported(op, status), op == "cancel" && status == http.StatusNotFound:
		return CodeCancelUnsupported
	case status == http.StatusBadRequest:
		return CodeInvalidRequest
	case status == http.StatusUnauthorized:
		return CodeUnauthenticated
	case status == http.StatusNotFound:
		return CodeNotFound
	case status == http.StatusConflict && op == "submit":
		// Submissions are idempotent: a conflict is the same key still being processed.
		return CodeIdempotencyInFlight
	case status == http.StatusConflict && op == "cancel":
		return CodeAlreadyDecided
	case status == http.StatusUnprocessableEntity && op == "submit":
		return CodeIdempotencyKeyReused
	case status == http.StatusTooManyRequests:
		return CodeRateLimited
	}
	return CodeHTTPStatus
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// urlErrorOp is how net/http names a method in the errors of its client: "Get", "Post".
func urlErrorOp(method string) string {
	return method[:1] + strings.ToLower(method[1:])
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// metricCode bounds the error codes used as metric labels to the ones the API and the client
// define: a provider cannot create series at will.
func metricCode(code string) string {
	switch code {
	case CodeInvalidRequest, CodeIdempotencyKeyMissing, CodeInvalidTimeout, CodeUnauthenticated, CodeNotFound,
		CodeIdempotencyInFlight, CodeAlreadyDecided, CodeIdempotencyKeyReused, CodeRateLimited, CodeInternal,
		CodeNetwork, CodeTimeout, CodeHTTPStatus, CodeMalformed, CodeTooLarge, CodeUntrusted, CodeCancelUnsupported:
		return code
	}
	return "other"
}
