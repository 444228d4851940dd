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
}

// DecodeRequest parses a provider response body into a Request and checks it is well formed by AAP's
// ApprovalRequest and Decision rules, where they decide execution. Fields AAP does not define are
// ignored.
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

// checkWellFormed applies the rules a request must meet to be acted on:
//   - an id and a known status;
//   - a decision exactly when the status is terminal, its status equal to the request's;
//   - an approval with decided_at and expires_at, expires_at later than decided_at;
//   - any other outcome without expires_at (only an approval has one);
//   - timestamps that are RFC 3339.
//
// Left liberal, as nothing runs on them: a denial, expiry or cancellation without decided_at is
// accepted (when a call was refused changes nothing), and a missing note is no fault. What the
// timestamps say against the clock (an approval already past expires_at) is the caller's to judge.
func checkWellFormed(r *Request) error {
	if r.ID == "" {
		return fmt.Errorf("response has no id")
	}
	if err := checkTimestamps(r); err != nil {
		return err
	}
	switch r.Status {
	case StatusPending:
		if r.Decision != nil {
			return fmt.Errorf("request %q is pending but carries a decision", r.ID)
		}
		return nil
	case StatusApproved, StatusDenied, StatusExpired, StatusCancelled:
	case "":
		return fmt.Errorf("request %q has no status", r.ID)
	default:
		return fmt.Errorf("request %q has unknown status %q", r.ID, r.Status)
	}
	d := r.Decision
	switch {
	case d == nil:
		return fmt.Errorf("request %q is %s but carries no decision", r.ID, r.Status)
	case d.Status != r.Status:
		return fmt.Errorf("request %q has status %q but decision.status %q", r.ID, r.Status, d.Status)
	case r.Status != StatusApproved:
		if d.ExpiresAt != nil {
			return fmt.Errorf("request %q is %s but its decision carries expires_at, which only an approval has", r.ID, r.Status)
		}
		return nil
	case isZero(d.DecidedAt):
		return fmt.Errorf("request %q is approved without decision.decided_at", r.ID)
	case isZero(d.ExpiresAt):
		return fmt.Errorf("request %q is approved without decision.expires_at", r.ID)
	case !d.ExpiresAt.After(*d.DecidedAt):
		return fmt.Errorf("request %q is approved with decision.expires_at %s not later than decision.decided_at %s",
			r.ID, d.ExpiresAt.Format(time.RFC3339Nano), d.DecidedAt.Format(time.RFC3339Nano))
	}
	return nil
}

func isZero(t *time.Time) bool { return t == nil || t.IsZero() }

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
// and the same arguments echoed back (compared in RFC 8785 canonical form, byte for byte).
func (ref Ref) Matches(r *Request) error {
	if ref.ID != "" && r.ID != ref.ID {
		return fmt.Errorf("response is about request %q, not %q", r.ID, ref.ID)
	}
	if r.Tool != ref.Tool {
		return fmt.Errorf("response names tool %q, not the submitted %q", r.Tool, ref.Tool)
	}
	return matchArguments(r, ref.Arguments)
}

// Covers checks that the request is about these arguments, by the rule Matches applies: its echoed
// arguments equal them in RFC 8785 canonical form.
func (r *Request) Covers(arguments []byte) error {
	canonical, err := jcs.Transform(arguments)
	if err != nil {
		return fmt.Errorf("canonicalising arguments: %w", err)
	}
	return matchArguments(r, string(canonical))
}

func matchArguments(r *Request, canonical string) error {
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
	return nil
}
