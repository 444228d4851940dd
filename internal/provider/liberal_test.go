package provider_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
)

// The client is liberal where that is safe: a provider that sends the fewest fields AAP allows, errors
// that are no ErrorResponse (plain text, HTML, other JSON, nothing), fields AAP does not define, or
// answers replays 200 or 201, works. These tests run against a hand-written server on a real loopback
// socket that answers what each row says.

// seedRequestJSON is a request with the fields AAP requires and no others, as the seed's HTTP example
// writes it.
func seedRequestJSON(t *testing.T, mutate func(map[string]any)) []byte {
	return requestJSON(t, mutate)
}

func TestSeedResponsesAreAccepted(t *testing.T) {
	type op int
	const (
		submit op = iota
		wait
		cancel
	)
	cases := []struct {
		name   string
		op     op
		status int
		header map[string]string
		body   func(t *testing.T) []byte
		want   string // the status of the returned request
	}{
		{name: "created with the seed's fields only", op: submit, status: 201,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, nil) }, want: provider.StatusPending},
		{name: "approval with the seed's fields only", op: wait, status: 200,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, approved) }, want: provider.StatusApproved},
		{name: "approval in the submit response", op: submit, status: 201,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, approved) }, want: provider.StatusApproved},
		{name: "denial without decided_at", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) {
					m["status"] = provider.StatusDenied
					m["decision"] = map[string]any{"status": provider.StatusDenied, "note": "no"}
				})
			}, want: provider.StatusDenied},
		{name: "expiry with a decision without decided_at", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) {
					m["status"] = provider.StatusExpired
					m["decision"] = map[string]any{"status": provider.StatusExpired}
				})
			}, want: provider.StatusExpired},
		{name: "arguments echoed in another key order, spacing and number form", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) {
					approved(m)
					m["arguments"] = json.RawMessage("{ \"currency\" : \"GBP\",\n \"amount\": 4.9E3, \"payment_id\": \"payment\\u005f123\" }")
				})
			}, want: provider.StatusApproved},
		{name: "unknown extra fields", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) {
					approved(m)
					m["reviewer"] = map[string]any{"name": "Ada"}
					m["links"] = []string{"https://approvals.example.com/r/req-1"}
					m["arguments_sha256"] = "not checked"
					m["decision"].(map[string]any)["channel"] = "slack"
				})
			}, want: provider.StatusApproved},
		{name: "replay answered 200", op: submit, status: 200,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, nil) }, want: provider.StatusPending},
		{name: "replay answered 200 with the approval", op: submit, status: 200,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, approved) }, want: provider.StatusApproved},
		{name: "replay answered 201", op: submit, status: 201,
			header: map[string]string{"X-Request-ID": "1184dfc5-0e86-4f88-9b68-882b1dc60467"},
			body:   func(t *testing.T) []byte { return seedRequestJSON(t, approved) }, want: provider.StatusApproved},
		{name: "cancelled with the required fields only", op: cancel, status: 200,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, terminal(provider.StatusCancelled)) }, want: provider.StatusCancelled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := tc.body(t)
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				respond(w, tc.status, provider.ContentTypeJSON, body)
			})
			c := newClient(t, srv.url)
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
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.ID).To(Equal(requestID))
			g.Expect(req.Status).To(Equal(tc.want))
			g.Expect(req.Covers(arguments)).To(Succeed())
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1))
		})
	}
}

// errorBodies are the bodies an error response may carry: an ErrorResponse, or anything else.
var errorBodies = []struct {
	name, contentType, body string
}{
	{"ErrorResponse", provider.ContentTypeJSON, ""}, // body: the row's ErrorResponse
	{"ErrorResponse without a code", provider.ContentTypeJSON, `{"error":{"type":"internal","message":"something went wrong"}}`},
	{"other JSON", provider.ContentTypeJSON, `{"error":"something went wrong","code":"E4711"}`},
	{"text", "text/plain; charset=utf-8", "something went wrong\n"},
	{"HTML", "text/html", "<html><body><h1>Something went wrong</h1></body></html>"},
	{"empty", "", ""},
}

// Error responses are classified by their status code; an ErrorResponse's code refines it only where
// the table of codes gives that code that status.
func TestErrorBodiesClassifiedByStatus(t *testing.T) {
	cases := []struct {
		name   string
		op     string
		status int
		// errorCode is the code the ErrorResponse body carries.
		errorCode string
		// code is what the client reports for every other body; ofErrorResponse for the ErrorResponse
		// (default: code).
		code, ofErrorResponse string
		// retried rows answer the error once and then succeed; the others are final after one attempt.
		retried bool
	}{
		{name: "submit 400", op: "submit", status: 400, errorCode: provider.CodeInvalidRequest, code: provider.CodeInvalidRequest},
		{name: "submit 400 naming a provider's own code", op: "submit", status: 400, errorCode: "invalid_timeout", code: provider.CodeInvalidRequest},
		{name: "submit 401", op: "submit", status: 401, errorCode: provider.CodeUnauthenticated, code: provider.CodeUnauthenticated},
		{name: "submit 403", op: "submit", status: 403, errorCode: provider.CodeForbidden, code: provider.CodeForbidden},
		{name: "submit 409 idempotency_conflict", op: "submit", status: 409, errorCode: provider.CodeIdempotencyConflict, code: provider.CodeIdempotencyConflict},
		{name: "submit 409 instance_deleted", op: "submit", status: 409, errorCode: provider.CodeInstanceDeleted, code: provider.CodeIdempotencyConflict, ofErrorResponse: provider.CodeInstanceDeleted},
		{name: "submit 409 with a provider's own code", op: "submit", status: 409, errorCode: "key_in_use", code: provider.CodeIdempotencyConflict},
		{name: "submit 422", op: "submit", status: 422, errorCode: provider.CodeWebhookVerificationFailed, code: provider.CodeWebhookVerificationFailed},
		{name: "submit 413", op: "submit", status: 413, errorCode: provider.CodeInvalidRequest, code: provider.CodeHTTPStatus},
		{name: "submit 429", op: "submit", status: 429, errorCode: provider.CodeRateLimited, code: provider.CodeRateLimited, retried: true},
		{name: "submit 500", op: "submit", status: 500, errorCode: provider.CodeInternal, code: provider.CodeInternal, retried: true},
		{name: "submit 502", op: "submit", status: 502, errorCode: provider.CodeInternal, code: provider.CodeUnavailable, retried: true},
		{name: "submit 503", op: "submit", status: 503, errorCode: provider.CodeUnavailable, code: provider.CodeUnavailable, retried: true},
		{name: "submit 503 claiming idempotency_conflict", op: "submit", status: 503, errorCode: provider.CodeIdempotencyConflict, code: provider.CodeUnavailable, retried: true},
		{name: "submit 500 claiming invalid_request", op: "submit", status: 500, errorCode: provider.CodeInvalidRequest, code: provider.CodeInternal, retried: true},
		{name: "submit 400 claiming rate_limited", op: "submit", status: 400, errorCode: provider.CodeRateLimited, code: provider.CodeInvalidRequest},
		{name: "submit 409 claiming unavailable", op: "submit", status: 409, errorCode: provider.CodeUnavailable, code: provider.CodeIdempotencyConflict},
		{name: "wait 404", op: "wait", status: 404, errorCode: provider.CodeNotFound, code: provider.CodeNotFound},
		{name: "wait 408", op: "wait", status: 408, errorCode: provider.CodeInternal, code: provider.CodeTimeout, retried: true},
		{name: "wait 409", op: "wait", status: 409, errorCode: provider.CodeAlreadyTerminal, code: provider.CodeHTTPStatus, ofErrorResponse: provider.CodeAlreadyTerminal},
		{name: "wait 418", op: "wait", status: 418, errorCode: "teapot", code: provider.CodeHTTPStatus},
		{name: "wait 501", op: "wait", status: 501, errorCode: provider.CodeInternal, code: provider.CodeHTTPStatus},
		{name: "wait 504", op: "wait", status: 504, errorCode: provider.CodeUnavailable, code: provider.CodeUnavailable, retried: true},
		{name: "wait 503 claiming not_found", op: "wait", status: 503, errorCode: provider.CodeNotFound, code: provider.CodeUnavailable, retried: true},
		{name: "wait 500 claiming untrusted_response", op: "wait", status: 500, errorCode: provider.CodeUntrusted, code: provider.CodeInternal, retried: true},
		{name: "wait 400 claiming timeout", op: "wait", status: 400, errorCode: provider.CodeTimeout, code: provider.CodeInvalidRequest},
		{name: "cancel 404 (no such request, or no cancel)", op: "cancel", status: 404, errorCode: provider.CodeNotFound, code: provider.CodeCancelUnsupported},
		{name: "cancel 405 (no cancel)", op: "cancel", status: 405, errorCode: provider.CodeInvalidRequest, code: provider.CodeCancelUnsupported},
		{name: "cancel 501 (no cancel)", op: "cancel", status: 501, errorCode: provider.CodeInternal, code: provider.CodeCancelUnsupported},
		{name: "cancel 409 instance_deleted", op: "cancel", status: 409, errorCode: provider.CodeInstanceDeleted, code: provider.CodeAlreadyTerminal, ofErrorResponse: provider.CodeInstanceDeleted},
	}
	for _, tc := range cases {
		for _, eb := range errorBodies {
			want := tc.code
			if eb.name == "ErrorResponse" && tc.ofErrorResponse != "" {
				want = tc.ofErrorResponse
			}
			if tc.op == "cancel" && want == provider.CodeAlreadyTerminal {
				// A cancel's 409 that is not instance_deleted reads the request rather than failing:
				// TestCancelConflictReadsTheRequest covers these bodies.
				continue
			}
			t.Run(tc.name+" "+eb.name, func(t *testing.T) {
				t.Parallel()
				g := newG(t)
				body := []byte(eb.body)
				if eb.name == "ErrorResponse" {
					body = errorJSON(t, tc.status, tc.errorCode, "the provider's message", "")
				}
				success := http.StatusOK
				if tc.op == "submit" {
					success = http.StatusCreated
				}
				srv := startCanned(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
					if n == 1 || !tc.retried {
						if tc.status == 429 || tc.status == 503 {
							w.Header().Set("Retry-After", "0")
						}
						respond(w, tc.status, eb.contentType, body)
						return
					}
					respond(w, success, provider.ContentTypeJSON, seedRequestJSON(t, nil))
				})
				f := newFailures()
				c := newClient(t, srv.url, f.option)
				ctx := testContext(t)
				var req *provider.Request
				var err error
				switch tc.op {
				case "submit":
					req, err = c.Submit(ctx, submission("toolcall-uid-1"))
				case "wait":
					req, err = c.Wait(ctx, refFor(t, requestID), time.Second)
				case "cancel":
					req, err = c.Cancel(ctx, refFor(t, requestID))
				}
				g.Expect(f.codes()).To(HaveExactElements(tc.op+"/"+want), "the first attempt's failure is classified by its status")
				if tc.retried {
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(req.ID).To(Equal(requestID))
					g.Expect(srv.hits.Load()).To(BeEquivalentTo(2))
					return
				}
				g.Expect(req).To(BeNil())
				pe := providerError(g, err)
				g.Expect(pe.Code).To(Equal(want))
				g.Expect(pe.StatusCode).To(Equal(tc.status))
				g.Expect(pe.Retryable).To(BeFalse())
				if eb.name == "ErrorResponse" {
					g.Expect(pe.Detail).To(ContainSubstring("the provider's message"))
					if tc.errorCode != want {
						g.Expect(pe.Detail).To(HavePrefix(tc.errorCode+": "), "a code not acted on is kept for people")
					}
				}
				g.Expect(provider.IsUntrusted(err)).To(BeFalse())
				g.Expect(provider.CannotCancel(err)).To(Equal(want == provider.CodeCancelUnsupported))
				g.Expect(srv.hits.Load()).To(BeEquivalentTo(1), "not retried")
			})
		}
	}
}

// A cancel answered 409, already_terminal or with a body that is no ErrorResponse, reads the request
// and returns it: the decision is applied, not lost.
func TestCancelConflictReadsTheRequest(t *testing.T) {
	for _, eb := range errorBodies {
		t.Run(eb.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := []byte(eb.body)
			if eb.name == "ErrorResponse" {
				body = errorJSON(t, 409, provider.CodeAlreadyTerminal, "the request is already approved", "")
			}
			var paths []string
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
				paths = append(paths, r.Method+" "+r.URL.RequestURI())
				if r.Method == http.MethodDelete {
					respond(w, http.StatusConflict, eb.contentType, body)
					return
				}
				respond(w, http.StatusOK, provider.ContentTypeJSON, seedRequestJSON(t, approved))
			})
			c := newClient(t, srv.url)

			req, err := c.Cancel(testContext(t), refFor(t, requestID))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.Status).To(Equal(provider.StatusApproved))
			g.Expect(req.Decision.ExpiresAt).NotTo(BeNil())
			g.Expect(paths).To(HaveExactElements("DELETE /v1/requests/req-1", "GET /v1/requests/req-1"), "the read does not wait")
		})
	}
}

// What decides execution stays strict whatever else the provider leaves out: the request's identity,
// an approval's expires_at, a known status.
func TestSeedResponsesStillFailClosed(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(map[string]any)
		code   string
	}{
		{"approval echoing other arguments", func(m map[string]any) {
			approved(m)
			m["arguments"] = json.RawMessage(`{"payment_id":"payment_123","amount":490000,"currency":"GBP"}`)
		}, provider.CodeUntrusted},
		{"approval echoing no arguments", func(m map[string]any) { approved(m); delete(m, "arguments") }, provider.CodeUntrusted},
		{"approval naming another tool", func(m map[string]any) { approved(m); m["tool"] = "delete_account" }, provider.CodeUntrusted},
		{"approval about another request", func(m map[string]any) { approved(m); m["id"] = "req-2" }, provider.CodeUntrusted},
		{"approval without expires_at", func(m map[string]any) {
			approved(m)
			delete(m["decision"].(map[string]any), "expires_at")
		}, provider.CodeMalformed},
		{"approval with an expires_at that is not a time", func(m map[string]any) {
			approved(m)
			m["decision"].(map[string]any)["expires_at"] = "in five minutes"
		}, provider.CodeMalformed},
		{"unknown status", func(m map[string]any) { m["status"] = "accepted" }, provider.CodeMalformed},
		{"expiry without a decision", func(m map[string]any) { m["status"] = provider.StatusExpired }, provider.CodeMalformed},
		{"denial without a decision", func(m map[string]any) { m["status"] = provider.StatusDenied }, provider.CodeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := seedRequestJSON(t, tc.mutate)
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
				respond(w, http.StatusOK, provider.ContentTypeJSON, body)
			})
			c := newClient(t, srv.url)
			ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
			defer cancel()

			req, err := c.Wait(ctx, refFor(t, requestID), time.Second)
			g.Expect(req).To(BeNil())
			g.Expect(provider.CodeOf(err)).To(Equal(tc.code), err.Error())
			g.Expect(provider.IsUntrusted(err)).To(BeTrue())
			g.Expect(strings.Contains(err.Error(), credential)).To(BeFalse())
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1), "refused, not retried")
		})
	}
}

// The check before the Job: an approval covers the spec's arguments by the same rule as the binding.
func TestCoversComparesCanonicalArguments(t *testing.T) {
	g := NewWithT(t)
	cases := []struct {
		name      string
		echoed    string
		wantError string
	}{
		{"the same arguments", `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`, ""},
		{"another key order and number form", `{"currency":"GBP","amount":4.9e3,"payment_id":"payment_123"}`, ""},
		{"other arguments", `{"payment_id":"payment_123","amount":4900,"currency":"GBP","refund_to":"acct_999"}`, "arguments differ"},
		{"another amount", `{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`, "arguments differ"},
		{"not JSON", `{"payment_id":`, "not JSON"},
		{"no arguments", ``, "does not echo"},
		{"null", `null`, "does not echo"},
	}
	for _, tc := range cases {
		req := &provider.Request{ID: requestID, Tool: tool, Arguments: json.RawMessage(tc.echoed), Status: provider.StatusApproved}
		err := req.Covers(arguments)
		if tc.wantError == "" {
			g.Expect(err).NotTo(HaveOccurred(), tc.name)
		} else {
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantError)), tc.name)
		}
	}
}
