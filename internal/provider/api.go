// Package provider is the approvals provider's HTTP API as Toolgate speaks it: the wire types, the
// client (Submit, Wait, Cancel) and its typed errors.
package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"
)

// Request statuses.
const (
	StatusPending   = "pending"
	StatusApproved  = "approved"
	StatusDenied    = "denied"
	StatusExpired   = "expired"
	StatusCancelled = "cancelled"
)

// Problem codes (application/problem+json "code").
const (
	CodeInvalidRequest        = "invalid_request"
	CodeIdempotencyKeyMissing = "idempotency_key_missing"
	CodeInvalidTimeout        = "invalid_timeout"
	CodeUnauthenticated       = "unauthenticated"
	CodeNotFound              = "not_found"
	CodeIdempotencyInFlight   = "idempotency_in_flight"
	CodeAlreadyDecided        = "already_decided"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeRateLimited           = "rate_limited"
	CodeInternal              = "internal"
)

// Headers.
const (
	HeaderIdempotencyKey           = "Idempotency-Key"
	HeaderIdempotentReplayed       = "Idempotent-Replayed"
	HeaderRequestID                = "X-Request-ID"
	ContentTypeJSON                = "application/json"
	ContentTypeProblemJSON         = "application/problem+json"
	MaxLongPollWait                = 55 * time.Second
	DefaultLongPollWait            = 30 * time.Second
	MaxRequestBodyBytes      int64 = 256 << 10
)

// HeaderRequester carries, on a submission, who asked for the tool call (the ToolCall's
// spec.requester.username, percent-encoded where not printable ASCII). Not in the seed: the body stays
// exactly {tool, arguments, timeout}, and a provider that does not know the header ignores it.
const HeaderRequester = "Toolgate-Requester"

// IsTerminal reports whether a request status is final.
func IsTerminal(status string) bool {
	switch status {
	case StatusApproved, StatusDenied, StatusExpired, StatusCancelled:
		return true
	}
	return false
}

// SubmitBody is the body of POST /v1/requests.
type SubmitBody struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Timeout   string          `json:"timeout"`
}

// Decision is a request's decision.
type Decision struct {
	Status    string     `json:"status"`
	Note      string     `json:"note,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Request is an approval request as the provider returns it.
type Request struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// ArgumentsSHA256 is optional: the seed's wire format has no such field. The reference provider
	// sends it; a response that carries it must carry the submitted arguments' hash.
	ArgumentsSHA256 string    `json:"arguments_sha256,omitempty"`
	Timeout         string    `json:"timeout"`
	Status          string    `json:"status"`
	CreatedAt       time.Time `json:"created_at"`
	DeadlineAt      time.Time `json:"deadline_at"`
	Decision        *Decision `json:"decision,omitempty"`
	// Requester is optional: the seed's wire format has no such field. The reference provider records
	// the Toolgate-Requester header of the submission here, shows it to approvers and echoes it.
	Requester string `json:"requester,omitempty"`
}

// Problem is an application/problem+json error body.
type Problem struct {
	Type   string `json:"type,omitempty"`
	Title  string `json:"title,omitempty"`
	Status int    `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
	// Request is the current request, for 409 already_decided.
	Request *Request `json:"request,omitempty"`
}

// ArgumentsSHA256 is the lowercase hex SHA-256 of the RFC 8785 canonical form of a JSON document.
func ArgumentsSHA256(arguments []byte) (string, error) {
	canonical, err := jcs.Transform(arguments)
	if err != nil {
		return "", fmt.Errorf("canonicalising arguments: %w", err)
	}
	return sha256Hex(canonical), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// FormatTimeout renders a duration the way the provider's timeout field expects it (e.g. 30m, 1h2m3s).
func FormatTimeout(d time.Duration) string {
	d = d.Truncate(time.Second)
	s := d.String()
	// time.Duration renders 30m as "30m0s"; trim zero units for readability.
	for _, suffix := range []string{"m0s", "h0m"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			s = s[:len(s)-len(suffix)+1]
		}
	}
	return s
}
