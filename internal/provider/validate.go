package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gowebpki/jcs"
)

// Ref identifies a submitted request and what was submitted, so every response about it can be
// checked: a response whose id (once known), tool or echoed arguments differ is refused.
type Ref struct {
	ID   string
	Tool string
	// Arguments is the RFC 8785 canonical JSON of the submitted arguments.
	Arguments string
	// ArgumentsSHA256 is the SHA-256 of Arguments, checked against a response that carries one.
	ArgumentsSHA256 string
}

// DecodeRequest parses a provider response body into a Request and checks it is well formed: a
// known status, a decision consistent with it, and an approval that says until when it is valid.
func DecodeRequest(body []byte) (*Request, error) {
	var r Request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("response is not a request: %w", err)
	}
	// Only white space may follow (dec.More alone lets a stray '}' or ']' through).
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("response has trailing data after the request")
	}
	if err := checkWellFormed(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

func checkWellFormed(r *Request) error {
	if r.ID == "" {
		return fmt.Errorf("response has no id")
	}
	if err := checkTimestamps(r); err != nil {
		return err
	}
	switch r.Status {
	case StatusPending:
		return nil
	case StatusApproved:
		if r.Decision == nil || r.Decision.Status != StatusApproved {
			return fmt.Errorf("request %q is approved but carries no approved decision", r.ID)
		}
		if r.Decision.ExpiresAt == nil || r.Decision.ExpiresAt.IsZero() {
			return fmt.Errorf("request %q is approved without decision.expires_at", r.ID)
		}
		return nil
	case StatusDenied, StatusExpired, StatusCancelled:
		if r.Decision != nil && r.Decision.Status != "" && r.Decision.Status != r.Status {
			return fmt.Errorf("request %q has status %q but decision.status %q", r.ID, r.Status, r.Decision.Status)
		}
		return nil
	case "":
		return fmt.Errorf("request %q has no status", r.ID)
	default:
		return fmt.Errorf("request %q has unknown status %q", r.ID, r.Status)
	}
}

// checkTimestamps refuses instants that parsed but are not RFC 3339, such as a zone offset of
// +24:00 or more.
func checkTimestamps(r *Request) error {
	check := func(field string, t *time.Time) error {
		if t == nil {
			return nil
		}
		if _, err := t.MarshalText(); err != nil {
			return fmt.Errorf("request %q has a %s that is not an RFC 3339 timestamp: %w", r.ID, field, err)
		}
		return nil
	}
	errs := []error{check("created_at", &r.CreatedAt), check("deadline_at", &r.DeadlineAt)}
	if d := r.Decision; d != nil {
		errs = append(errs, check("decision.decided_at", d.DecidedAt), check("decision.expires_at", d.ExpiresAt))
	}
	return errors.Join(errs...)
}

// Matches checks that a response is about the submitted request: same id (when known), same tool,
// and the same arguments echoed back (compared in RFC 8785 canonical form, byte for byte); a response
// that also carries arguments_sha256 must carry the submitted arguments' hash.
func (ref Ref) Matches(r *Request) error {
	if ref.ID != "" && r.ID != ref.ID {
		return fmt.Errorf("response is about request %q, not %q", r.ID, ref.ID)
	}
	if r.Tool != ref.Tool {
		return fmt.Errorf("response names tool %q, not the submitted %q", r.Tool, ref.Tool)
	}
	return matchArguments(r, ref.Arguments, ref.ArgumentsSHA256)
}

// Covers checks that the request is about these arguments, by the rule Matches applies: its echoed
// arguments equal them in RFC 8785 canonical form, and its arguments_sha256, when present, is theirs.
func (r *Request) Covers(arguments []byte) error {
	canonical, err := jcs.Transform(arguments)
	if err != nil {
		return fmt.Errorf("canonicalising arguments: %w", err)
	}
	return matchArguments(r, string(canonical), sha256Hex(canonical))
}

func matchArguments(r *Request, canonical, sum string) error {
	if len(bytes.TrimSpace(r.Arguments)) == 0 || bytes.Equal(bytes.TrimSpace(r.Arguments), []byte("null")) {
		return fmt.Errorf("response does not echo the submitted arguments")
	}
	got, err := jcs.Transform(r.Arguments)
	if err != nil {
		return fmt.Errorf("response arguments are not JSON: %w", err)
	}
	if canonical == "" || string(got) != canonical {
		return fmt.Errorf("response arguments differ from the submitted arguments")
	}
	if r.ArgumentsSHA256 != "" && r.ArgumentsSHA256 != sum {
		return fmt.Errorf("response arguments_sha256 %q differs from the submitted arguments' %q", r.ArgumentsSHA256, sum)
	}
	return nil
}
