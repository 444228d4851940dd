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

// The client is liberal where that is safe: a provider that speaks only the seed's wire format (no
// arguments_sha256, no problem+json, no cancel endpoint, replays answered as it likes) works. These
// tests run against a hand-written server on a real loopback socket that answers what each row says.

// seedRequestJSON is a request exactly as the seed's HTTP example writes it: its fields and no others.
func seedRequestJSON(t *testing.T, mutate func(map[string]any)) []byte {
	return requestJSON(t, func(m map[string]any) {
		delete(m, "arguments_sha256")
		if mutate != nil {
			mutate(m)
		}
	})
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
		{name: "expired without a decision", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) { m["status"] = provider.StatusExpired })
			}, want: provider.StatusExpired},
		{name: "arguments echoed in another key order, spacing and number form", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) {
					approved(m)
					m["arguments"] = json.RawMessage("{ \"currency\" : \"GBP\",\n \"amount\": 4.9E3, \"payment_id\": \"payment\\u005f123\" }")
				})
			}, want: provider.StatusApproved},
		{name: "arguments echoed with the optional hash", op: wait, status: 200,
			body: func(t *testing.T) []byte { return requestJSON(t, approved) }, want: provider.StatusApproved},
		{name: "unknown extra fields", op: wait, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) {
					approved(m)
					m["reviewer"] = map[string]any{"name": "Ada"}
					m["links"] = []string{"https://approvals.example.com/r/req-1"}
					m["decision"].(map[string]any)["channel"] = "slack"
				})
			}, want: provider.StatusApproved},
		{name: "replay answered 200 with Idempotent-Replayed", op: submit, status: 200,
			header: map[string]string{provider.HeaderIdempotentReplayed: "true"},
			body:   func(t *testing.T) []byte { return seedRequestJSON(t, nil) }, want: provider.StatusPending},
		{name: "replay answered 200 without Idempotent-Replayed", op: submit, status: 200,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, nil) }, want: provider.StatusPending},
		{name: "replay answered 201 without Idempotent-Replayed", op: submit, status: 201,
			body: func(t *testing.T) []byte { return seedRequestJSON(t, approved) }, want: provider.StatusApproved},
		{name: "replay answered 201 with Idempotent-Replayed", op: submit, status: 201,
			header: map[string]string{provider.HeaderIdempotentReplayed: "true"},
			body:   func(t *testing.T) []byte { return seedRequestJSON(t, nil) }, want: provider.StatusPending},
		{name: "cancelled with the seed's fields only", op: cancel, status: 200,
			body: func(t *testing.T) []byte {
				return seedRequestJSON(t, func(m map[string]any) { m["status"] = provider.StatusCancelled })
			}, want: provider.StatusCancelled},
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

// errorBodies are the bodies an error response may carry: problem+json, or anything else.
var errorBodies = []struct {
	name, contentType, body string
}{
	{"problem+json", provider.ContentTypeProblemJSON, ""}, // body: the row's problem
	{"plain JSON", provider.ContentTypeJSON, `{"error":"something went wrong","code":"E4711"}`},
	{"text", "text/plain; charset=utf-8", "something went wrong\n"},
	{"HTML", "text/html", "<html><body><h1>Something went wrong</h1></body></html>"},
	{"empty", "", ""},
}

// Error responses are classified by their status code; a problem+json code refines it only where the
// API defines that code for that status.
func TestErrorBodiesClassifiedByStatus(t *testing.T) {
	cases := []struct {
		name   string
		op     string
		status int
		// problem is the code the problem+json body carries.
		problem string
		// code is what the client reports for every other body; problemCode for the problem+json one
		// (default: code).
		code, problemCode string
		// retried rows answer the error once and then succeed; the others are final after one attempt.
		retried bool
	}{
		{name: "submit 400", op: "submit", status: 400, problem: provider.CodeInvalidRequest, code: provider.CodeInvalidRequest},
		{name: "submit 401", op: "submit", status: 401, problem: provider.CodeUnauthenticated, code: provider.CodeUnauthenticated},
		{name: "submit 409 in flight", op: "submit", status: 409, problem: provider.CodeIdempotencyInFlight, code: provider.CodeIdempotencyInFlight, retried: true},
		{name: "submit 422 key reused", op: "submit", status: 422, problem: provider.CodeIdempotencyKeyReused, code: provider.CodeIdempotencyKeyReused},
		{name: "submit 429", op: "submit", status: 429, problem: provider.CodeRateLimited, code: provider.CodeRateLimited, retried: true},
		{name: "submit 500", op: "submit", status: 500, problem: provider.CodeInternal, code: provider.CodeHTTPStatus, problemCode: provider.CodeInternal, retried: true},
		{name: "submit 502", op: "submit", status: 502, problem: provider.CodeInternal, code: provider.CodeHTTPStatus, problemCode: provider.CodeInternal, retried: true},
		{name: "submit 503", op: "submit", status: 503, problem: provider.CodeInternal, code: provider.CodeHTTPStatus, problemCode: provider.CodeInternal, retried: true},
		{name: "wait 404", op: "wait", status: 404, problem: provider.CodeNotFound, code: provider.CodeNotFound},
		{name: "wait 408", op: "wait", status: 408, problem: provider.CodeInternal, code: provider.CodeHTTPStatus, retried: true},
		{name: "wait 504", op: "wait", status: 504, problem: provider.CodeInternal, code: provider.CodeHTTPStatus, problemCode: provider.CodeInternal, retried: true},
		{name: "wait 503 claiming not_found", op: "wait", status: 503, problem: provider.CodeNotFound, code: provider.CodeHTTPStatus, retried: true},
		{name: "wait 500 claiming untrusted_response", op: "wait", status: 500, problem: provider.CodeUntrusted, code: provider.CodeHTTPStatus, retried: true},
		{name: "submit 400 claiming idempotency_in_flight", op: "submit", status: 400, problem: provider.CodeIdempotencyInFlight, code: provider.CodeInvalidRequest},
		{name: "cancel 404 (no cancel endpoint)", op: "cancel", status: 404, problem: provider.CodeNotFound, code: provider.CodeCancelUnsupported, problemCode: provider.CodeNotFound},
		{name: "cancel 405 (no cancel endpoint)", op: "cancel", status: 405, problem: provider.CodeInvalidRequest, code: provider.CodeCancelUnsupported},
		{name: "cancel 501 (no cancel endpoint)", op: "cancel", status: 501, problem: provider.CodeInternal, code: provider.CodeCancelUnsupported},
	}
	for _, tc := range cases {
		for _, eb := range errorBodies {
			t.Run(tc.name+" "+eb.name, func(t *testing.T) {
				t.Parallel()
				g := newG(t)
				body := []byte(eb.body)
				want := tc.code
				if eb.name == "problem+json" {
					body = problemJSON(t, provider.Problem{Title: http.StatusText(tc.status), Status: tc.status, Code: tc.problem, Detail: "detail"})
					if tc.problemCode != "" {
						want = tc.problemCode
					}
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
				c := newClient(t, srv.url, maxAttempts(4), f.option)
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
				g.Expect(pe.Detail).NotTo(BeEmpty())
				g.Expect(provider.IsUntrusted(err)).To(BeFalse())
				g.Expect(provider.CannotCancel(err)).To(Equal(tc.op == "cancel"))
				g.Expect(srv.hits.Load()).To(BeEquivalentTo(1), "not retried")
			})
		}
	}
}

// A cancel answered 409 without the current request in the body (the request was decided
// meanwhile) reads the request and returns it: the decision is applied, not lost.
func TestCancelConflictWithoutTheRequestReadsIt(t *testing.T) {
	for _, eb := range errorBodies {
		t.Run(eb.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := []byte(eb.body)
			if eb.name == "problem+json" {
				body = problemJSON(t, provider.Problem{Status: 409, Code: provider.CodeAlreadyDecided, Detail: "already decided"})
			}
			var paths []string
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
				paths = append(paths, r.Method+" "+r.URL.Path)
				if r.Method == http.MethodPost {
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
			g.Expect(paths).To(HaveExactElements("POST /v1/requests/req-1/cancel", "GET /v1/requests/req-1"))
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
	sum := argumentsSHA256(t)
	cases := []struct {
		name      string
		echoed    string
		sum       string
		wantError string
	}{
		{"the same arguments, no hash", `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`, "", ""},
		{"another key order and number form, with the hash", `{"currency":"GBP","amount":4.9e3,"payment_id":"payment_123"}`, sum, ""},
		{"other arguments", `{"payment_id":"payment_123","amount":4900,"currency":"GBP","refund_to":"acct_999"}`, "", "arguments differ"},
		{"other arguments with the spec's hash", `{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`, sum, "arguments differ"},
		{"the same arguments with another hash", `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`, strings.Repeat("0", 64), "arguments_sha256"},
		{"no arguments", ``, sum, "does not echo"},
	}
	for _, tc := range cases {
		req := &provider.Request{ID: requestID, Tool: tool, Arguments: json.RawMessage(tc.echoed), ArgumentsSHA256: tc.sum, Status: provider.StatusApproved}
		err := req.Covers(arguments)
		if tc.wantError == "" {
			g.Expect(err).NotTo(HaveOccurred(), tc.name)
		} else {
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantError)), tc.name)
		}
	}
}
