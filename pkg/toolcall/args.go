package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Arguments returns args as the JSON object a ToolCall's spec.arguments carries. json.RawMessage and
// []byte are taken as they are; anything else is encoded with json.Marshal. Anything but a JSON
// object is an error naming arguments.
func Arguments(args any) ([]byte, error) {
	var raw []byte
	switch a := args.(type) {
	case nil:
		return nil, fmt.Errorf("toolcall: arguments are missing: pass the tool's arguments as a JSON object, e.g. map[string]any{} or json.RawMessage(`{}`)")
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return nil, fmt.Errorf("toolcall: arguments cannot be encoded as JSON (%v): pass a map, a struct or json.RawMessage", err)
		}
	}
	trimmed := bytes.TrimSpace(raw)
	if !json.Valid(trimmed) {
		return nil, fmt.Errorf("toolcall: arguments are not valid JSON (%s): pass a JSON object such as {\"amount\":4900}", preview(trimmed))
	}
	if trimmed[0] != '{' {
		hint := ""
		if _, isString := args.(string); isString {
			hint = " (a Go string is encoded as a JSON string: pass json.RawMessage(s) to send JSON text as it is)"
		}
		return nil, fmt.Errorf("toolcall: arguments must be a JSON object, got %s%s: wrap the values in an object such as {\"items\": ...}", jsonKind(trimmed[0]), hint)
	}
	return trimmed, nil
}

func jsonKind(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

func preview(b []byte) string {
	const max = 40
	if len(b) == 0 {
		return "empty input"
	}
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}

// GenerateName is the metadata.generateName a ToolCall for tool gets when no name is given: the
// tool's name made a valid Kubernetes name ("issue_refund" becomes "issue-refund-").
func GenerateName(tool string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(tool) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	// The apiserver appends five characters; the controller shortens long names for the Job.
	name := strings.Trim(b.String(), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	if name == "" {
		name = "toolcall"
	}
	return name + "-"
}
