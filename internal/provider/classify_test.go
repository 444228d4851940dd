package provider

import (
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The code of an error response from its status alone, per operation.
func TestStatusCode(t *testing.T) {
	cases := []struct {
		status               int
		submit, wait, cancel string
	}{
		{400, CodeInvalidRequest, CodeInvalidRequest, CodeInvalidRequest},
		{401, CodeUnauthenticated, CodeUnauthenticated, CodeUnauthenticated},
		{403, CodeForbidden, CodeForbidden, CodeForbidden},
		{404, CodeNotFound, CodeNotFound, CodeCancelUnsupported},
		{405, CodeHTTPStatus, CodeHTTPStatus, CodeCancelUnsupported},
		{408, CodeTimeout, CodeTimeout, CodeTimeout},
		{409, CodeIdempotencyConflict, CodeHTTPStatus, CodeAlreadyTerminal},
		{410, CodeHTTPStatus, CodeHTTPStatus, CodeHTTPStatus},
		{413, CodeHTTPStatus, CodeHTTPStatus, CodeHTTPStatus},
		{422, CodeWebhookVerificationFailed, CodeWebhookVerificationFailed, CodeWebhookVerificationFailed},
		{429, CodeRateLimited, CodeRateLimited, CodeRateLimited},
		{500, CodeInternal, CodeInternal, CodeInternal},
		{501, CodeHTTPStatus, CodeHTTPStatus, CodeCancelUnsupported},
		{502, CodeUnavailable, CodeUnavailable, CodeUnavailable},
		{503, CodeUnavailable, CodeUnavailable, CodeUnavailable},
		{504, CodeUnavailable, CodeUnavailable, CodeUnavailable},
		{505, CodeHTTPStatus, CodeHTTPStatus, CodeHTTPStatus},
		{202, CodeHTTPStatus, CodeHTTPStatus, CodeHTTPStatus},
		{302, CodeHTTPStatus, CodeHTTPStatus, CodeHTTPStatus},
	}
	g := NewWithT(t)
	for _, tc := range cases {
		for op, want := range map[string]string{opSubmit: tc.submit, opWait: tc.wait, opCancel: tc.cancel} {
			g.Expect(statusCode(op, tc.status)).To(Equal(want), "%s %d", op, tc.status)
			_, known := Codes[want]
			g.Expect(known).To(BeTrue(), "%s is in the table", want)
		}
	}
}

// What an error response becomes: the status decides, an ErrorResponse's code refines it only when
// the table gives it that very status, and the provider's message and param are kept.
func TestErrorFor(t *testing.T) {
	const cred = "tg-credential-0123456789"
	errorResponse := func(code, message, param string) string {
		p := ""
		if param != "" {
			p = `,"param":"` + param + `"`
		}
		return `{"error":{"type":"x","code":"` + code + `","message":"` + message + `"` + p + `,"request_id":"1184dfc5-0e86-4f88-9b68-882b1dc60467"}}`
	}
	cases := []struct {
		name       string
		op         string
		status     int
		body       string
		retryAfter string
		want       Error
	}{
		{name: "the provider's message and param", op: opSubmit, status: 400,
			body: errorResponse("invalid_request", "timeout must be a duration such as 30m", "timeout"),
			want: Error{Code: CodeInvalidRequest, Detail: "timeout must be a duration such as 30m (param: timeout)"}},
		{name: "a provider's own code for a 400", op: opSubmit, status: 400, body: errorResponse("invalid_timeout", "too long", ""),
			want: Error{Code: CodeInvalidRequest, Detail: "invalid_timeout: too long"}},
		{name: "idempotency_conflict", op: opSubmit, status: 409, body: errorResponse("idempotency_conflict", "key reused", ""),
			want: Error{Code: CodeIdempotencyConflict, Detail: "key reused"}},
		{name: "a 409 to a submission in plain text", op: opSubmit, status: 409, body: "conflict",
			want: Error{Code: CodeIdempotencyConflict, Detail: "Conflict"}},
		{name: "already_terminal", op: opCancel, status: 409, body: errorResponse("already_terminal", "already approved", ""),
			want: Error{Code: CodeAlreadyTerminal, Detail: "already approved"}},
		{name: "instance_deleted to a cancel", op: opCancel, status: 409, body: errorResponse("instance_deleted", "gone", ""),
			want: Error{Code: CodeInstanceDeleted, Detail: "gone"}},
		{name: "a cancel's 404 whatever its code", op: opCancel, status: 404, body: errorResponse("not_found", "no such request", ""),
			want: Error{Code: CodeCancelUnsupported, Detail: "not_found: no such request"}},
		{name: "a code of another status", op: opWait, status: 503, body: errorResponse("not_found", "no request", ""),
			want: Error{Code: CodeUnavailable, Detail: "not_found: no request", Retryable: true}},
		{name: "a code of the client's own", op: opWait, status: 500, body: errorResponse("untrusted_response", "x", ""),
			want: Error{Code: CodeInternal, Detail: "untrusted_response: x", Retryable: true}},
		{name: "a final code on a retried status", op: opSubmit, status: 500, body: errorResponse("invalid_request", "x", ""),
			want: Error{Code: CodeInternal, Detail: "invalid_request: x", Retryable: true}},
		{name: "a retried code on a final status", op: opSubmit, status: 400, body: errorResponse("rate_limited", "x", ""),
			want: Error{Code: CodeInvalidRequest, Detail: "rate_limited: x"}},
		{name: "no message", op: opWait, status: 429, body: errorResponse("rate_limited", "", ""), retryAfter: "7",
			want: Error{Code: CodeRateLimited, Detail: "Too Many Requests", Retryable: true, RetryAfter: 7 * time.Second}},
		{name: "an ErrorResponse without a code", op: opWait, status: 400, body: `{"error":{"message":"bad"}}`,
			want: Error{Code: CodeInvalidRequest, Detail: "Bad Request"}},
		{name: "other JSON", op: opWait, status: 404, body: `{"message":"no such request"}`,
			want: Error{Code: CodeNotFound, Detail: "Not Found"}},
		{name: "HTML", op: opSubmit, status: 502, body: "<html>bad gateway</html>",
			want: Error{Code: CodeUnavailable, Detail: "Bad Gateway", Retryable: true}},
		{name: "nothing", op: opSubmit, status: 504,
			want: Error{Code: CodeUnavailable, Detail: "Gateway Timeout", Retryable: true}},
		{name: "408", op: opWait, status: 408, body: "slow",
			want: Error{Code: CodeTimeout, Detail: "Request Timeout", Retryable: true}},
		{name: "a status AAP does not use", op: opWait, status: 418, body: errorResponse("teapot", "short and stout", ""),
			want: Error{Code: CodeHTTPStatus, Detail: "teapot: short and stout"}},
		{name: "the credential in the message", op: opSubmit, status: 401, body: errorResponse("unauthenticated", "unknown Bearer "+cred, ""),
			want: Error{Code: CodeUnauthenticated, Detail: "unknown Bearer [redacted]"}},
		{name: "the credential as the code", op: opSubmit, status: 401, body: errorResponse(cred, "no", ""),
			want: Error{Code: CodeUnauthenticated, Detail: "[redacted]: no"}},
		{name: "control characters", op: opSubmit, status: 400, body: errorResponse("invalid_request", `line one\nline two\u001b[31m`, ""),
			want: Error{Code: CodeInvalidRequest, Detail: "line one line two [31m"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
			if tc.retryAfter != "" {
				resp.Header.Set("Retry-After", tc.retryAfter)
			}
			got := errorFor(tc.op, resp, []byte(tc.body), cred)
			want := tc.want
			want.Op, want.StatusCode = tc.op, tc.status
			g.Expect(*got).To(Equal(want))
			g.Expect(got.Retryable).To(Equal(Codes[got.Code].Retryable), "the table says what is retried")
		})
	}

	t.Run("a long message is cut", func(t *testing.T) {
		g := NewWithT(t)
		body := errorResponse("invalid_request", strings.Repeat("é", 400), "")
		got := errorFor(opSubmit, &http.Response{StatusCode: 400, Header: http.Header{}}, []byte(body), cred)
		g.Expect(len(got.Detail)).To(BeNumerically("<=", maxDetailBytes+len("…")))
		g.Expect(got.Detail).To(HaveSuffix("é…"), "cut on a character boundary")
	})
}

func TestRetryAfter(t *testing.T) {
	g := NewWithT(t)
	for value, want := range map[string]time.Duration{
		"": 0, "0": 0, "5": 5 * time.Second, " 120 ": 2 * time.Minute, "-3": 0, "1.5": 0, "soon": 0,
		"Wed, 21 Oct 2015 07:28:00 GMT":                         0, // past
		"99999999999999999999":                                  0, // not an int64
		time.Now().Add(time.Hour).UTC().Format(http.TimeFormat): time.Hour,
	} {
		got := retryAfter(value)
		if want == time.Hour {
			g.Expect(got).To(BeNumerically("~", time.Hour, 2*time.Second), value)
			continue
		}
		g.Expect(got).To(Equal(want), value)
	}
	g.Expect(retryAfter("9223372036854775807")).To(BeNumerically(">", 200*365*24*time.Hour), "huge, but no overflow")
}
