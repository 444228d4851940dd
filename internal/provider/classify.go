package provider

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxDetailBytes bounds the provider's own text kept in an Error's Detail, which callers quote in
// statuses and logs.
const maxDetailBytes = 512

// errorFor judges an error response (any status but 200 and 201). The status decides (statusCode); an
// ErrorResponse's code refines it only when the table gives that code this very status, so that a
// provider cannot turn a 500 into a final error or a 409 into a retried one by naming a code. Any other
// body (plain text, an HTML page, other JSON, nothing) is classified by the status alone. The
// provider's message and param are kept in Detail, with a code the table does not know, for people.
func errorFor(op string, resp *http.Response, data []byte, cred string) *Error {
	status := resp.StatusCode
	code := statusCode(op, status)
	detail := http.StatusText(status)
	if body, ok := parseErrorResponse(data); ok {
		if info, known := Codes[body.Code]; known && info.Status == status && code != CodeCancelUnsupported {
			code = body.Code
		}
		detail = providerDetail(body, code, detail)
	}
	return &Error{
		Op: op, StatusCode: status, Code: code, Detail: boundText(redact(detail, cred)),
		Retryable:  Codes[code].Retryable,
		RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
	}
}

// parseErrorResponse reads an ErrorResponse: a JSON object whose error names a code. Fields beyond
// AAP's are ignored.
func parseErrorResponse(data []byte) (ErrorBody, bool) {
	var er ErrorResponse
	if err := json.Unmarshal(data, &er); err != nil || er.Error.Code == "" {
		return ErrorBody{}, false
	}
	return er.Error, true
}

// providerDetail is what an Error keeps of an ErrorResponse: its message (or, without one, the
// status text), the param it names, and its code when that is not the one acted on.
func providerDetail(body ErrorBody, code, statusText string) string {
	msg := body.Message
	if msg == "" {
		msg = statusText
	}
	if body.Param != "" {
		msg += " (param: " + body.Param + ")"
	}
	if body.Code != code {
		msg = body.Code + ": " + msg // a code not acted on: kept for people
	}
	return msg
}

// boundText makes a provider's text safe to quote: valid UTF-8, control characters as spaces, and at
// most maxDetailBytes. Redact first: a credential cut in two would no longer be found.
func boundText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) <= maxDetailBytes {
		return s
	}
	cut := maxDetailBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// metricCode bounds the error codes used as metric labels to the table's: a provider cannot create
// series at will.
func metricCode(code string) string {
	if _, known := Codes[code]; known {
		return code
	}
	return "other"
}
