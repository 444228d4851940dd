package provider

import "net/http"

// AAP v1 error types: every ErrorResponse's error.type, fixed by its HTTP status.
const (
	TypeInvalidRequest = "invalid_request"
	TypeAuthentication = "authentication"
	TypeAuthorization  = "authorization"
	TypeNotFound       = "not_found"
	TypeConflict       = "conflict"
	TypeRateLimit      = "rate_limit"
	TypeInternal       = "internal"
	TypeDependency     = "dependency"
)

// Error codes. The first group are the codes AAP v1 names; the second the codes the reference
// provider sends for the other errors of each status (AAP leaves those to the provider), which the
// client also assigns to an error response that names no code it knows; the third are the client's
// own, for failures that are not an error response.
const (
	CodeIdempotencyConflict       = "idempotency_conflict"
	CodeAlreadyTerminal           = "already_terminal"
	CodeInstanceDeleted           = "instance_deleted"
	CodeWebhookVerificationFailed = "webhook_verification_failed"
	CodeInvalidWebhookURL         = "invalid_webhook_url"
	CodeUnsupportedDeliveryType   = "unsupported_delivery_type"

	CodeInvalidRequest  = "invalid_request"
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeRateLimited     = "rate_limited"
	CodeInternal        = "internal"
	CodeUnavailable     = "unavailable"

	CodeNetwork    = "network"
	CodeTimeout    = "timeout"
	CodeHTTPStatus = "http_status"
	CodeMalformed  = "malformed_response"
	CodeTooLarge   = "response_too_large"
	CodeUntrusted  = "untrusted_response"
	// CodeCancelUnsupported: the provider has no cancel operation (404, 405 or 501 on DELETE).
	CodeCancelUnsupported = "cancel_unsupported"
)

// CodeInfo is what one error code means: the HTTP status a provider sends it with (0 for the
// client's own codes), its ErrorResponse type, and whether repeating the call may succeed.
type CodeInfo struct {
	Status    int
	Type      string
	Retryable bool
}

// Codes is the one table of error codes: the client classifies every failure by it, the reference
// provider answers with it, and metrics label only these codes.
var Codes = map[string]CodeInfo{
	CodeIdempotencyConflict:       {Status: http.StatusConflict, Type: TypeConflict},
	CodeAlreadyTerminal:           {Status: http.StatusConflict, Type: TypeConflict},
	CodeInstanceDeleted:           {Status: http.StatusConflict, Type: TypeConflict},
	CodeWebhookVerificationFailed: {Status: http.StatusUnprocessableEntity, Type: TypeInvalidRequest},
	CodeInvalidWebhookURL:         {Status: http.StatusBadRequest, Type: TypeInvalidRequest},
	CodeUnsupportedDeliveryType:   {Status: http.StatusBadRequest, Type: TypeInvalidRequest},

	CodeInvalidRequest:  {Status: http.StatusBadRequest, Type: TypeInvalidRequest},
	CodeUnauthenticated: {Status: http.StatusUnauthorized, Type: TypeAuthentication},
	CodeForbidden:       {Status: http.StatusForbidden, Type: TypeAuthorization},
	CodeNotFound:        {Status: http.StatusNotFound, Type: TypeNotFound},
	CodeRateLimited:     {Status: http.StatusTooManyRequests, Type: TypeRateLimit, Retryable: true},
	CodeInternal:        {Status: http.StatusInternalServerError, Type: TypeInternal, Retryable: true},
	CodeUnavailable:     {Status: http.StatusServiceUnavailable, Type: TypeDependency, Retryable: true},

	CodeNetwork:           {Retryable: true},
	CodeTimeout:           {Retryable: true},
	CodeHTTPStatus:        {},
	CodeMalformed:         {},
	CodeTooLarge:          {},
	CodeUntrusted:         {},
	CodeCancelUnsupported: {},
}

// TypeForStatus is the ErrorResponse type AAP v1 gives an HTTP status ("" for a status it does not use).
func TypeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return TypeInvalidRequest
	case http.StatusUnauthorized:
		return TypeAuthentication
	case http.StatusForbidden:
		return TypeAuthorization
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusConflict:
		return TypeConflict
	case http.StatusTooManyRequests:
		return TypeRateLimit
	case http.StatusInternalServerError:
		return TypeInternal
	case http.StatusServiceUnavailable:
		return TypeDependency
	}
	return ""
}

// statusCodes is the code of an error response classified by its status alone (its body is no
// ErrorResponse, or names a code the table does not give that status). A 409's depends on the
// operation, and a cancel's 404, 405 or 501 says the provider cannot cancel (statusCode).
var statusCodes = map[int]string{
	http.StatusBadRequest:          CodeInvalidRequest,
	http.StatusUnauthorized:        CodeUnauthenticated,
	http.StatusForbidden:           CodeForbidden,
	http.StatusNotFound:            CodeNotFound,
	http.StatusRequestTimeout:      CodeTimeout,
	http.StatusUnprocessableEntity: CodeWebhookVerificationFailed,
	http.StatusTooManyRequests:     CodeRateLimited,
	http.StatusInternalServerError: CodeInternal,
	http.StatusBadGateway:          CodeUnavailable,
	http.StatusServiceUnavailable:  CodeUnavailable,
	http.StatusGatewayTimeout:      CodeUnavailable,
}

// statusCode is the code an error response to op gets from its status alone; CodeHTTPStatus (final)
// for a status AAP does not use.
func statusCode(op string, status int) string {
	switch {
	case op == opCancel && (status == http.StatusNotFound || status == http.StatusMethodNotAllowed || status == http.StatusNotImplemented):
		return CodeCancelUnsupported
	case status == http.StatusConflict && op == opSubmit:
		// The key holds another request: final, and never a reason to make a new key.
		return CodeIdempotencyConflict
	case status == http.StatusConflict && op == opCancel:
		return CodeAlreadyTerminal
	}
	if code, ok := statusCodes[status]; ok {
		return code
	}
	return CodeHTTPStatus
}
