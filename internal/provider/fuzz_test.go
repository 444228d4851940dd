package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"toolgate.dev/toolgate/internal/provider"
)

// The fuzz targets below state what a provider response can and cannot make the client do. Their
// seed corpus runs as ordinary tests; `go test -fuzz FuzzX` explores further.

// decodeSeeds are provider bodies, well formed and hostile.
var decodeSeeds = []string{
	// Well formed, one per status.
	`{"id":"req-1","tool":"issue_refund","arguments":{"amount":4900},"timeout":"30m","status":"pending","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z"}`,
	`{"id":"req-1","tool":"issue_refund","status":"approved","decision":{"status":"approved","note":"ok","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","tool":"issue_refund","status":"denied","decision":{"status":"denied","note":"no","decided_at":"2026-09-16T12:01:00Z"}}`,
	`{"id":"req-1","status":"expired","decision":{"status":"expired"}}`,
	`{"id":"req-1","status":"cancelled","decision":{"status":"cancelled","decided_at":"2026-09-16T12:01:00Z"}}`,
	`{"id":"req-1","status":"cancelled"}`,
	`{"id":"req-1","status":"denied","decision":{}}`,
	// Decisions where AAP has none, or not of the request's status, or valid until a time where only an
	// approval is.
	`{"id":"req-1","status":"pending","decision":{}}`,
	`{"id":"req-1","status":"pending","decision":null}`,
	`{"id":"req-1","status":"denied","decision":{"status":"denied","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","status":"cancelled","decision":{"status":"expired","decided_at":"2026-09-16T12:01:00Z"}}`,
	// Approvals valid from before they were decided, or only at the instant they were.
	`{"id":"req-1","status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:06:00Z","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:07:00Z","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T13:06:00+01:00","expires_at":"2026-09-16T12:06:00.000000001Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z"}}`,
	// An approval without a usable expires_at.
	`{"id":"req-1","status":"approved","decision":{"status":"approved"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":null}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"0001-01-01T00:00:00Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"0000-12-31T23:00:00-01:00"}}`,
	`{"id":"req-1","status":"approved","decision":null}`,
	`{"id":"req-1","status":"approved"}`,
	`{"id":"req-1","status":"approved","decision":{"status":"denied","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","status":"denied","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","status":"pending","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z"}}`,
	// Unknown, missing or differently spelt statuses.
	`{"id":"req-1","status":"approved_ish"}`,
	`{"id":"req-1","status":"APPROVED","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","status":""}`,
	`{"id":"req-1"}`,
	`{"id":"req-1","status":null}`,
	`{"id":"req-1","status":7}`,
	// Trailing data and other shapes.
	`{"id":"req-1","status":"pending"} {"id":"req-2","status":"approved"}`,
	`{"id":"req-1","status":"pending"}}`,
	`{"id":"req-1","status":"pending"}]`,
	`{"id":"req-1","status":"pending"}x`,
	`{"id":"req-1","status":"pending"}` + "\n\t ",
	`{"id":"req-1","status":"pending",`,
	``,
	`null`,
	`{}`,
	`[]`,
	`"approved"`,
	`{"id":null,"status":"pending"}`,
	// Huge numbers.
	`{"id":"req-1","status":"pending","arguments":{"amount":1e400}}`,
	`{"id":"req-1","status":"pending","timeout":1e999}`,
	`{"id":"req-1","status":"pending","created_at":99999999999999999999999}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":1790000000}}`,
	// Duplicate keys, and keys matched regardless of case.
	`{"id":"req-1","status":"approved","status":"pending"}`,
	`{"id":"req-1","status":"pending","status":"approved","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z","expires_at":null}}`,
	`{"id":"req-1","status":"pending","Status":"approved","DECISION":{"Status":"approved","Expires_At":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","id":"req-2","status":"cancelled"}`,
	// Timestamps: unparsable, in the past, far in the future.
	`{"id":"req-1","status":"pending","created_at":"yesterday"}`,
	`{"id":"req-1","status":"pending","deadline_at":""}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"16/09/2026 12:06"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"2026-06-30T23:59:60Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"2026-09-16t12:06:00z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00+24:00"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"1970-01-01T00:00:00Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"0001-01-01T00:00:00.000000001Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"9999-12-31T23:59:59.999999999Z"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"9999-12-31T23:59:59-23:59"}}`,
	`{"id":"req-1","status":"approved","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00.1234567891234Z"}}`,
	`{"id":"req-1","status":"pending","deadline_at":"0000-01-01T00:00:00+23:59"}`,
	// Non-UTF-8 bytes in strings and in the arguments.
	"{\"id\":\"req-\xff\",\"status\":\"pending\"}",
	"{\"id\":\"req-1\",\"status\":\"pending\",\"arguments\":{\"k\":\"\xfe\xff\"},\"tool\":\"issue_\xc3\"}",
	"{\"id\":\"req-1\",\"status\":\"pend\xffing\"}",
	"\xef\xbb\xbf{\"id\":\"req-1\",\"status\":\"pending\"}",
	`{"id":"req-1","status":"pending","arguments":"<script>&amp;\u2028"}`,
}

// FuzzDecodeRequest: DecodeRequest never panics; whatever it accepts is exactly one JSON document
// and a well-formed request (wellFormed: a known status, a decision exactly when terminal and of the
// same status, an approval valid from decided_at until a later expires_at, no expires_at otherwise);
// encoding an accepted request and decoding it again gives the same request.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range decodeSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := provider.DecodeRequest(body)
		if err != nil {
			if r != nil {
				t.Fatalf("DecodeRequest returned a request together with the error %v", err)
			}
			if err.Error() == "" {
				t.Fatalf("DecodeRequest returned an error without a message")
			}
			return
		}
		if r == nil {
			t.Fatalf("DecodeRequest returned neither a request nor an error")
		}
		if werr := wellFormed(r); werr != nil {
			t.Fatalf("DecodeRequest accepted a request that is not well formed: %v\nbody: %q", werr, body)
		}
		if !json.Valid(body) {
			t.Fatalf("DecodeRequest accepted a body that is not exactly one JSON document: %q", body)
		}

		encoded, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("an accepted request cannot be encoded again: %v\nbody: %q", err, body)
		}
		again, err := provider.DecodeRequest(encoded)
		if err != nil {
			t.Fatalf("an accepted request, encoded again, is refused: %v\nbody: %q\nencoded: %s", err, body, encoded)
		}
		if diff := requestDiff(r, again); diff != "" {
			t.Fatalf("decode(encode(r)) differs from r: %s\nbody: %q\nencoded: %s", diff, body, encoded)
		}
		encodedAgain, err := json.Marshal(again)
		if err != nil || !bytes.Equal(encoded, encodedAgain) {
			t.Fatalf("encoding is not stable: %v\nfirst:  %s\nsecond: %s", err, encoded, encodedAgain)
		}
	})
}

// FuzzRefMatches: a response whose id (when one is known), tool or echoed arguments (in RFC 8785
// canonical form) differ from the submitted ones is refused with a message naming the field; any
// other is accepted.
func FuzzRefMatches(f *testing.F) {
	args := string(arguments)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", args)
	f.Add("", "issue_refund", "req-1", "issue_refund", args)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"currency":"GBP","amount":4900,"payment_id":"payment_123"}`)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4.9e3,"currency":"GBP"}`)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4900,"currency":"GBP","to":"x"}`)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":"4900","currency":"GBP"}`)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4900,"currency":"GBP","amount":4901}`)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", ``)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `null`)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123",`)
	f.Add("req-1", "issue_refund", "req-2", "issue_refund", args)
	f.Add("req-1", "issue_refund", "REQ-1", "issue_refund", args)
	f.Add("req-1", "issue_refund", "", "issue_refund", args)
	f.Add("req-1", "issue_refund", "req-1", "delete_account", args)
	f.Add("req-1", "issue_refund", "req-1", "Issue_Refund", args)
	f.Add("", "", "", "", "")
	f.Add("", "issue_refund", "req-\xff", "issue_refund\x00", args)
	f.Fuzz(func(t *testing.T, refID, refTool, id, tool, echoed string) {
		ref, err := provider.Submission{Tool: refTool, Arguments: arguments}.Ref()
		if err != nil {
			t.Fatal(err)
		}
		ref.ID = refID
		r := &provider.Request{ID: id, Tool: tool, Arguments: json.RawMessage(echoed), Status: provider.StatusApproved}
		err = ref.Matches(r)

		submitted, _ := jcs.Transform(arguments)
		got, cerr := jcs.Transform([]byte(echoed))
		var want string
		switch {
		case refID != "" && id != refID:
			want = "is about request"
		case tool != refTool:
			want = "names tool"
		case cerr != nil || !bytes.Equal(got, submitted):
			want = "arguments"
		}
		if want == "" {
			if err != nil {
				t.Fatalf("a response about the submitted request was refused: %v", err)
			}
			if r.Covers(arguments) != nil {
				t.Fatalf("Covers refused the arguments Matches accepted: %v", r.Covers(arguments))
			}
			return
		}
		if err == nil {
			t.Fatalf("a response with id %q tool %q arguments %q was accepted for ref %+v", id, tool, echoed, ref)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal %q does not name what differs (want %q)", err, want)
		}
		if want == "arguments" && r.Covers(arguments) == nil {
			t.Fatalf("Covers accepted arguments %q that Matches refused", echoed)
		}
		// Not knowing the id yet (a submission) never lets another tool or other arguments through.
		if want != "is about request" && (provider.Ref{Tool: refTool, Arguments: ref.Arguments}).Matches(r) == nil {
			t.Fatalf("without an id, tool %q arguments %q was accepted for tool %q", tool, echoed, refTool)
		}
	})
}

// fuzzStatuses are the HTTP statuses the fuzzed provider answers with.
var fuzzStatuses = []int{
	http.StatusOK, http.StatusCreated, http.StatusConflict, http.StatusAccepted, http.StatusNoContent,
	http.StatusFound, http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound,
	http.StatusRequestTimeout, http.StatusUnprocessableEntity, http.StatusTooManyRequests,
	http.StatusInternalServerError, http.StatusServiceUnavailable,
	http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusMethodNotAllowed, http.StatusNotImplemented,
}

var fuzzOps = []string{"submit", "wait", "cancel"}

const fuzzMaxBody = 16 << 10

// FuzzClientResponse runs Submit, Wait or Cancel against a provider on a real loopback socket that
// answers with a fuzzed status and body (and, to the read a cancel's 409 makes, with a fuzzed
// request). The client either returns a typed error (never retryable on a response it could not
// trust, nor on a status the table of codes does not retry) or a well-formed request about the
// submitted one, read from a body that decodes strictly; it never returns an approval without a
// non-zero expires_at later than its decided_at.
func FuzzClientResponse(f *testing.F) {
	head := fmt.Sprintf(`"id":"%s","tool":"%s","arguments":%s,"timeout":"30m","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z"`,
		requestID, tool, arguments)
	pending := `{` + head + `,"status":"pending"}`
	approvedBody := `{` + head + `,"status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"}}`
	noExpiry := `{` + head + `,"status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:01:00Z"}}`
	backwards := `{` + head + `,"status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:07:00Z","expires_at":"2026-09-16T12:06:00Z"}}`
	denied := `{` + head + `,"status":"denied","decision":{"status":"denied","note":"no"}}`
	cancelled := `{` + head + `,"status":"cancelled","decision":{"status":"cancelled","decided_at":"2026-09-16T12:01:00Z"}}`
	aapError := func(typ, code string) string {
		return `{"error":{"type":"` + typ + `","code":"` + code + `","message":"m","request_id":"1184dfc5-0e86-4f88-9b68-882b1dc60467"}}`
	}
	seeds := []struct {
		op, status int
		body, read string
	}{
		{0, 1, pending, ""}, {0, 1, approvedBody, ""}, {0, 1, noExpiry, ""}, {0, 0, denied, ""}, {0, 0, backwards, ""},
		{1, 0, pending, ""}, {1, 0, approvedBody, ""}, {1, 0, noExpiry, ""}, {1, 0, denied, ""}, {1, 0, pending + "}", ""},
		{2, 0, cancelled, ""}, {2, 0, approvedBody, ""}, {2, 0, pending, ""},
		{2, 2, aapError("conflict", "already_terminal"), approvedBody}, {2, 2, aapError("conflict", "already_terminal"), noExpiry},
		{2, 2, aapError("conflict", "already_terminal"), denied}, {2, 2, aapError("conflict", "already_terminal"), pending},
		{2, 2, `conflict`, approvedBody}, {2, 2, ``, backwards},
		{2, 2, aapError("conflict", "already_terminal"), `{` + head + `,"status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"},"created_at":"garbage"}`},
		{2, 2, aapError("conflict", "instance_deleted"), approvedBody},
		{2, 2, aapError("conflict", "already_terminal"), approvedBody + "x"},
		{1, 3, approvedBody, ""}, {0, 4, approvedBody, ""}, {1, 5, approvedBody, ""},
		{0, 6, aapError("invalid_request", "invalid_request"), ""},
		{1, 7, aapError("authentication", "unauthenticated"), ""},
		{1, 8, aapError("not_found", "not_found"), ""},
		{2, 8, aapError("not_found", "not_found"), ""},
		{0, 2, aapError("conflict", "idempotency_conflict"), ""},
		{0, 2, aapError("conflict", "rate_limited"), ""},
		{1, 11, aapError("rate_limit", "rate_limited"), ""},
		{1, 12, aapError("internal", "invalid_request"), ""},
		{2, 13, `<html>unavailable</html>`, ""},
		{1, 0, `{"id":"req-1","status":"approved","padding":"` + strings.Repeat("x", fuzzMaxBody) + `"}`, ""},
		{1, 0, ``, ""},
	}
	for _, s := range seeds {
		f.Add(uint8(s.op), uint8(s.status), []byte(s.body), []byte(s.read))
	}

	var answer struct {
		sync.Mutex
		status     int
		body, read []byte
	}
	url := serveLoopback(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer.Lock()
		status, body, read := answer.status, answer.body, answer.read
		answer.Unlock()
		if r.Method == http.MethodGet && r.URL.RawQuery == "" {
			status, body = http.StatusOK, read // a cancel's read
		}
		respond(w, status, provider.ContentTypeJSON, body)
	}))
	c := fuzzClient(f, url)
	var serial sync.Mutex

	f.Fuzz(func(t *testing.T, opSel, statusSel uint8, body, read []byte) {
		serial.Lock()
		defer serial.Unlock()
		op := fuzzOps[int(opSel)%len(fuzzOps)]
		status := fuzzStatuses[int(statusSel)%len(fuzzStatuses)]
		answer.Lock()
		answer.status, answer.body, answer.read = status, body, read
		answer.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ref, rerr := submission("").Ref()
		if rerr != nil {
			t.Fatal(rerr)
		}
		ref.ID = requestID
		var req *provider.Request
		var err error
		switch op {
		case "submit":
			req, err = c.Submit(ctx, submission("toolcall-uid-1"))
		case "wait":
			req, err = c.Wait(ctx, ref, time.Second)
		case "cancel":
			req, err = c.Cancel(ctx, ref)
		}

		if err != nil {
			if req != nil {
				t.Fatalf("%s returned a request together with the error %v", op, err)
			}
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("%s returned an untyped error %T: %v", op, err, err)
			}
			// A cancel answered 409 reads the request with a GET.
			conflictRead := op == "cancel" && status == http.StatusConflict && pe.Op == "wait"
			if pe.Op != op && !conflictRead {
				t.Fatalf("error names op %q, want %q", pe.Op, op)
			}
			if _, known := provider.Codes[pe.Code]; !known {
				t.Fatalf("%s: the error's code %q is not in the table", op, pe.Code)
			}
			if strings.Contains(err.Error(), credential) {
				t.Fatalf("the error carries the credential: %v", err)
			}
			retryableStatus := status == http.StatusRequestTimeout || status == http.StatusTooManyRequests ||
				status == http.StatusInternalServerError || status == http.StatusBadGateway ||
				status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
			if pe.Retryable && !retryableStatus {
				t.Fatalf("%s: HTTP %d answered with a retryable error: %v", op, status, err)
			}
			if conflictRead {
				return
			}
			if (status == http.StatusOK || status == http.StatusCreated) && !provider.IsUntrusted(err) {
				t.Fatalf("%s: a refused HTTP %d body is not reported as untrusted: %v", op, status, err)
			}
			if len(body) > fuzzMaxBody && status != http.StatusNoContent && pe.Code != provider.CodeTooLarge {
				t.Fatalf("%s: a %d-byte body was not refused as too large: %v", op, len(body), err)
			}
			return
		}

		if req == nil {
			t.Fatalf("%s returned neither a request nor an error", op)
		}
		conflictAnswer := op == "cancel" && status == http.StatusConflict
		if status != http.StatusOK && status != http.StatusCreated && !conflictAnswer {
			t.Fatalf("%s accepted an HTTP %d answer: %+v", op, status, req)
		}
		if werr := wellFormed(req); werr != nil {
			t.Fatalf("%s returned a request that is not well formed: %v\nbody: %q", op, werr, body)
		}
		echoed, cerr := jcs.Transform(req.Arguments)
		submitted, _ := jcs.Transform(arguments)
		if req.Tool != tool || cerr != nil || !bytes.Equal(echoed, submitted) || (op != "submit" && req.ID != requestID) {
			t.Fatalf("%s returned a request about something else: id %q tool %q arguments %s\nbody: %q", op, req.ID, req.Tool, req.Arguments, body)
		}
		accepted := body
		if conflictAnswer {
			// The 409 is no ErrorResponse naming another code AAP gives a 409; the read answered.
			if e, ok := errorCode(body); ok && e != provider.CodeAlreadyTerminal && provider.Codes[e].Status == http.StatusConflict {
				t.Fatalf("cancel read the request after a 409 %s: %q", e, body)
			}
			if !provider.IsTerminal(req.Status) {
				t.Fatalf("cancel returned a %s request after a 409", req.Status)
			}
			accepted = read
		} else if op == "cancel" && req.Status != provider.StatusCancelled {
			t.Fatalf("cancel returned a %s request on HTTP %d", req.Status, status)
		}
		if !json.Valid(accepted) {
			t.Fatalf("%s accepted a body that is not exactly one JSON document: %q", op, accepted)
		}
		if _, derr := provider.DecodeRequest(accepted); derr != nil {
			t.Fatalf("%s accepted a body DecodeRequest refuses: %v", op, derr)
		}
	})
}

// wellFormed is the test's own statement of a well-formed request, independent of validate.go.
func wellFormed(r *provider.Request) error {
	if r.ID == "" {
		return errors.New("no id")
	}
	d := r.Decision
	switch r.Status {
	case provider.StatusPending:
		if d != nil {
			return errors.New("pending with a decision")
		}
		return nil
	case provider.StatusApproved:
		switch {
		case d == nil:
			return errors.New("approved without a decision")
		case d.Status != provider.StatusApproved:
			return fmt.Errorf("approved with decision.status %q", d.Status)
		case d.ExpiresAt == nil || d.ExpiresAt.IsZero():
			return errors.New("approved without a non-zero decision.expires_at")
		case d.DecidedAt == nil || d.DecidedAt.IsZero():
			return errors.New("approved without a non-zero decision.decided_at")
		case !d.DecidedAt.Before(*d.ExpiresAt):
			return fmt.Errorf("approved, valid from %s until %s", d.DecidedAt, d.ExpiresAt)
		}
		return nil
	case provider.StatusDenied, provider.StatusExpired, provider.StatusCancelled:
		switch {
		case d == nil:
			return fmt.Errorf("%s without a decision", r.Status)
		case d.Status != r.Status:
			return fmt.Errorf("status %q with decision.status %q", r.Status, d.Status)
		case d.ExpiresAt != nil:
			return fmt.Errorf("%s with an expires_at", r.Status)
		}
		return nil
	}
	return fmt.Errorf("status %q is not one of the known statuses", r.Status)
}

// errorCode is the code of an ErrorResponse body.
func errorCode(body []byte) (string, bool) {
	var e provider.ErrorResponse
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return "", false
	}
	return e.Error.Code, true
}

// requestDiff compares two requests by meaning: instants with Equal, arguments as JSON values.
func requestDiff(a, b *provider.Request) string {
	var diffs []string
	str := func(name, x, y string) {
		if x != y {
			diffs = append(diffs, fmt.Sprintf("%s %q != %q", name, x, y))
		}
	}
	instant := func(name string, x, y *time.Time) {
		switch {
		case (x == nil) != (y == nil):
			diffs = append(diffs, fmt.Sprintf("%s %v != %v", name, x, y))
		case x != nil && !x.Equal(*y):
			diffs = append(diffs, fmt.Sprintf("%s %s != %s", name, x, y))
		}
	}
	str("id", a.ID, b.ID)
	str("tool", a.Tool, b.Tool)
	str("agent_reasoning", a.AgentReasoning, b.AgentReasoning)
	str("timeout", a.Timeout, b.Timeout)
	str("status", a.Status, b.Status)
	instant("created_at", &a.CreatedAt, &b.CreatedAt)
	instant("deadline_at", &a.DeadlineAt, &b.DeadlineAt)
	if !sameJSON(a.Arguments, b.Arguments) {
		diffs = append(diffs, fmt.Sprintf("arguments %s != %s", a.Arguments, b.Arguments))
	}
	if !sameJSON(a.Context, b.Context) {
		diffs = append(diffs, fmt.Sprintf("context %s != %s", a.Context, b.Context))
	}
	switch {
	case (a.Decision == nil) != (b.Decision == nil):
		diffs = append(diffs, fmt.Sprintf("decision %+v != %+v", a.Decision, b.Decision))
	case a.Decision != nil:
		str("decision.status", a.Decision.Status, b.Decision.Status)
		str("decision.note", a.Decision.Note, b.Decision.Note)
		instant("decision.decided_at", a.Decision.DecidedAt, b.Decision.DecidedAt)
		instant("decision.expires_at", a.Decision.ExpiresAt, b.Decision.ExpiresAt)
	}
	return strings.Join(diffs, "; ")
}

// sameJSON compares two JSON documents as values (numbers by their text); absent is null.
func sameJSON(a, b json.RawMessage) bool {
	value := func(raw json.RawMessage) (string, bool) {
		if len(raw) == 0 {
			raw = json.RawMessage("null")
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", false
		}
		out, err := json.Marshal(v)
		return string(out), err == nil
	}
	x, okA := value(a)
	y, okB := value(b)
	return okA && okB && x == y
}

// serveLoopback serves h on a real loopback socket until the test ends and returns its base URL.
func serveLoopback(tb testing.TB, h http.Handler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// fuzzClient makes a single attempt per call whose deadline is less than an hour away, so a
// retryable answer is reported instead of repeated: its first backoff would end past the deadline.
func fuzzClient(tb testing.TB, url string) *provider.HTTPClient {
	tb.Helper()
	credFile := filepath.Join(tb.TempDir(), "credential")
	if err := os.WriteFile(credFile, []byte(credential+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	c, err := provider.NewHTTPClient(provider.Options{
		BaseURL: url, CredentialFile: credFile, BackoffBase: time.Hour, BackoffCap: time.Hour,
		RequestTimeout: 10 * time.Second, MaxBodyBytes: fuzzMaxBody,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
