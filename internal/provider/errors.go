package provider

import (
	"errors"
	"fmt"
	"time"
)

// Client-side error codes, used where the provider sent no problem code.
const (
	CodeNetwork    = "network"
	CodeTimeout    = "timeout"
	CodeHTTPStatus = "http_status"
	CodeMalformed  = "malformed_response"
	CodeTooLarge   = "response_too_large"
	CodeUntrusted  = "untrusted_response"
	// CodeCancelUnsupported: the provider has no cancel endpoint (404, 405 or 501 on it).
	CodeCancelUnsupported = "cancel_unsupported"
)

// Error is every error the client returns. Retryable says whether the same call may succeed if
// repeated (network errors, timeouts, 408, 409 in flight, 429, 5xx); everything else is final for
// that call.
type Error struct {
	// Op is the call: submit, wait or cancel.
	Op string
	// StatusCode is the HTTP status, 0 when no response was read.
	StatusCode int
	// Code is the problem+json code, or one of the client-side codes.
	Code string
	// Detail is the provider's detail or a description of what was wrong. It never holds the credential.
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

// IsRetryable reports whether err is a provider error that may succeed when repeated.
func IsRetryable(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Retryable
}

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

// CannotCancel reports whether err means the provider cannot cancel the request: it offers no cancel
// endpoint, or no longer knows the request. Nothing is pending there that a retry could cancel.
func CannotCancel(err error) bool {
	var pe *Error
	if !errors.As(err, &pe) || pe.Op != "cancel" {
		return false
	}
	return pe.Code == CodeCancelUnsupported || pe.Code == CodeNotFound
}

// retryableStatus reports whether an HTTP status (with its code) is worth repeating.
func retryableStatus(status int, code string) bool {
	switch {
	case code == CodeCancelUnsupported:
		return false
	case status == 408, status == 429, status >= 500:
		return true
	case status == 409:
		return code == CodeIdempotencyInFlight
	}
	return false
}
