// Package provider is the Agent Approval Protocol v1 (AAP) as Toolgate speaks it to an approvals
// provider: the wire types, the one table of error codes (codes.go), the client (Submit, Wait,
// Cancel) and its typed errors.
package provider

import (
	"encoding/json"
	"time"
)

// Request statuses.
const (
	StatusPending   = "pending"
	StatusApproved  = "approved"
	StatusDenied    = "denied"
	StatusExpired   = "expired"
	StatusCancelled = "cancelled"
)

// Headers and content types.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderRequestID      = "X-Request-ID"
	ContentTypeJSON      = "application/json"
)

// Limits.
const (
	// MaxLongPollWait is AAP's cap on a long poll's wait (GET /v1/requests/{id}?wait=): Wait never asks
	// for more, and the manager's --poll-wait refuses more.
	MaxLongPollWait = 30 * time.Second
	// DefaultLongPollWait is the wait the manager asks for unless told otherwise.
	DefaultLongPollWait = 30 * time.Second
	// MaxRequestBodyBytes bounds the body of a request a provider reads.
	MaxRequestBodyBytes int64 = 256 << 10
)

// IsTerminal reports whether a request status is final.
func IsTerminal(status string) bool {
	switch status {
	case StatusApproved, StatusDenied, StatusExpired, StatusCancelled:
		return true
	}
	return false
}

// Decision is a request's decision.
type Decision struct {
	Status    string     `json:"status"`
	Note      string     `json:"note,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreateApprovalRequest is the body of POST /v1/requests: exactly AAP's CreateApprovalRequest.
type CreateApprovalRequest struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Timeout   string          `json:"timeout"`
	// AgentReasoning is the agent's own explanation, which a provider presents as the agent's claim.
	AgentReasoning string `json:"agent_reasoning,omitempty"`
	// Context holds runtime facts observed by the adapter (a JSON object); it establishes no identity.
	Context json.RawMessage `json:"context,omitempty"`
}

// ErrorResponse is the body of every AAP error response.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is an ErrorResponse's error.
type ErrorBody struct {
	Type      string `json:"type"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Param     string `json:"param,omitempty"`
	RequestID string `json:"request_id"`
}

// ProvisionInstanceRequest is the body of POST /v1/instances.
type ProvisionInstanceRequest struct {
	InstanceName string                `json:"instance_name,omitempty"`
	Delivery     *WebhookDeliveryInput `json:"delivery,omitempty"`
}

// WebhookDeliveryInput is a proposed delivery configuration (asynchronous mode).
type WebhookDeliveryInput struct {
	Type           string `json:"type"`
	URL            string `json:"url"`
	RegistrationID string `json:"registration_id"`
	SigningSecret  string `json:"signing_secret"`
}

// WebhookDelivery is an instance's active delivery configuration; it never holds the secret.
type WebhookDelivery struct {
	Type           string `json:"type"`
	URL            string `json:"url"`
	RegistrationID string `json:"registration_id"`
}

// Instance is one installed adapter at the provider.
type Instance struct {
	ID       string           `json:"id"`
	Name     string           `json:"name"`
	Delivery *WebhookDelivery `json:"delivery,omitempty"`
}

// IssuedCredential is an instance credential as provisioning returns it.
type IssuedCredential struct {
	Token     string     `json:"token"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// ProvisionInstanceResponse is the answer to POST /v1/instances.
type ProvisionInstanceResponse struct {
	Instance   Instance         `json:"instance"`
	Credential IssuedCredential `json:"credential"`
}

// Request is an approval request as the provider returns it (AAP's ApprovalRequest).
type Request struct {
	ID             string          `json:"id"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	AgentReasoning string          `json:"agent_reasoning,omitempty"`
	Context        json.RawMessage `json:"context,omitempty"`
	Timeout        string          `json:"timeout"`
	Status         string          `json:"status"`
	CreatedAt      time.Time       `json:"created_at"`
	DeadlineAt     time.Time       `json:"deadline_at"`
	Decision       *Decision       `json:"decision,omitempty"`

	// BodyDigest is the SHA-256 (sha256:<hex>) of the response body this request was decoded from,
	// byte for byte as received; empty for a request that did not come from a response.
	BodyDigest string `json:"-"`
}
