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

// orderedApproval is an approved request about submission("...") written field by field, so that a
// test can choose what comes after the decision.
func orderedApproval(t *testing.T, after string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"tool":%q,"arguments_sha256":%q,"status":"approved","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z"}%s}`,
		requestID, tool, argumentsSHA256(t), after)
}

// alreadyDecided is the 409 a cancel of a decided request gets, around the raw request JSON.
func alreadyDecided(request []byte) []byte {
	return append(append([]byte(`{"status":409,"code":"already_decided","detail":"the request was decided","request":`), request...), '}')
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
	conflictWith := func(mutate func(map[string]any)) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return alreadyDecided(requestJSON(t, mutate)) }
	}
	otherArgumentsSum := func(t *testing.T) string {
		sum, err := provider.ArgumentsSHA256(json.RawMessage(`{"payment_id": "payment_123", "amount": 490000, "currency": "GBP"}`))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		return sum
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
		malformed("cancel: already_decided whose request has a field of the wrong type", opCancel, 409,
			conflictWith(decisionField("note", 42)), "already_decided response does not decode", "decision.note"),
		malformed("cancel: already_decided with a complete approval, then an unparsable created_at", opCancel, 409,
			func(t *testing.T) []byte { return alreadyDecided(orderedApproval(t, `,"created_at":"garbage"`)) },
			"already_decided response does not decode", `"garbage"`),

		// Huge bodies.
		tooLarge("submit: body larger than MaxBodyBytes", opSubmit, 201, huge),
		tooLarge("cancel: body larger than MaxBodyBytes", opCancel, 200, huge),
		tooLarge("cancel: already_decided larger than MaxBodyBytes", opCancel, 409,
			func(t *testing.T) []byte { return alreadyDecided(huge(t)) }),
		{name: "submit: endless body", op: opSubmit, status: 201, endless: true, code: provider.CodeTooLarge, untrusted: true,
			body: raw(`{"id":"req-1","padding":"`), detail: []string{"exceeds"}},
		{name: "wait: endless body", op: opWait, status: 200, endless: true, code: provider.CodeTooLarge, untrusted: true,
			body: raw(`{"id":"req-1","padding":"`), detail: []string{"exceeds"}},
		{name: "cancel: endless already_decided", op: opCancel, status: 409, endless: true, code: provider.CodeTooLarge, untrusted: true,
			body: raw(`{"code":"already_decided","detail":"`), detail: []string{"exceeds"}},

		// Another id (Submit knows no id yet; TestResponseVerification covers "req-2" on Wait and Cancel).
		untrusted("wait: the id in another case", opWait, 200, pending(func(m map[string]any) { approved(m); m["id"] = "REQ-1" }),
			`about request "REQ-1", not "req-1"`),
		untrusted("wait: the id with invalid UTF-8", opWait, 200,
			func(t *testing.T) []byte {
				return bytes.Replace(requestJSON(t, approved), []byte(`"req-1"`), []byte("\"req-1\xff\""), 1)
			}, "is about request", `not "req-1"`),
		untrusted("cancel: already_decided about another request, decided as denied", opCancel, 409,
			conflictWith(func(m map[string]any) {
				m["id"] = "req-2"
				m["status"] = provider.StatusDenied
			}), `about request "req-2", not "req-1"`),

		// Another tool.
		untrusted("submit: the tool in another case", opSubmit, 201, pending(func(m map[string]any) { m["tool"] = "Issue_Refund" }),
			`names tool "Issue_Refund", not the submitted "issue_refund"`),
		untrusted("wait: another tool while pending", opWait, 200, pending(func(m map[string]any) { m["tool"] = "delete_account" }),
			`names tool "delete_account"`),
		untrusted("cancel: another tool", opCancel, 200,
			pending(func(m map[string]any) { m["status"] = provider.StatusCancelled; m["tool"] = "delete_account" }),
			`names tool "delete_account"`),
		untrusted("cancel: already_decided approving another tool", opCancel, 409,
			conflictWith(func(m map[string]any) { approved(m); m["tool"] = "delete_account" }), `names tool "delete_account"`),

		// Another arguments hash.
		untrusted("submit: the hash of other arguments", opSubmit, 201,
			func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { m["arguments_sha256"] = otherArgumentsSum(t) })
			}, "arguments_sha256", "differs from the submitted arguments'"),
		untrusted("wait: the right hash in upper case", opWait, 200,
			func(t *testing.T) []byte {
				return requestJSON(t, func(m map[string]any) { approved(m); m["arguments_sha256"] = strings.ToUpper(argumentsSHA256(t)) })
			}, "arguments_sha256", "differs from the submitted arguments'"),
		untrusted("cancel: another hash", opCancel, 200,
			pending(func(m map[string]any) {
				m["status"] = provider.StatusCancelled
				m["arguments_sha256"] = strings.Repeat("0", 64)
			}),
			"arguments_sha256"),
		untrusted("cancel: already_decided approving another hash", opCancel, 409,
			conflictWith(func(m map[string]any) { approved(m); m["arguments_sha256"] = strings.Repeat("0", 64) }),
			"arguments_sha256"),

		// An approval without a usable expires_at.
		malformed("submit: approved without expires_at", opSubmit, 201,
			pending(func(m map[string]any) { approved(m); delete(m["decision"].(map[string]any), "expires_at") }),
			`request "req-1" is approved without decision.expires_at`),
		malformed("submit: approved with a null decision", opSubmit, 201,
			pending(func(m map[string]any) { m["status"] = provider.StatusApproved; m["decision"] = nil }),
			"is approved but carries no approved decision"),
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
		malformed("cancel: already_decided approved with the zero time", opCancel, 409,
			conflictWith(decisionField("expires_at", "0001-01-01T00:00:00Z")), "approved without decision.expires_at"),

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
				m["status"] = provider.StatusCancelled
				m["created_at"] = "2026-13-45T99:00:00Z"
			}),
			"response is not a request", "month out of range"),
		malformed("cancel: already_decided with an unparsable expires_at", opCancel, 409,
			conflictWith(decisionField("expires_at", "16/09/2026 12:06")), "already_decided response does not decode", `"16/09/2026 12:06"`),

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
		malformed("cancel: already_decided with an unknown status", opCancel, 409,
			conflictWith(func(m map[string]any) { m["status"] = "approved_ish" }), `unknown status "approved_ish"`),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			body := tc.body(t)
			contentType := provider.ContentTypeJSON
			if tc.status >= 300 {
				contentType = provider.ContentTypeProblemJSON
			}
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
				if !tc.endless {
					respond(w, tc.status, contentType, body)
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
			g.Expect(pe.Op).To(Equal(string(tc.op)))
			g.Expect(pe.StatusCode).To(Equal(tc.status))
			g.Expect(pe.Code).To(Equal(tc.code), err.Error())
			g.Expect(pe.Retryable).To(BeFalse())
			g.Expect(provider.IsRetryable(err)).To(BeFalse())
			g.Expect(provider.IsUntrusted(err)).To(Equal(tc.untrusted))
			for _, want := range tc.detail {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
			g.Expect(err.Error()).NotTo(ContainSubstring(credential))
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1), "refused once, not retried")
		})
	}
}

// An approval whose expires_at is in the past (or a pending request whose deadline has passed) is
// well formed: the client returns it exactly as the provider sent it, and the controller judges it
// with its own clock. startJob (controllers/job.go) creates no Job unless
// Timing.ApprovalUsable(now, expires_at), i.e. now < expires_at - skewMargin, and ends the ToolCall
// Expired (ApprovalExpired); awaitDecision stops polling at Timing.PollUntil(deadline_at) and
// cancels. Both are covered by controllers's timing tests.
func TestHostileTimestampsLeftToTheController(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name     string
		op       hostileOp
		status   int
		body     func(t *testing.T) []byte
		expires  string
		deadline string
	}{
		{name: "submit: approved, expired long ago", op: opSubmit, status: 201, expires: "1970-01-01T00:00:00Z"},
		{name: "wait: approved, expiring a nanosecond after the zero time", op: opWait, status: 200, expires: "0001-01-01T00:00:00.000000001Z"},
		{name: "wait: approved, expired a minute ago", op: opWait, status: 200, expires: now.Add(-time.Minute).UTC().Format(time.RFC3339Nano)},
		{name: "wait: approved, expiring in half a second", op: opWait, status: 200, expires: now.Add(500 * time.Millisecond).UTC().Format(time.RFC3339Nano)},
		{name: "cancel: already_decided approval that expired", op: opCancel, status: 409, expires: "2000-01-01T00:00:00+01:00"},
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
				} else {
					m["deadline_at"] = tc.deadline
				}
			})
			contentType := provider.ContentTypeJSON
			if tc.status == http.StatusConflict {
				body, contentType = alreadyDecided(body), provider.ContentTypeProblemJSON
			}
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
				respond(w, tc.status, contentType, body)
			})
			c := newClient(t, srv.url)

			req, err := tc.op.call(testContext(t), t, c)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1))
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
