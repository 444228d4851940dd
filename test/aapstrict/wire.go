package aapstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"strconv"
	"time"
)

// Request statuses (AAP's ApprovalStatus).
const (
	StatusPending   = "pending"
	StatusApproved  = "approved"
	StatusDenied    = "denied"
	StatusExpired   = "expired"
	StatusCancelled = "cancelled"
)

// MaxWait is the longest a GET holds its answer: a larger wait is capped to it.
const MaxWait = 30 * time.Second

// durationPattern is the only form a timeout or a wait may take.
var durationPattern = regexp.MustCompile(`^[1-9][0-9]*(s|m|h)$`)

// timestampLayout renders RFC 3339 UTC timestamps in whole seconds, ending in Z.
const timestampLayout = "2006-01-02T15:04:05Z"

func timestamp(t time.Time) string { return t.UTC().Format(timestampLayout) }

// wireDecision is the Decision object as it goes on the wire.
type wireDecision struct {
	Status    string `json:"status"`
	Note      string `json:"note,omitempty"`
	DecidedAt string `json:"decided_at"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// wireRequest is the ApprovalRequest object as it goes on the wire: these fields and no others.
type wireRequest struct {
	ID             string          `json:"id"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	Timeout        string          `json:"timeout"`
	AgentReasoning *string         `json:"agent_reasoning,omitempty"`
	Context        json.RawMessage `json:"context,omitempty"`
	Status         string          `json:"status"`
	CreatedAt      string          `json:"created_at"`
	DeadlineAt     string          `json:"deadline_at"`
	Decision       *wireDecision   `json:"decision,omitempty"`
}

// wireError is the ErrorResponse object.
type wireError struct {
	Error wireErrorBody `json:"error"`
}

type wireErrorBody struct {
	Type      string `json:"type"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Param     string `json:"param,omitempty"`
	RequestID string `json:"request_id"`
}

func (r Request) wire() wireRequest {
	w := wireRequest{
		ID: r.ID, Tool: r.Tool, Arguments: r.Arguments, Timeout: r.Timeout, AgentReasoning: r.AgentReasoning,
		Context: r.Context, Status: r.Status, CreatedAt: timestamp(r.CreatedAt), DeadlineAt: timestamp(r.DeadlineAt),
	}
	if d := r.Decision; d != nil {
		w.Decision = &wireDecision{Status: d.Status, Note: d.Note, DecidedAt: timestamp(d.DecidedAt)}
		if d.ExpiresAt != nil {
			w.Decision.ExpiresAt = timestamp(*d.ExpiresAt)
		}
	}
	return w
}

// errorType is the ErrorResponse type AAP gives each HTTP status.
func errorType(status int) string {
	switch status {
	case 400, 422:
		return "invalid_request"
	case 401:
		return "authentication"
	case 403:
		return "authorization"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	case 429:
		return "rate_limit"
	case 503:
		return "dependency"
	}
	return "internal"
}

// defaultCode is the error code this provider sends for a status when nothing more specific applies.
func defaultCode(status int) string {
	switch status {
	case 400, 422:
		return "invalid_request"
	case 401:
		return "unauthenticated"
	case 403:
		return "forbidden"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	case 429:
		return "rate_limited"
	case 503:
		return "unavailable"
	}
	return "internal"
}

// apiError is an error answer before it is given its exchange's request id.
type apiError struct {
	status        int
	code, message string
	param         string
}

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: 400, code: "invalid_request", param: param, message: fmt.Sprintf(format, args...)}
}

// createInput is a validated CreateApprovalRequest.
type createInput struct {
	tool           string
	arguments      json.RawMessage // compacted
	timeout        string
	window         time.Duration
	agentReasoning *string
	context        json.RawMessage // compacted, nil when absent
	// fields are the parsed values of every field sent, compared on a replay of the key.
	fields map[string]any
}

var createFields = []string{"tool", "arguments", "timeout", "agent_reasoning", "context"}

// parseCreate validates a POST /v1/requests body: exactly a CreateApprovalRequest, nothing else.
func parseCreate(body []byte) (*createInput, *apiError) {
	raw, order, err := objectMembers(body)
	if err != nil {
		return nil, badRequest("", "the body must be one JSON object, a CreateApprovalRequest with tool, arguments and timeout: %v", err)
	}
	for _, k := range order {
		if !known(k) {
			return nil, badRequest(k, "unknown field %q: a CreateApprovalRequest has only tool, arguments, timeout, agent_reasoning and context", k)
		}
	}
	for _, k := range []string{"tool", "arguments", "timeout"} {
		if _, ok := raw[k]; !ok {
			return nil, badRequest(k, "%s is required", k)
		}
	}
	in := &createInput{fields: map[string]any{}}
	for _, k := range order {
		v, err := parseValue(raw[k])
		if err != nil {
			return nil, badRequest(k, "%s is not valid JSON: %v", k, err)
		}
		in.fields[k] = v
	}
	var ok bool
	if in.tool, ok = in.fields["tool"].(string); !ok || in.tool == "" {
		return nil, badRequest("tool", "tool must be a non-empty string, the name of the intercepted tool")
	}
	if _, ok := in.fields["arguments"].(map[string]any); !ok {
		return nil, badRequest("arguments", "arguments must be a JSON object holding the tool's exact arguments")
	}
	in.arguments = compact(raw["arguments"])
	if in.timeout, ok = in.fields["timeout"].(string); !ok {
		return nil, badRequest("timeout", "timeout must be a duration such as 30m (a string: a positive whole number and one unit, s, m or h)")
	}
	if in.window, ok = parseDuration(in.timeout); !ok {
		return nil, badRequest("timeout", "timeout must be a duration such as 30m (a positive whole number and one unit, s, m or h), not %q", in.timeout)
	}
	if v, sent := in.fields["agent_reasoning"]; sent {
		s, ok := v.(string)
		if !ok {
			return nil, badRequest("agent_reasoning", "agent_reasoning must be a string, the agent's own explanation")
		}
		in.agentReasoning = &s
	}
	if v, sent := in.fields["context"]; sent {
		if _, ok := v.(map[string]any); !ok {
			return nil, badRequest("context", "context must be a JSON object of runtime facts observed by the adapter")
		}
		in.context = compact(raw["context"])
	}
	return in, nil
}

func known(field string) bool {
	for _, f := range createFields {
		if f == field {
			return true
		}
	}
	return false
}

// objectMembers splits a JSON object into its members' raw values, in the order sent. A duplicate
// member, a value that is not an object, or anything after it is an error.
func objectMembers(body []byte) (map[string]json.RawMessage, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, errors.New("it is not an object")
	}
	members := map[string]json.RawMessage{}
	var order []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		key := tok.(string) // inside an object, the decoder yields only string keys here
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		if _, dup := members[key]; dup {
			return nil, nil, fmt.Errorf("field %q appears twice", key)
		}
		members[key] = v
		order = append(order, key)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, errors.New("data follows the object")
	}
	return members, order, nil
}

// parseValue decodes one JSON value, keeping numbers exact.
func parseValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw // already checked to be valid JSON
	}
	return b.Bytes()
}

// parseDuration reads a duration of the form ^[1-9][0-9]*(s|m|h)$. A value too large for a
// time.Duration is read as the largest one (a provider may shorten any window).
func parseDuration(s string) (time.Duration, bool) {
	if !durationPattern.MatchString(s) {
		return 0, false
	}
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour}[s[len(s)-1]]
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n > int64(maxDuration/unit) {
		return maxDuration, true
	}
	return time.Duration(n) * unit, true
}

const maxDuration = time.Duration(1<<63 - 1)

// parseWait reads the wait query parameter: absent is no wait; a valid duration is capped at MaxWait.
func parseWait(values []string) (time.Duration, *apiError) {
	if len(values) == 0 {
		return 0, nil
	}
	if len(values) > 1 {
		return 0, badRequest("wait", "wait may be given once, as a duration such as 30s")
	}
	d, ok := parseDuration(values[0])
	if !ok {
		return 0, badRequest("wait", "wait must be a duration such as 30s (a positive whole number and one unit, s, m or h; at most 30s is waited), not %q", values[0])
	}
	return min(d, MaxWait), nil
}

// jsonEqual compares two parsed JSON values (from parseValue): objects whatever their member order,
// numbers by value (4900, 4900.0 and 4.9e3 are one number).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		p, okp := new(big.Rat).SetString(string(x))
		q, okq := new(big.Rat).SetString(string(y))
		return okp && okq && p.Cmp(q) == 0
	default: // string, bool, nil
		return a == b
	}
}

// sameFields reports whether two submissions carry the same fields with the same parsed values.
func sameFields(a, b map[string]any) bool { return jsonEqual(a, b) }
