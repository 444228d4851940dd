package provider_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
)

// --- fail closed -------------------------------------------------------------------------------------------

// Responses are checked where they decide execution: what is not a well-formed request about the
// submitted one, by AAP's ApprovalRequest and Decision rules, is refused with a final error for which
// IsUntrusted is true, and nothing is returned.
func TestResponseVerification(t *testing.T) {
	type op int
	const (
		submit op = iota
		wait
		cancel
		// cancelRead is a cancel answered 409 already_terminal, whose read gets the body.
		cancelRead
	)
	req := func(mutate ...func(map[string]any)) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			return requestJSON(t, func(m map[string]any) {
				for _, f := range mutate {
					f(m)
				}
			})
		}
	}
	decision := func(key string, value any) func(map[string]any) {
		return func(m map[string]any) {
			if value == nil {
				delete(m["decision"].(map[string]any), key)
				return
			}
			m["decision"].(map[string]any)[key] = value
		}
	}
	set := func(key string, value any) func(map[string]any) {
		return func(m map[string]any) {
			if value == nil {
				delete(m, key)
				return
			}
			m[key] = value
		}
	}
	cases := []struct {
		name   string
		op     op
		status int
		body   func(t *testing.T) []byte
		code   string
		detail string
	}{
		// About another request.
		{name: "different id", op: wait, status: 200, body: req(set("id", "req-2")), code: provider.CodeUntrusted, detail: `about request "req-2"`},
		{name: "different id on cancel", op: cancel, status: 200, body: req(set("id", "req-2"), terminal(provider.StatusCancelled)), code: provider.CodeUntrusted},
		{name: "different tool", op: submit, status: 201, body: req(set("tool", "delete_account")), code: provider.CodeUntrusted, detail: `names tool "delete_account"`},
		{name: "different tool on an approval", op: wait, status: 200, body: req(approved, set("tool", "delete_account")), code: provider.CodeUntrusted},
		{name: "arguments not echoed", op: submit, status: 201, body: req(set("arguments", nil)), code: provider.CodeUntrusted, detail: "does not echo"},
		{name: "arguments echoed as null on an approval", op: wait, status: 200, body: req(approved, set("arguments", json.RawMessage(`null`))), code: provider.CodeUntrusted},
		{name: "different arguments", op: wait, status: 200,
			body: req(approved, set("arguments", json.RawMessage(`{"payment_id": "payment_123", "amount": 490000, "currency": "GBP"}`))),
			code: provider.CodeUntrusted, detail: "arguments differ"},
		{name: "an argument added", op: submit, status: 201,
			body: req(set("arguments", json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP", "to": "acct_9"}`))),
			code: provider.CodeUntrusted},
		{name: "terminal read after a cancel's 409, about another request", op: cancelRead, status: 200, body: req(approved, set("id", "req-2")), code: provider.CodeUntrusted},
		{name: "terminal read after a cancel's 409, approving another tool", op: cancelRead, status: 200, body: req(approved, set("tool", "delete_account")), code: provider.CodeUntrusted},

		// A cancel answered 200 with anything but the request cancelled.
		{name: "cancel answered 200 approved", op: cancel, status: 200, body: req(approved), code: provider.CodeUntrusted, detail: "request approved, where AAP answers 200 only with the request cancelled"},
		{name: "cancel answered 200 pending", op: cancel, status: 200, body: req(), code: provider.CodeUntrusted, detail: "request pending"},
		{name: "cancel answered 200 denied", op: cancel, status: 200, body: req(terminal(provider.StatusDenied)), code: provider.CodeUntrusted},

		// Not a request.
		{name: "malformed JSON", op: wait, status: 200, body: func(*testing.T) []byte { return []byte(`{"id": "req-1", "status": "approved",`) }, code: provider.CodeMalformed},
		{name: "not an object", op: submit, status: 201, body: func(*testing.T) []byte { return []byte(`["approved"]`) }, code: provider.CodeMalformed},
		{name: "empty body", op: wait, status: 200, body: func(*testing.T) []byte { return nil }, code: provider.CodeMalformed},
		{name: "trailing data", op: wait, status: 200,
			body: func(t *testing.T) []byte { return append(requestJSON(t, nil), requestJSON(t, approved)...) }, code: provider.CodeMalformed},
		{name: "body larger than MaxBodyBytes", op: wait, status: 200, body: req(approved, set("padding", strings.Repeat("x", 8<<10))), code: provider.CodeTooLarge},
		{name: "unknown status", op: wait, status: 200, body: req(set("status", "approved_ish")), code: provider.CodeMalformed, detail: `unknown status "approved_ish"`},
		{name: "no status", op: submit, status: 201, body: req(set("status", nil)), code: provider.CodeMalformed, detail: "has no status"},
		{name: "no id", op: submit, status: 201, body: req(set("id", nil)), code: provider.CodeMalformed, detail: "has no id"},
		{name: "unparsable created_at", op: submit, status: 201, body: req(set("created_at", "yesterday")), code: provider.CodeMalformed},

		// A decision exactly when terminal, and of the request's status.
		{name: "pending with a decision", op: wait, status: 200, body: req(approved, set("status", provider.StatusPending)), code: provider.CodeMalformed, detail: "pending but carries a decision"},
		{name: "pending with an empty decision", op: submit, status: 201, body: req(set("decision", map[string]any{})), code: provider.CodeMalformed, detail: "pending but carries a decision"},
		{name: "approved without a decision", op: wait, status: 200, body: req(set("status", provider.StatusApproved)), code: provider.CodeMalformed, detail: "approved but carries no decision"},
		{name: "denied without a decision", op: wait, status: 200, body: req(set("status", provider.StatusDenied)), code: provider.CodeMalformed, detail: "denied but carries no decision"},
		{name: "expired without a decision", op: submit, status: 201, body: req(set("status", provider.StatusExpired)), code: provider.CodeMalformed, detail: "expired but carries no decision"},
		{name: "cancelled without a decision", op: cancel, status: 200, body: req(set("status", provider.StatusCancelled)), code: provider.CodeMalformed, detail: "cancelled but carries no decision"},
		{name: "approved with a denied decision", op: wait, status: 200, body: req(approved, decision("status", provider.StatusDenied)), code: provider.CodeMalformed, detail: `status "approved" but decision.status "denied"`},
		{name: "denied with an approved decision", op: wait, status: 200, body: req(approved, set("status", provider.StatusDenied)), code: provider.CodeMalformed},
		{name: "denied with a decision without status", op: wait, status: 200, body: req(terminal(provider.StatusDenied), decision("status", nil)), code: provider.CodeMalformed, detail: `decision.status ""`},

		// An approval's validity: decided_at and expires_at, the one later than the other.
		{name: "approved without expires_at", op: wait, status: 200, body: req(approved, decision("expires_at", nil)), code: provider.CodeMalformed, detail: "without decision.expires_at"},
		{name: "approved without decided_at", op: wait, status: 200, body: req(approved, decision("decided_at", nil)), code: provider.CodeMalformed, detail: "without decision.decided_at"},
		{name: "approved, expiring when decided", op: wait, status: 200, body: req(approved, decision("expires_at", "2026-09-16T12:01:00Z")), code: provider.CodeMalformed, detail: "not later than decision.decided_at"},
		{name: "approved, expiring before it was decided", op: submit, status: 201, body: req(approved, decision("expires_at", "2026-09-16T12:00:59.999Z")), code: provider.CodeMalformed, detail: "not later than"},
		{name: "approved, expiring before it was decided, in another zone", op: wait, status: 200,
			body: req(approved, decision("expires_at", "2026-09-16T13:00:30+01:00")), code: provider.CodeMalformed, detail: "not later than"},
		{name: "unparsable expires_at", op: wait, status: 200, body: req(approved, decision("expires_at", "16/09/2026 12:06")), code: provider.CodeMalformed},
		{name: "terminal read after a cancel's 409, approved without expires_at", op: cancelRead, status: 200, body: req(approved, decision("expires_at", nil)), code: provider.CodeMalformed},

		// expires_at on any other outcome.
		{name: "denied with expires_at", op: wait, status: 200, body: req(terminal(provider.StatusDenied), decision("expires_at", "2026-09-16T12:06:00Z")), code: provider.CodeMalformed, detail: "only an approval has"},
		{name: "expired with expires_at", op: wait, status: 200, body: req(terminal(provider.StatusExpired), decision("expires_at", "2026-09-16T12:06:00Z")), code: provider.CodeMalformed},
		{name: "cancelled with expires_at", op: cancel, status: 200, body: req(terminal(provider.StatusCancelled), decision("expires_at", "2026-09-16T12:06:00Z")), code: provider.CodeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := tc.body(t)
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
				if tc.op == cancelRead && r.Method == http.MethodDelete {
					respondError(t, w, http.StatusConflict, provider.CodeAlreadyTerminal, "the request is already approved")
					return
				}
				respond(w, tc.status, provider.ContentTypeJSON, body)
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
			case cancel, cancelRead:
				req, err = c.Cancel(ctx, refFor(t, requestID))
			}
			g.Expect(req).To(BeNil(), "nothing is returned that could be acted on")
			pe := providerError(g, err)
			g.Expect(pe.Code).To(Equal(tc.code), pe.Error())
			g.Expect(pe.StatusCode).To(Equal(tc.status))
			g.Expect(pe.Retryable).To(BeFalse())
			g.Expect(provider.IsUntrusted(err)).To(BeTrue())
			g.Expect(provider.CodeOf(err)).To(Equal(tc.code))
			g.Expect(err.Error()).To(ContainSubstring(tc.detail))
			hits := int64(1)
			if tc.op == cancelRead {
				hits = 2 // the DELETE and the read
			}
			g.Expect(srv.hits.Load()).To(Equal(hits), "refused, not retried")
		})
	}
}

// Left liberal, as nothing runs on them: fields AAP does not define, a missing note, a missing
// decided_at on an outcome other than an approval.
func TestResponseVerificationIsLiberalWhereSafe(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(map[string]any)
	}{
		{"an approval without a note", approved},
		{"an approval with fields AAP does not define", func(m map[string]any) {
			approved(m)
			m["reviewer"] = map[string]any{"name": "Ada"}
			m["decision"].(map[string]any)["channel"] = "slack"
		}},
		{"an approval expiring a nanosecond after its decision", func(m map[string]any) {
			approved(m)
			m["decision"].(map[string]any)["expires_at"] = "2026-09-16T12:01:00.000000001Z"
		}},
		{"a denial without decided_at", func(m map[string]any) {
			m["status"] = provider.StatusDenied
			m["decision"] = map[string]any{"status": provider.StatusDenied, "note": "no"}
		}},
		{"an expiry without decided_at", func(m map[string]any) {
			m["status"] = provider.StatusExpired
			m["decision"] = map[string]any{"status": provider.StatusExpired}
		}},
		{"a pending request with a null decision", func(m map[string]any) { m["decision"] = nil }},
		{"a pending request without created_at and deadline_at", func(m map[string]any) {
			delete(m, "created_at")
			delete(m, "deadline_at")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newG(t)
			body := requestJSON(t, tc.mutate)
			r, err := provider.DecodeRequest(body)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(refFor(t, requestID).Matches(r)).To(Succeed())
		})
	}
}

func TestCodeHelpersOnOtherErrors(t *testing.T) {
	g := newG(t)
	g.Expect(provider.IsUntrusted(errors.New("plain"))).To(BeFalse())
	g.Expect(provider.CannotCancel(errors.New("plain"))).To(BeFalse())
	g.Expect(provider.CodeOf(errors.New("plain"))).To(BeEmpty())
	wrapped := errors.Join(errors.New("context"), &provider.Error{Op: "wait", Code: provider.CodeUntrusted})
	g.Expect(provider.IsUntrusted(wrapped)).To(BeTrue())
	g.Expect(provider.CodeOf(wrapped)).To(Equal(provider.CodeUntrusted))
	g.Expect(provider.CannotCancel(&provider.Error{Op: "cancel", Code: provider.CodeCancelUnsupported})).To(BeTrue())
	g.Expect(provider.CannotCancel(&provider.Error{Op: "wait", Code: provider.CodeCancelUnsupported})).To(BeFalse(), "only a cancel's")
}
