package provider

import (
	"errors"
	"fmt"
	"time"
)

// Error is every error the client returns. Retryable says whether the same call may succeed if
// repeated, as the table of codes (Codes) says for Code: network errors, timeouts (and 408), 429,
// 500, 502, 503 and 504; everything else is final for that call.
type Error struct {
	// Op is the call: submit, wait or cancel.
	Op string
	// StatusCode is the HTTP status, 0 when no response was read.
	StatusCode int
	// Code is the ErrorResponse's code where it fits the status, else the status's own (statusCode), or
	// one of the client's codes. Always one of Codes.
	Code string
	// Detail is the provider's message (with its param, and a code not acted on) or a description of
	// what was wrong. It never holds the credential.
	Detail string
	// Retryable is true when repeating the call may succeed.
	Retryable bool
	// RetryAfter is the provider's Retry-After, 0 when not given.
	RetryAfter time.Duration
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("provider %s: %s", e.Op, e.Code)
	if e.StatusCode != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the provider or client-side code of err, "" when err is not a provider error.
func CodeOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsUntrusted reports whether err means a response could not be trusted: malformed, too large, or
// about another request than the one submitted. Nothing may execute on such a response.
func IsUntrusted(err error) bool {
	switch CodeOf(err) {
	case CodeUntrusted, CodeMalformed, CodeTooLarge:
		return true
	}
	return false
}

// CannotCancel reports whether err means the provider cannot cancel the request: it answered the
// DELETE 404, 405 or 501 (no cancel operation, or no such request). Nothing is pending there that a
// retry could cancel, and the caller never waits on it.
func CannotCancel(err error) bool {
	var pe *Error
	if !errors.As(err, &pe) || pe.Op != opCancel {
		return false
	}
	return pe.Code == CodeCancelUnsupported || pe.Code == CodeNotFound
}
