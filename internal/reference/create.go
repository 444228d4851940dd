package reference

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// submission is a validated POST /v1/requests: AAP's CreateApprovalRequest, its Idempotency-Key and
// the instance that sent it.
type submission struct {
	instance    string
	key         string
	tool        string
	arguments   []byte // compact, as sent
	timeoutText string // as sent, echoed back
	timeout     time.Duration
	reasoning   string
	context     []byte // compact, as sent; nil when absent
	fingerprint string // of the parsed fields: a replay must have the same
}

// fieldError is a refused input: the field (or header, or query parameter) and what to do about it.
type fieldError struct {
	param   string
	message string
}

func (e *fieldError) Error() string { return e.message }

func invalid(param, format string, args ...any) *fieldError {
	return &fieldError{param: param, message: fmt.Sprintf(format, args...)}
}

// durationPattern is AAP's Duration: one positive whole number and one unit.
var durationPattern = regexp.MustCompile(`^([1-9][0-9]*)(s|m|h)$`)

// parseDuration reads an AAP Duration ("30s", "30m", "24h"); what it refuses gets a message that
// names the field and gives an example.
func parseDuration(field, text string) (time.Duration, *fieldError) {
	m := durationPattern.FindStringSubmatch(text)
	if m == nil {
		return 0, invalid(field, `%s must be a positive whole number and one unit, s, m or h (such as "30m" or "90s"), not %q`, field, text)
	}
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > math.MaxInt64/int64(unit) {
		return 0, invalid(field, "%s %q is too long for this provider", field, text)
	}
	return time.Duration(n) * unit, nil
}

// createFields are the fields of a CreateApprovalRequest, in the order the messages list them.
var createFields = []string{"tool", "arguments", "timeout", "agent_reasoning", "context"}

// parseCreate validates a CreateApprovalRequest body: exactly AAP's fields, each of its type, the
// timeout an AAP duration within [minTimeout, maxTimeout].
func parseCreate(data []byte, minTimeout, maxTimeout time.Duration) (submission, *fieldError) {
	fields, ferr := readObject(data, "a CreateApprovalRequest", createFields)
	if ferr != nil {
		return submission{}, ferr
	}
	var sub submission
	for _, name := range []string{"tool", "arguments", "timeout"} {
		if _, ok := fields[name]; !ok {
			return submission{}, invalid(name, "%s is required: a CreateApprovalRequest has tool, arguments and timeout", name)
		}
	}
	var ok bool
	if sub.tool, ok = jsonString(fields["tool"]); !ok || sub.tool == "" {
		return submission{}, invalid("tool", "tool must be a non-empty string: the name of the intercepted tool")
	}
	if sub.arguments, ok = jsonObject(fields["arguments"]); !ok {
		return submission{}, invalid("arguments", `arguments must be a JSON object: the tool's exact arguments, {} when it has none`)
	}
	if sub.timeoutText, ok = jsonString(fields["timeout"]); !ok {
		return submission{}, invalid("timeout", `timeout must be a string such as "30m"`)
	}
	var derr *fieldError
	if sub.timeout, derr = parseDuration("timeout", sub.timeoutText); derr != nil {
		return submission{}, derr
	}
	if sub.timeout < minTimeout || sub.timeout > maxTimeout {
		return submission{}, invalid("timeout", "timeout %s is outside what this provider accepts: from %s to %s",
			sub.timeoutText, formatLimit(minTimeout), formatLimit(maxTimeout))
	}
	if raw, present := fields["agent_reasoning"]; present {
		if sub.reasoning, ok = jsonString(raw); !ok {
			return submission{}, invalid("agent_reasoning", "agent_reasoning must be a string: the agent's own explanation")
		}
	}
	if raw, present := fields["context"]; present {
		if sub.context, ok = jsonObject(raw); !ok {
			return submission{}, invalid("context", "context must be a JSON object: runtime facts the adapter observed")
		}
	}
	fp, err := fingerprint(sub.tool, sub.arguments, sub.timeoutText, sub.reasoning, sub.context)
	if err != nil {
		return submission{}, invalid("arguments", "the body cannot be read as canonical JSON: %v", err)
	}
	sub.fingerprint = fp
	return sub, nil
}

// readObject reads a body that must be one JSON object with only the given fields, each at most once.
func readObject(data []byte, what string, allowed []string) (map[string]json.RawMessage, *fieldError) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, invalid("", "the body is empty: send %s as a JSON object", what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, invalid("", "the body must be %s: a JSON object", what)
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid("", "the body is not valid JSON: %v", err)
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, invalid(name, "the body is not valid JSON at %s: %v", name, err)
		}
		if !isAllowed(name, allowed) {
			return nil, invalid(name, "unknown field %q: %s has only %s", name, what, strings.Join(allowed, ", "))
		}
		if _, dup := fields[name]; dup {
			return nil, invalid(name, "%s appears twice in the body: send it once", name)
		}
		fields[name] = value
	}
	if _, err := dec.Token(); err != nil {
		return nil, invalid("", "the body is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("", "the body has more after its JSON object: send one object")
	}
	return fields, nil
}

func isAllowed(name string, allowed []string) bool {
	for _, a := range allowed {
		if a == name {
			return true
		}
	}
	return false
}

// jsonString decodes a JSON string (and nothing else, null included).
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonObject returns a JSON object in compact form (and refuses anything else, null included).
func jsonObject(raw json.RawMessage) ([]byte, bool) {
	var b bytes.Buffer
	if len(raw) == 0 || raw[0] != '{' || json.Compact(&b, raw) != nil {
		return nil, false
	}
	return b.Bytes(), true
}

// fingerprint identifies a submission's parsed fields, so that whitespace, key order and the spelling
// of numbers do not count: the SHA-256 of their canonical form.
func fingerprint(tool string, arguments []byte, timeout, reasoning string, context []byte) (string, error) {
	doc, err := json.Marshal(struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
		Timeout   string          `json:"timeout"`
		Reasoning string          `json:"agent_reasoning,omitempty"`
		Context   json.RawMessage `json:"context,omitempty"`
	}{tool, arguments, timeout, reasoning, context})
	if err != nil {
		return "", err
	}
	return canonicalSHA256(doc)
}

// canonicalSHA256 is the SHA-256 of a JSON document's canonical form.
func canonicalSHA256(doc []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	var b bytes.Buffer
	writeCanonical(&b, v)
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// writeCanonical writes a decoded JSON value so that equal values have equal bytes: objects with
// their keys sorted, no whitespace, strings as encoding/json writes them, and numbers by their exact
// decimal value (4900, 4900.0 and 4.9e3 are one number; 12345678901234567890 and
// 12345678901234567891 are two, though they are one double).
func writeCanonical(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, k)
			b.WriteByte(':')
			writeCanonical(b, t[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(canonicalNumber(string(t)))
	default: // string, bool, nil
		out, _ := json.Marshal(t) // cannot fail for these
		b.Write(out)
	}
}

// canonicalNumber writes a JSON number as its significant digits and a power of ten: "-15e-1" for
// -1.50, "49e2" for 4900.0, "0" for -0.0.
func canonicalNumber(n string) string {
	sign := ""
	if rest, negative := strings.CutPrefix(n, "-"); negative {
		sign, n = "-", rest
	}
	mantissa, exponent, _ := strings.Cut(strings.ToLower(n), "e")
	exp := 0
	if exponent != "" {
		e, err := strconv.Atoi(exponent)
		if err != nil || e > 1<<40 || e < -(1<<40) {
			return sign + n // beyond any real number's spelling: compare as written
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	if digits == "" {
		return "0"
	}
	significant := strings.TrimRight(digits, "0")
	exp += len(digits) - len(significant)
	return sign + significant + "e" + strconv.Itoa(exp)
}

// formatLimit renders a bound in one unit where it is exact, as AAP durations are written.
func formatLimit(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
