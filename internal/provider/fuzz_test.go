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
	`{"id":"req-1","tool":"issue_refund","arguments":{"amount":4900},"arguments_sha256":"ab","timeout":"30m","status":"pending","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z"}`,
	`{"id":"req-1","tool":"issue_refund","status":"approved","decision":{"status":"approved","note":"ok","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"}}`,
	`{"id":"req-1","tool":"issue_refund","status":"denied","decision":{"status":"denied","note":"no","decided_at":"2026-09-16T12:01:00Z"}}`,
	`{"id":"req-1","status":"expired","decision":{"status":"expired"}}`,
	`{"id":"req-1","status":"cancelled"}`,
	`{"id":"req-1","status":"denied","decision":{}}`,
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
// and a well-formed request (known status, an approval always with a decision and a non-zero
// expires_at); encoding an accepted request and decoding it again gives the same request.
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
// canonical form) differ from the submitted ones, or whose arguments_sha256 (when present) is not the
// submitted arguments' hash, is refused with a message naming the field; any other is accepted.
func FuzzRefMatches(f *testing.F) {
	sum, err := provider.ArgumentsSHA256(arguments)
	if err != nil {
		f.Fatal(err)
	}
	args := string(arguments)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", args, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", args, sum)
	f.Add("", "issue_refund", "req-1", "issue_refund", args, sum)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"currency":"GBP","amount":4900,"payment_id":"payment_123"}`, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4.9e3,"currency":"GBP"}`, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`, sum)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":4900,"currency":"GBP","to":"x"}`, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123","amount":"4900","currency":"GBP"}`, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", ``, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `null`, sum)
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", `{"payment_id":"payment_123",`, "")
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", args, strings.ToUpper(sum))
	f.Add("req-1", "issue_refund", "req-1", "issue_refund", args, strings.Repeat("0", 64))
	f.Add("req-1", "issue_refund", "req-2", "issue_refund", args, sum)
	f.Add("req-1", "issue_refund", "REQ-1", "issue_refund", args, "")
	f.Add("req-1", "issue_refund", "", "issue_refund", args, "")
	f.Add("req-1", "issue_refund", "req-1", "delete_account", args, "")
	f.Add("req-1", "issue_refund", "req-1", "Issue_Refund", args, sum)
	f.Add("", "", "", "", "", "")
	f.Add("", "issue_refund", "req-\xff", "issue_refund\x00", args, sum+"\n")
	f.Fuzz(func(t *testing.T, refID, refTool, id, tool, echoed, echoedSum string) {
		ref, err := provider.Submission{Tool: refTool, Arguments: arguments}.Ref()
		if err != nil {
			t.Fatal(err)
		}
		ref.ID = refID
		r := &provider.Request{ID: id, Tool: tool, Arguments: json.RawMessage(echoed), ArgumentsSHA256: echoedSum, Status: provider.StatusApproved}
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
		case echoedSum != "" && echoedSum != sum:
			want = "arguments_sha256"
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
			t.Fatalf("a response with id %q tool %q arguments %q hash %q was accepted for ref %+v", id, tool, echoed, echoedSum, ref)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal %q does not name what differs (want %q)", err, want)
		}
		if want == "arguments" || want == "arguments_sha256" {
			if r.Covers(arguments) == nil {
				t.Fatalf("Covers accepted arguments %q hash %q that Matches refused", echoed, echoedSum)
			}
		}
		// Not knowing the id yet (a submission) never lets another tool or other arguments through.
		if want != "is about request" && (provider.Ref{Tool: refTool, Arguments: ref.Arguments, ArgumentsSHA256: ref.ArgumentsSHA256}).Matches(r) == nil {
			t.Fatalf("without an id, tool %q arguments %q hash %q was accepted for tool %q", tool, echoed, echoedSum, refTool)
		}
	})
}

// fuzzStatuses are the HTTP statuses the fuzzed provider answers with.
var fuzzStatuses = []int{
	http.StatusOK, http.StatusCreated, http.StatusConflict, http.StatusAccepted, http.StatusNoContent,
	http.StatusFound, http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound,
	http.StatusRequestTimeout, http.StatusUnprocessableEntity, http.StatusTooManyRequests,
	http.StatusInternalServerError, http.StatusServiceUnavailable,
}

var fuzzOps = []string{"submit", "wait", "cancel"}

const fuzzMaxBody = 16 << 10

// FuzzClientResponse runs Submit, Wait or Cancel against a provider on a real loopback socket that
// answers with a fuzzed status and body. The client either returns a typed error (never retryable
// on a response it could not trust) or a well-formed request about the submitted one, read from a
// body that decodes strictly; it never returns an approval without a non-zero expires_at.
func FuzzClientResponse(f *testing.F) {
	sum, err := provider.ArgumentsSHA256(arguments)
	if err != nil {
		f.Fatal(err)
	}
	head := fmt.Sprintf(`"id":"%s","tool":"%s","arguments":%s,"arguments_sha256":"%s","timeout":"30m","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z"`,
		requestID, tool, arguments, sum)
	pending := `{` + head + `,"status":"pending"}`
	approvedBody := `{` + head + `,"status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"}}`
	noExpiry := `{` + head + `,"status":"approved","decision":{"status":"approved","decided_at":"2026-09-16T12:01:00Z"}}`
	denied := `{` + head + `,"status":"denied","decision":{"status":"denied","note":"no"}}`
	cancelled := `{` + head + `,"status":"cancelled","decision":{"status":"cancelled"}}`
	conflict := func(req string) string {
		return `{"status":409,"code":"already_decided","detail":"decided","request":` + req + `}`
	}
	seeds := []struct {
		op, status int
		body       string
	}{
		{0, 1, pending}, {0, 1, approvedBody}, {0, 1, noExpiry}, {0, 0, denied},
		{1, 0, pending}, {1, 0, approvedBody}, {1, 0, noExpiry}, {1, 0, denied}, {1, 0, pending + "}"},
		{2, 0, cancelled}, {2, 0, approvedBody},
		{2, 2, conflict(approvedBody)}, {2, 2, conflict(noExpiry)}, {2, 2, conflict(denied)},
		{2, 2, conflict(`{` + head + `,"status":"approved","decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z"},"created_at":"garbage"}`)},
		{2, 2, conflict(`{` + head + `,"status":"approved","timeout":30,"decision":{"status":"approved","expires_at":"2026-09-16T12:06:00Z"}}`)},
		{2, 2, conflict(approvedBody) + "x"},
		{1, 3, approvedBody}, {0, 4, approvedBody}, {1, 5, approvedBody},
		{0, 6, `{"status":400,"code":"invalid_request","detail":"arguments must be an object"}`},
		{1, 7, `{"status":401,"code":"unauthenticated"}`},
		{1, 8, `{"status":404,"code":"not_found"}`},
		{0, 2, `{"status":409,"code":"idempotency_in_flight"}`},
		{1, 11, `{"status":429,"code":"rate_limited"}`},
		{2, 13, `<html>unavailable</html>`},
		{1, 0, `{"id":"req-1","status":"approved","padding":"` + strings.Repeat("x", fuzzMaxBody) + `"}`},
		{1, 0, ``},
	}
	for _, s := range seeds {
		f.Add(uint8(s.op), uint8(s.status), []byte(s.body))
	}

	var answer struct {
		sync.Mutex
		status int
		body   []byte
	}
	url := serveLoopback(f, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		answer.Lock()
		status, body := answer.status, answer.body
		answer.Unlock()
		contentType := provider.ContentTypeJSON
		if status >= 300 {
			contentType = provider.ContentTypeProblemJSON
		}
		respond(w, status, contentType, body)
	}))
	c := fuzzClient(f, url)
	var serial sync.Mutex

	f.Fuzz(func(t *testing.T, opSel, statusSel uint8, body []byte) {
		serial.Lock()
		defer serial.Unlock()
		op := fuzzOps[int(opSel)%len(fuzzOps)]
		status := fuzzStatuses[int(statusSel)%len(fuzzStatuses)]
		answer.Lock()
		answer.status, answer.body = status, body
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
			req, err = c.Wait(ctx, ref, 0)
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
			// A cancel answered 409 without the current request reads it with a GET.
			if pe.Op != op && !(op == "cancel" && status == http.StatusConflict && pe.Op == "wait") {
				t.Fatalf("error names op %q, want %q", pe.Op, op)
			}
			if strings.Contains(err.Error(), credential) {
				t.Fatalf("the error carries the credential: %v", err)
			}
			retryableStatus := status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500 ||
				(status == http.StatusConflict && pe.Code == provider.CodeIdempotencyInFlight)
			if pe.Retryable && !retryableStatus {
				t.Fatalf("%s: HTTP %d answered with a retryable error: %v", op, status, err)
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
		if req.Tool != tool || cerr != nil || !bytes.Equal(echoed, submitted) || (req.ArgumentsSHA256 != "" && req.ArgumentsSHA256 != sum) ||
			(op != "submit" && req.ID != requestID) {
			t.Fatalf("%s returned a request about something else: id %q tool %q arguments %s hash %q\nbody: %q", op, req.ID, req.Tool, req.Arguments, req.ArgumentsSHA256, body)
		}
		if !json.Valid(body) {
			t.Fatalf("%s accepted a body that is not exactly one JSON document: %q", op, body)
		}
		if conflictAnswer {
			var p provider.Problem
			if perr := json.Unmarshal(body, &p); perr != nil {
				t.Fatalf("cancel accepted an already_decided answer that does not decode: %v\nbody: %q", perr, body)
			}
			return
		}
		if _, derr := provider.DecodeRequest(body); derr != nil {
			t.Fatalf("%s accepted a body DecodeRequest refuses: %v", op, derr)
		}
	})
}

// wellFormed is the test's own statement of a well-formed request, independent of validate.go.
func wellFormed(r *provider.Request) error {
	if r.ID == "" {
		return errors.New("no id")
	}
	switch r.Status {
	case provider.StatusPending:
		return nil
	case provider.StatusApproved:
		switch {
		case r.Decision == nil:
			return errors.New("approved without a decision")
		case r.Decision.Status != provider.StatusApproved:
			return fmt.Errorf("approved with decision.status %q", r.Decision.Status)
		case r.Decision.ExpiresAt == nil || r.Decision.ExpiresAt.IsZero():
			return errors.New("approved without a non-zero decision.expires_at")
		}
		return nil
	case provider.StatusDenied, provider.StatusExpired, provider.StatusCancelled:
		if r.Decision != nil && r.Decision.Status != "" && r.Decision.Status != r.Status {
			return fmt.Errorf("status %q with decision.status %q", r.Status, r.Decision.Status)
		}
		return nil
	}
	return fmt.Errorf("status %q is not one of the known statuses", r.Status)
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
	str("arguments_sha256", a.ArgumentsSHA256, b.ArgumentsSHA256)
	str("timeout", a.Timeout, b.Timeout)
	str("status", a.Status, b.Status)
	instant("created_at", &a.CreatedAt, &b.CreatedAt)
	instant("deadline_at", &a.DeadlineAt, &b.DeadlineAt)
	if !sameJSON(a.Arguments, b.Arguments) {
		diffs = append(diffs, fmt.Sprintf("arguments %s != %s", a.Arguments, b.Arguments))
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

// fuzzClient makes a single attempt per call, so a retryable answer is reported instead of repeated.
func fuzzClient(tb testing.TB, url string) *provider.HTTPClient {
	tb.Helper()
	credFile := filepath.Join(tb.TempDir(), "credential")
	if err := os.WriteFile(credFile, []byte(credential+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	c, err := provider.NewHTTPClient(provider.Options{
		BaseURL: url, CredentialFile: credFile, MaxAttempts: 1,
		RequestTimeout: 10 * time.Second, MaxBodyBytes: fuzzMaxBody,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
