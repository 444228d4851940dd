package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
)

// Hostile provider answers, for each of Submit, Wait and Cancel, beyond those TestResponseVerification
// covers. Fail closed: every one of them is refused with a typed, final error that says what was
// wrong, after exactly one attempt, and nothing is returned that could be acted on.

type hostileOp string

const (
	opSubmit hostileOp = "submit"
	opWait   hostileOp = "wait"
	opCancel hostileOp = "cancel"
	// opCancelRead is a cancel answered 409 already_terminal: the hostile body answers its read.
	opCancelRead hostileOp = "cancel, then the read after its 409"
)

func (op hostileOp) call(ctx context.Context, t *testing.T, c *provider.HTTPClient) (*provider.Request, error) {
	switch op {
	case opSubmit:
		return c.Submit(ctx, submission("toolcall-uid-1"))
	case opWait:
		return c.Wait(ctx, refFor(t, requestID), time.Second)
	default:
		return c.Cancel(ctx, refFor(t, requestID))
	}
}

// errorOp is the operation an error of op names: the read after a cancel's 409 is a wait.
func (op hostileOp) errorOp() string {
	if op == opCancelRead {
		return string(opWait)
	}
	return string(op)
}

// hostileHandler answers every request of op with status and body; for opCancelRead, the DELETE gets
// a 409 already_terminal first.
func hostileHandler(t *testing.T, op hostileOp, status int, body []byte) func(int64, http.ResponseWriter, *http.Request) {
	return func(_ int64, w http.ResponseWriter, r *http.Request) {
		if op == opCancelRead && r.Method == http.MethodDelete {
			respondError(t, w, http.StatusConflict, provider.CodeAlreadyTerminal, "the request is already approved")
			return
		}
		respond(w, status, provider.ContentTypeJSON, body)
	}
}

// orderedApproval is an approved request about submission("...") written field by field, so that a
// test can choose what comes after the decision.
func orderedApproval(after string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"tool":%q,"arguments":%s,"status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"}%s}`,
		requestID, tool, arguments, after)
}

func decisionField(key string, value any) func(map[string]any) {
	return func(m map[string]any) {
		approved(m)
		m["decision"].(map[string]any)[key] = value
	}
}

func TestHostileResponses(t *testing.T) {
	const maxBody = 4 << 10
	type hostile struct {
		name        string
		op          hostileOp
		status      int
		contentType string
		body        func(t *testing.T) []byte
		// endless streams body, then padding that never ends.
		endless   bool
		code      string
		untrusted bool
		detail    []string
	}
	pending := func(mutate func(map[string]any)) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return requestJSON(t, mutate) }
	}
	raw := func(s string) func(t *testing.T) []byte { return func(*testing.T) []byte { return []byte(s) } }
	echoing := func(args string, mutate func(map[string]any)) func(t *testing.T) []byte {
		return pending(func(m map[string]any) {
			if mutate != nil {
				mutate(m)
			}
			m["arguments"] = json.RawMessage(args)
		})
	}
	malformed := func(name string, op hostileOp, status int, body func(*testing.T) []byte, detail ...string) hostile {
		return hostile{name: name, op: op, status: status, body: body, code: provider.CodeMalformed, untrusted: true, detail: detail}
	}
	untrusted := func(name string, op hostileOp, status int, body func(*testing.T) []byte, detail ...string) hostile {
		return hostile{name: name, op: op, status: status, body: body, code: provider.CodeUntrusted, untrusted: true, detail: detail}
	}
	tooLarge := func(name string, op hostileOp, status int, body func(*testing.T) []byte) hostile {
		return hostile{name: name, op: op, status: status, body: body, code: provider.CodeTooLarge, untrusted: true,
			detail: []string{fmt.Sprintf("exceeds %d bytes", maxBody)}}
	}
	huge := func(t *testing.T) []byte {
		return requestJSON(t, func(m map[string]any) { approved(m); m["padding"] = strings.Repeat("x", 2*maxBody) })
	}

	cases := []hostile{
		// Malformed JSON.
		malformed("submit: truncated JSON", opSubmit, 201, raw(`{"id": "req-1", "status": "approved",`), "response is not a request", "unexpected EOF"),
		malformed("submit: null", opSubmit, 201, raw(`null`), "response has no id"),
		malformed("wait: an HTML page with 200", opWait, 200, raw(`<html><body>approved</body></html>`), "response is not a request", "invalid character '<'"),
		malformed("wait: a stray closing brace after the request", opWait, 200,
			func(t *testing.T) []byte { return append(requestJSON(t, approved), '}') }, "trailing data"),
		malformed("cancel: truncated JSON", opCancel, 200, raw(`{"id": "req-1", "status": "cancelled"`), "response is not a request"),
		malformed("cancel: a stray closing bracket after the request", opCancel, 200,
			func(t *testing.T) []byte {
				return append(requestJSON(t, func(m map[string]any) { m["status"] = provider.StatusCancelled }), ']')
			}, "trailing data"),
		malformed("cancel: the read after a 409 has a field of the wrong type", opCancelRead, 200,
			pending(decisionField("note", 42)), "response is not a request", "decision.note"),
		malformed("cancel: the read after a 409 has a complete approval, then an unparsable created_at", opCancelRead, 200,
			func(*testing.T) []byte { return orderedApproval(`,"created_at":"garbage"`) }, "response is not a request", `"garbage"`),

		// Huge bodies.
		tooLarge("submit: body larger than MaxBodyBytes", opSubmit, 201, huge),
		tooLarge("cancel: body larger than MaxBodyBytes", opCancel, 200, huge),
		tooLarge("cancel: a 409 larger than MaxBodyBytes", opCancel, 409,
			func(t *testing.T) []byte {
				return errorJSON(t, 409, provider.CodeAlreadyTerminal, strings.Repeat("x", 2*maxBody), "")
			}),
		tooLarge("cancel: the read after a 409 larger than MaxBodyBytes", opCancelRead, 200, huge),
		{name: "submit: endless body", op: opSubmit, status: 201, endless: true, code: provider.CodeTooLarge, untrusted: true,
			body: raw(`{"id":"req-1","padding":"`), detail: []string{"exceeds"}},
		{name: "wait: endless body", op: opWait, status: 200, endless: true, code: provider.CodeTooLarge, untrusted: true,
			body: raw(`{"id":"req-1","padding":"`), detail: []string{"exceeds"}},
		{name: "cancel: endless 409", op: opCancel, status: 409, endless: true, code: provider.CodeTooLarge, untrusted: true,
			body: raw(`{"error":{"type":"conflict","code":"already_terminal","message":"`), detail: []string{"exceeds"}},

		// Another id (Submit knows no id yet; TestResponseVerification covers "req-2" on Wait and Cancel).
		untrusted("wait: the id in another case", opWait, 200, pending(func(m map[string]any) { approved(m); m["id"] = "REQ-1" }),
			`about request "REQ-1", not "req-1"`),
		untrusted("wait: the id with invalid UTF-8", opWait, 200,
			func(t *testing.T) []byte {
				return bytes.Replace(requestJSON(t, approved), []byte(`"req-1"`), []byte("\"req-1\xff\""), 1)
			}, "is about request", `not "req-1"`),
		untrusted("cancel: the read after a 409 about another request, decided as denied", opCancelRead, 200,
			pending(func(m map[string]any) {
				terminal(provider.StatusDenied)(m)
				m["id"] = "req-2"
			}), `about request "req-2", not "req-1"`),

		// Another tool.
		untrusted("submit: the tool in another case", opSubmit, 201, pending(func(m map[string]any) { m["tool"] = "Issue_Refund" }),
			`names tool "Issue_Refund", not the submitted "issue_refund"`),
		untrusted("wait: another tool while pending", opWait, 200, pending(func(m map[string]any) { m["tool"] = "delete_account" }),
			`names tool "delete_account"`),
		untrusted("cancel: another tool", opCancel, 200,
			pending(func(m map[string]any) { terminal(provider.StatusCancelled)(m); m["tool"] = "delete_account" }),
			`names tool "delete_account"`),
		untrusted("cancel: the read after a 409 approving another tool", opCancelRead, 200,
			pending(func(m map[string]any) { approved(m); m["tool"] = "delete_account" }), `names tool "delete_account"`),

		// Other arguments.
		untrusted("submit: the arguments as a string", opSubmit, 201, echoing(`"{\"payment_id\":\"payment_123\",\"amount\":4900,\"currency\":\"GBP\"}"`, nil),
			"arguments differ"),
		untrusted("wait: the amount one unit more", opWait, 200, echoing(`{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`, approved),
			"arguments differ"),
		untrusted("wait: the amount as a string", opWait, 200, echoing(`{"payment_id":"payment_123","amount":"4900","currency":"GBP"}`, approved),
			"arguments differ"),
		untrusted("wait: a key in another case", opWait, 200, echoing(`{"Payment_id":"payment_123","amount":4900,"currency":"GBP"}`, approved),
			"arguments differ"),
		untrusted("cancel: the arguments without the currency", opCancel, 200,
			echoing(`{"payment_id":"payment_123","amount":4900}`, terminal(provider.StatusCancelled)), "arguments differ"),
		untrusted("cancel: the read after a 409 approving other arguments", opCancelRead, 200,
			echoing(`{"payment_id":"payment_999","amount":4900,"currency":"GBP"}`, approved), "arguments differ"),

		// An approval without a usable expires_at.
		malformed("submit: approved without expires_at", opSubmit, 201,
			pending(func(m map[string]any) { approved(m); delete(m["decision"].(map[string]any), "expires_at") }),
			`request "req-1" is approved without decision.expires_at`),
		malformed("submit: approved with a null decision", opSubmit, 201,
			pending(func(m map[string]any) { m["status"] = provider.StatusApproved; m["decision"] = nil }),
			"is approved but carries no decision"),
		malformed("wait: expires_at null", opWait, 200, pending(decisionField("expires_at", nil)), "approved without decision.expires_at"),
		malformed("wait: expires_at the zero time", opWait, 200, pending(decisionField("expires_at", "0001-01-01T00:00:00Z")),
			"approved without decision.expires_at"),
		malformed("wait: expires_at given twice, the last null", opWait, 200,
			func(t *testing.T) []byte {
				return bytes.Replace(requestJSON(t, approved), []byte(`"expires_at":"2026-09-16T12:06:00Z"`),
					[]byte(`"expires_at":"2026-09-16T12:06:00Z","expires_at":null`), 1)
			}, "approved without decision.expires_at"),
		malformed("cancel: approved without expires_at", opCancel, 200,
			pending(func(m map[string]any) { approved(m); delete(m["decision"].(map[string]any), "expires_at") }),
			"approved without decision.expires_at"),
		malformed("cancel: the read after a 409 approved with the zero time", opCancelRead, 200,
			pending(decisionField("expires_at", "0001-01-01T00:00:00Z")), "approved without decision.expires_at"),
		malformed("wait: decided_at null on an approval", opWait, 200, pending(decisionField("decided_at", nil)), "approved without decision.decided_at"),
		malformed("wait: decided_at after expires_at", opWait, 200, pending(decisionField("decided_at", "2026-09-16T12:07:00Z")),
			"expires_at 2026-09-16T12:06:00Z not later than decision.decided_at 2026-09-16T12:07:00Z"),
		malformed("submit: expires_at a nanosecond before decided_at", opSubmit, 201,
			pending(decisionField("expires_at", "2026-09-16T12:00:59.999999999Z")), "not later than decision.decided_at"),

		// Unparsable timestamps.
		malformed("submit: unparsable deadline_at", opSubmit, 201, pending(func(m map[string]any) { m["deadline_at"] = "tomorrow" }),
			"response is not a request", `parsing time "tomorrow"`),
		malformed("wait: unparsable decided_at", opWait, 200, pending(decisionField("decided_at", "2026-09-16 12:01")),
			"response is not a request", `parsing time "2026-09-16 12:01"`),
		malformed("wait: expires_at as seconds since the epoch", opWait, 200, pending(decisionField("expires_at", 1789560360)),
			"response is not a request", "not a JSON string"),
		malformed("wait: expires_at empty", opWait, 200, pending(decisionField("expires_at", "")),
			"response is not a request", `parsing time ""`),
		malformed("wait: expires_at on a leap second", opWait, 200, pending(decisionField("expires_at", "2026-06-30T23:59:60Z")),
			"response is not a request", "second out of range"),
		malformed("wait: expires_at with a zone offset of 24 hours", opWait, 200, pending(decisionField("expires_at", "2026-09-16T12:06:00+24:00")),
			"decision.expires_at that is not an RFC 3339 timestamp"),
		malformed("cancel: unparsable created_at", opCancel, 200,
			pending(func(m map[string]any) {
				terminal(provider.StatusCancelled)(m)
				m["created_at"] = "2026-13-45T99:00:00Z"
			}),
			"response is not a request", "month out of range"),
		malformed("cancel: the read after a 409 with an unparsable expires_at", opCancelRead, 200,
			pending(decisionField("expires_at", "16/09/2026 12:06")), "response is not a request", `"16/09/2026 12:06"`),

		// Unknown statuses.
		malformed("submit: unknown status", opSubmit, 201, pending(func(m map[string]any) { m["status"] = "queued" }),
			`request "req-1" has unknown status "queued"`),
		malformed("wait: a known status in another case", opWait, 200, pending(func(m map[string]any) { approved(m); m["status"] = "Approved" }),
			`unknown status "Approved"`),
		malformed("wait: status null", opWait, 200, pending(func(m map[string]any) { m["status"] = nil }), `request "req-1" has no status`),
		malformed("wait: denied with an approved decision", opWait, 200,
			pending(func(m map[string]any) { approved(m); m["status"] = provider.StatusDenied }),
			`has status "denied" but decision.status "approved"`),
		malformed("cancel: unknown status", opCancel, 200, pending(func(m map[string]any) { m["status"] = "revoked" }),
			`unknown status "revoked"`),
		malformed("cancel: the read after a 409 with an unknown status", opCancelRead, 200,
			pending(func(m map[string]any) { m["status"] = "approved_ish" }), `unknown status "approved_ish"`),
		malformed("cancel: a cancellation with an approved decision", opCancel, 200,
			pending(func(m map[string]any) { approved(m); m["status"] = provider.StatusCancelled }), `has status "cancelled" but decision.status "approved"`),
		malformed("wait: a denial valid until a time", opWait, 200,
			pending(func(m map[string]any) {
				approved(m)
				m["status"] = provider.StatusDenied
				m["decision"].(map[string]any)["status"] = provider.StatusDenied
			}),
			"only an approval has"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := tc.body(t)
			contentType := provider.ContentTypeJSON
			answer := hostileHandler(t, tc.op, tc.status, body)
			srv := startCanned(t, func(n int64, w http.ResponseWriter, r *http.Request) {
				if !tc.endless {
					answer(n, w, r)
					return
				}
				w.Header().Set("Content-Type", contentType)
				w.WriteHeader(tc.status)
				_, _ = w.Write(body)
				padding := bytes.Repeat([]byte("x"), 1<<10)
				for r.Context().Err() == nil {
					if _, err := w.Write(padding); err != nil {
						return
					}
				}
			})
			// As in production, retries are bounded only by the context: a retryable error would
			// show as more than one hit.
			c := newClient(t, srv.url, func(o *provider.Options) { o.MaxBodyBytes = maxBody })
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()

			req, err := tc.op.call(ctx, t, c)
			g.Expect(req).To(BeNil(), "nothing is returned that could be acted on")
			pe := providerError(g, err)
			g.Expect(pe.Op).To(Equal(tc.op.errorOp()))
			g.Expect(pe.StatusCode).To(Equal(tc.status))
			g.Expect(pe.Code).To(Equal(tc.code), err.Error())
			g.Expect(pe.Retryable).To(BeFalse())
			g.Expect(provider.IsUntrusted(err)).To(Equal(tc.untrusted))
			for _, want := range tc.detail {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
			g.Expect(err.Error()).NotTo(ContainSubstring(credential))
			hits := int64(1)
			if tc.op == opCancelRead {
				hits = 2 // the DELETE, then the read
			}
			g.Expect(srv.hits.Load()).To(Equal(hits), "refused once, not retried")
		})
	}
}

// An approval whose expires_at is in the past (or a pending request whose deadline has passed) is
// well formed: the client returns it exactly as the provider sent it, and the controller judges it
// with its own clock. startJob (controllers/toolcalls/job.go) creates no Job unless
// Timing.ApprovalUsable(now, expires_at), i.e. now < expires_at - skewMargin, and ends the ToolCall
// Expired (ApprovalExpired); awaitDecision stops polling at Timing.PollUntil(deadline_at) and
// cancels. Both are covered by controllers's timing tests.
func TestHostileTimestampsLeftToTheController(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name   string
		op     hostileOp
		status int
		body   func(t *testing.T) []byte
		// decided is decision.decided_at, before expires.
		decided, expires string
		deadline         string
	}{
		{name: "submit: approved, expired long ago", op: opSubmit, status: 201, decided: "1969-12-31T23:55:00Z", expires: "1970-01-01T00:00:00Z"},
		{name: "wait: approved, expiring two nanoseconds after the zero time", op: opWait, status: 200,
			decided: "0001-01-01T00:00:00.000000001Z", expires: "0001-01-01T00:00:00.000000002Z"},
		{name: "wait: approved, expired a minute ago", op: opWait, status: 200,
			decided: now.Add(-6 * time.Minute).UTC().Format(time.RFC3339Nano), expires: now.Add(-time.Minute).UTC().Format(time.RFC3339Nano)},
		{name: "wait: approved, expiring in half a second", op: opWait, status: 200,
			decided: now.Add(-time.Minute).UTC().Format(time.RFC3339Nano), expires: now.Add(500 * time.Millisecond).UTC().Format(time.RFC3339Nano)},
		{name: "cancel: the read after a 409, an approval that expired", op: opCancelRead, status: 200,
			decided: "1999-12-31T22:55:00Z", expires: "2000-01-01T00:00:00+01:00"},
		{name: "wait: pending with a deadline long past", op: opWait, status: 200, deadline: "1999-12-31T23:59:59Z"},
		{name: "wait: pending with a deadline before year 1000", op: opWait, status: 200, deadline: "0999-01-01T00:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := requestJSON(t, func(m map[string]any) {
				if tc.expires != "" {
					decisionField("expires_at", tc.expires)(m)
					m["decision"].(map[string]any)["decided_at"] = tc.decided
				} else {
					m["deadline_at"] = tc.deadline
				}
			})
			srv := startCanned(t, hostileHandler(t, tc.op, tc.status, body))
			c := newClient(t, srv.url)

			req, err := tc.op.call(testContext(t), t, c)
			g.Expect(err).NotTo(HaveOccurred())
			hits := int64(1)
			if tc.op == opCancelRead {
				hits = 2
			}
			g.Expect(srv.hits.Load()).To(Equal(hits))
			g.Expect(req.ID).To(Equal(requestID))
			if tc.expires == "" {
				want, err := time.Parse(time.RFC3339, tc.deadline)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(req.Status).To(Equal(provider.StatusPending))
				g.Expect(req.DeadlineAt).To(BeTemporally("==", want), "the client keeps the provider's instant")
				return
			}
			want, err := time.Parse(time.RFC3339Nano, tc.expires)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.Status).To(Equal(provider.StatusApproved))
			g.Expect(req.Decision.ExpiresAt).NotTo(BeNil())
			g.Expect(*req.Decision.ExpiresAt).To(BeTemporally("==", want), "the client keeps the provider's instant")
			g.Expect(*req.Decision.ExpiresAt).To(BeTemporally("<", now.Add(time.Second)), "within the default 1s skew margin or past")
		})
	}
}
