package provider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

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
	hreq, err := http.NewRequestWithContext(actx, cl.method, c.base+cl.path, body)
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
	data, status, err := c.body(cl, hreq, resp, err, cred)
	if err != nil {
		return nil, err
	}
	return c.trusted(cl, data, status, cred)
}

// body reads the body of a successful answer (200 or 201) to one attempt; a transport error, an
// unreadable or oversized body and any other status are errors.
func (c *HTTPClient) body(cl *call, hreq *http.Request, resp *http.Response, err error, cred string) ([]byte, int, error) {
	if err != nil {
		code := CodeNetwork
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			code = CodeTimeout
		}
		// The same text an http.Client gives: the method and URL, then the cause. The transport
		// error text can carry the URL but never the Authorization header.
		err = &url.Error{Op: urlErrorOp(cl.method), URL: hreq.URL.String(), Err: err}
		return nil, 0, &Error{Op: cl.op, Code: code, Retryable: true, Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxBodyBytes+1))
	if err != nil {
		return nil, 0, &Error{Op: cl.op, StatusCode: resp.StatusCode, Code: CodeNetwork, Retryable: true, Err: err}
	}
	success := resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated
	if int64(len(data)) > c.opts.MaxBodyBytes {
		// An oversized answer is never trusted; an oversized error page (a proxy's 502) is still the
		// status it carries, and retried as such.
		return nil, 0, &Error{Op: cl.op, StatusCode: resp.StatusCode, Code: CodeTooLarge, Detail: fmt.Sprintf("response body exceeds %d bytes", c.opts.MaxBodyBytes),
			Retryable: !success && Codes[statusCode(cl.op, resp.StatusCode)].Retryable, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	if !success && !(cl.noContent && resp.StatusCode == http.StatusNoContent) {
		return nil, 0, errorFor(cl.op, resp, data, cred)
	}
	return data, resp.StatusCode, nil
}

// trusted decodes a success body and refuses it unless it is a well-formed request about the submitted
// one; a cancel's must be cancelled (AAP answers any other state 409).
func (c *HTTPClient) trusted(cl *call, data []byte, status int, cred string) (*Request, error) {
	r, err := DecodeRequest(data)
	if err != nil {
		return nil, &Error{Op: cl.op, StatusCode: status, Code: CodeMalformed, Detail: boundText(redact(err.Error(), cred))}
	}
	if cl.anyRequest && r.ID != cl.ref.ID {
		return nil, &Error{Op: cl.op, StatusCode: status, Code: CodeUntrusted, Detail: fmt.Sprintf("response is about request %q, not %q", r.ID, cl.ref.ID)}
	}
	if err := cl.ref.Matches(r); !cl.anyRequest && err != nil {
		return nil, &Error{Op: cl.op, StatusCode: status, Code: CodeUntrusted, Detail: boundText(redact(err.Error(), cred))}
	}
	if cl.op == opCancel && r.Status != StatusCancelled {
		return nil, &Error{Op: cl.op, StatusCode: status, Code: CodeUntrusted,
			Detail: fmt.Sprintf("the provider answered the cancel %d with the request %s, where AAP answers 200 only with the request cancelled", status, r.Status)}
	}
	sum := sha256.Sum256(data)
	r.BodyDigest = "sha256:" + hex.EncodeToString(sum[:])
	return r, nil
}

// urlErrorOp is how net/http names a method in the errors of its client: "Get", "Post".
func urlErrorOp(method string) string {
	return method[:1] + strings.ToLower(method[1:])
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
