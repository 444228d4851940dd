package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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

// Operations, as Error.Op and the OnAttempt and OnError options name them.
const (
	opSubmit = "submit"
	opWait   = "wait"
	opLookup = "lookup"
	opCancel = "cancel"
)

// Submission is what Submit sends: AAP's CreateApprovalRequest and its Idempotency-Key.
type Submission struct {
	// IdempotencyKey identifies the execution attempt; it is required, and kept across retries.
	IdempotencyKey string
	Tool           string
	// Arguments is the tool call's arguments, a JSON object.
	Arguments json.RawMessage
	// Timeout is the approval window asked for, sent in one unit (FormatTimeout); at least 1s.
	Timeout time.Duration
	// AgentReasoning is the agent's explanation (spec.reason), sent as agent_reasoning when set.
	AgentReasoning string
	// Context is the request's context object (JSON), sent as context when set.
	Context json.RawMessage
}

// Ref returns what every response about this submission is checked against.
func (s Submission) Ref() (Ref, error) {
	canonical, err := jcs.Transform(s.Arguments)
	if err != nil {
		return Ref{}, fmt.Errorf("canonicalising arguments: %w", err)
	}
	return Ref{Tool: s.Tool, Arguments: string(canonical)}, nil
}

// body is the submission as AAP's CreateApprovalRequest, or what makes it one no provider accepts.
func (s Submission) body() ([]byte, error) {
	switch {
	case s.IdempotencyKey == "":
		return nil, fmt.Errorf("an idempotency key is required: AAP refuses a submission without an Idempotency-Key")
	case s.Tool == "":
		return nil, fmt.Errorf("tool is required")
	case !isJSONObject(s.Arguments):
		return nil, fmt.Errorf("arguments must be a JSON object")
	case len(s.Context) > 0 && !isJSONObject(s.Context):
		return nil, fmt.Errorf("context must be a JSON object when set")
	}
	timeout, err := FormatTimeout(s.Timeout)
	if err != nil {
		return nil, fmt.Errorf("timeout: %w", err)
	}
	return json.Marshal(CreateApprovalRequest{
		Tool: s.Tool, Arguments: s.Arguments, Timeout: timeout, AgentReasoning: s.AgentReasoning, Context: s.Context,
	})
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// Options configure an HTTPClient.
type Options struct {
	// BaseURL is the provider's AAP base URL, which may carry a path: https://approvals.example.com/api/aap.
	BaseURL string
	// CredentialFile holds the instance credential (bearer token). Re-read when the provider answers 401.
	CredentialFile string
	// Credential, when set, reads the instance credential instead of CredentialFile (an
	// ApprovalProvider's Secret). It is read when the client is built and again when the provider
	// answers 401.
	Credential func() (string, error)
	// CAFile is a PEM bundle of CAs to trust instead of the system pool (optional).
	CAFile string
	// CABundle is that PEM bundle itself, instead of CAFile.
	CABundle []byte
	// BackoffBase and BackoffCap bound the exponential backoff between attempts (defaults 500ms, 30s):
	// the first delay is BackoffBase, each next one doubles, every one gets up to half again of jitter,
	// and none exceeds BackoffCap. A provider's Retry-After is a floor. A call is retried until its
	// context ends, and gives up at once when the next attempt would begin after the context's deadline.
	BackoffBase, BackoffCap time.Duration
	// RequestTimeout bounds one non-polling HTTP attempt (default 30s). A long poll gets wait+10s.
	RequestTimeout time.Duration
	// MaxBodyBytes bounds how much of a response body is read (default 1 MiB).
	MaxBodyBytes int64
	// MaxConnsPerHost bounds connections to the provider (default 0: unbounded, as long polls each hold one).
	MaxConnsPerHost int
	// OnAttempt, when set, is told about every attempt before it is made (for metrics), retries
	// included, so that every attempt OnError is told about was told here first.
	OnAttempt func(op string)
	// OnError, when set, is told about every failed attempt (for metrics); code is one of Codes or "other".
	OnError func(op, code string)
}

// HTTPClient implements Client over AAP v1's HTTP API.
type HTTPClient struct {
	// base is the base URL without a trailing slash; every call's path is appended to it.
	base string
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

// BaseURL is the provider's base URL, without a trailing slash.
func (c *HTTPClient) BaseURL() string { return c.base }

// NewHTTPClient returns a client for the provider at opts.BaseURL.
func NewHTTPClient(opts Options) (*HTTPClient, error) {
	base, err := parseBaseURL(opts.BaseURL)
	if err != nil {
		return nil, err
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
	tr, err := newTransport(opts)
	if err != nil {
		return nil, err
	}
	c.rt = tr
	return c, nil
}

// parseBaseURL checks the provider's base URL and returns it without a trailing slash.
func parseBaseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("provider URL %q must be an absolute http(s) URL such as https://approvals.example.com or https://approvals.example.com/api/aap", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("provider URL %q must have no user information, query or fragment: give the AAP base URL alone, such as https://approvals.example.com/api/aap, and the credential in --provider-credential-file", u.Redacted())
	}
	return u.String(), nil
}

// Submit implements Client: POST /v1/requests. A new request (201) and a replay of the same key (200)
// are both answers; either may already be terminal.
func (c *HTTPClient) Submit(ctx context.Context, s Submission) (*Request, error) {
	ref, err := s.Ref()
	if err != nil {
		return nil, &Error{Op: opSubmit, Code: CodeInvalidRequest, Detail: "arguments are not JSON", Err: err}
	}
	body, err := s.body()
	if err != nil {
		return nil, &Error{Op: opSubmit, Code: CodeInvalidRequest, Detail: err.Error()}
	}
	header := http.Header{HeaderIdempotencyKey: {s.IdempotencyKey}}
	return c.do(ctx, &call{op: opSubmit, method: http.MethodPost, path: "/v1/requests", body: body, header: header, ref: ref})
}

// Wait implements Client: GET /v1/requests/{id}, with ?wait= when wait is positive. AAP caps a wait at
// MaxLongPollWait, and so does Wait; a wait under a second is sent as 1s, the least AAP can express.
func (c *HTTPClient) Wait(ctx context.Context, ref Ref, wait time.Duration) (*Request, error) {
	path, err := requestPath(opWait, ref)
	if err != nil {
		return nil, err
	}
	if wait > 0 {
		wait = min(max(wait, time.Second), MaxLongPollWait)
		param, _ := FormatTimeout(wait) // at least 1s: never an error
		path += "?wait=" + param
	}
	return c.do(ctx, &call{op: opWait, method: http.MethodGet, path: path, ref: ref, timeout: wait + 10*time.Second})
}

// Lookup reads request id (GET, no wait) to learn whose it is, as a webhook receiver does for a
// notification it cannot place. The answer is checked to be a well-formed request with that id, but
// not against a submission: it is never a decision to act on.
func (c *HTTPClient) Lookup(ctx context.Context, id string) (*Request, error) {
	ref := Ref{ID: id}
	path, err := requestPath(opLookup, ref)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, &call{op: opLookup, method: http.MethodGet, path: path, ref: ref, anyRequest: true})
}

// Cancel implements Client: DELETE /v1/requests/{id}, which answers the request cancelled (again on a
// repeat). A request that is already terminal (409 already_terminal, or a 409 whose body says nothing
// AAP defines) is read and returned as it is, with no error, so that the caller applies its decision.
// A provider that answers 404, 405 or 501 has no cancel for it: the error is one for which CannotCancel
// is true.
func (c *HTTPClient) Cancel(ctx context.Context, ref Ref) (*Request, error) {
	path, err := requestPath(opCancel, ref)
	if err != nil {
		return nil, err
	}
	req, err := c.do(ctx, &call{op: opCancel, method: http.MethodDelete, path: path, ref: ref})
	var conflict *Error
	if !errors.As(err, &conflict) || conflict.Code != CodeAlreadyTerminal {
		return req, err
	}
	current, werr := c.Wait(ctx, ref, 0)
	if werr != nil {
		return nil, werr
	}
	if !IsTerminal(current.Status) {
		// A 409 for a request still pending is no decision to apply, and the request was not cancelled.
		refused := *conflict
		refused.Detail += "; yet the request is still pending, so it was not cancelled"
		return nil, &refused
	}
	return current, nil
}

// requestPath is the path of a request's resource, its id escaped as one path segment.
func requestPath(op string, ref Ref) (string, error) {
	if ref.ID == "" {
		return "", &Error{Op: op, Code: CodeInvalidRequest, Detail: "the request's id is unknown: it is known only once the provider answered the submission"}
	}
	return "/v1/requests/" + url.PathEscape(ref.ID), nil
}

// call is one operation, which do attempts until it succeeds or fails for good.
type call struct {
	op, method, path string
	body             []byte
	// header holds the call's own headers, added to the ones every request carries.
	header  http.Header
	ref     Ref
	timeout time.Duration
	// noContent accepts a 204 as success (DELETE /v1/instances/{id}).
	noContent bool
	// anyRequest accepts any well-formed request with the ref's id, whatever its tool and arguments
	// (Lookup).
	anyRequest bool
}
