// Package aapwebhook is the messages an AAP v1 provider sends a webhook receiver in asynchronous
// mode, defined once for both sides (the manager's receiver reads them, the reference provider sends
// them): the webhook.verification message, which proposes a delivery registration, and the
// request.resolved notification, which says a request reached a terminal outcome. It checks their
// Standard Webhooks v1 signatures with the official library. Nothing in a message is trusted before
// Verify accepted it with the secret chosen from what Peek read.
package aapwebhook

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Message types.
const (
	TypeVerification = "webhook.verification"
	TypeResolved     = "request.resolved"
)

// Tolerance is how far a message's webhook-timestamp may be from the receiver's clock.
const Tolerance = 5 * time.Minute

// MaxBody is the largest message body read: both messages are a few hundred bytes.
const MaxBody = 16 << 10

// Message is a verification message or a notification, as its body says.
type Message struct {
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	InstanceID string    `json:"instance_id"`
	CreatedAt  time.Time `json:"created_at"`
	// RegistrationID and Challenge are the verification message's.
	RegistrationID string `json:"registration_id,omitempty"`
	Challenge      string `json:"challenge,omitempty"`
	// RequestID is the notification's.
	RequestID string `json:"request_id,omitempty"`
}

// Errors, by the status the receiver answers them with.
var (
	// ErrMalformed: the message is not one of AAP's (400).
	ErrMalformed = errors.New("malformed message")
	// ErrUnauthenticated: the signature or the timestamp is not valid (401).
	ErrUnauthenticated = errors.New("signature or timestamp not valid")
)

// Peek decodes a message body without trusting it, to choose the secret to verify it with: by the
// registration id of a verification message, by the instance id of a notification. Fields other
// than AAP's are ignored; those a message of its type needs must be there and well formed.
func Peek(body []byte) (Message, error) {
	var m Message
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Message{}, fmt.Errorf("%w: more than one JSON value", ErrMalformed)
	}
	ids := map[string]string{"id": m.ID, "instance_id": m.InstanceID}
	switch m.Type {
	case TypeVerification:
		ids["registration_id"] = m.RegistrationID
		if m.Challenge == "" {
			return Message{}, fmt.Errorf("%w: a verification message without a challenge", ErrMalformed)
		}
	case TypeResolved:
		ids["request_id"] = m.RequestID
	default:
		return Message{}, fmt.Errorf("%w: type %q is neither %s nor %s", ErrMalformed, m.Type, TypeVerification, TypeResolved)
	}
	for field, v := range ids {
		if _, err := uuid.Parse(v); err != nil || len(v) != 36 {
			return Message{}, fmt.Errorf("%w: %s %q is not a UUID", ErrMalformed, field, v)
		}
	}
	if m.CreatedAt.IsZero() {
		return Message{}, fmt.Errorf("%w: no created_at", ErrMalformed)
	}
	return m, nil
}

// Verify checks that the message was signed with secret (a whsec_ signing secret) as Standard
// Webhooks v1 signs, at a webhook-timestamp within Tolerance of now, and that its body's id is its
// webhook-id.
func Verify(secret string, m Message, body []byte, h http.Header, now time.Time) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("the signing secret cannot be used: %w", err)
	}
	// The library checks the timestamp against the wall clock; the receiver's own clock decides.
	if err := wh.VerifyIgnoringTimestamp(body, h); err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	ts, err := strconv.ParseInt(h.Get(standardwebhooks.HeaderWebhookTimestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp is not a number of seconds", ErrUnauthenticated)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: webhook-timestamp is %s from the receiver's clock, more than %s", ErrUnauthenticated, d.Round(time.Second), Tolerance)
	}
	if id := h.Get(standardwebhooks.HeaderWebhookID); id != m.ID {
		return fmt.Errorf("%w: the body's id %q is not the webhook-id %q", ErrMalformed, m.ID, id)
	}
	return nil
}

// NewSecret draws a signing secret: whsec_ and the padded base64 of 32 random bytes.
func NewSecret(random func([]byte) (int, error)) (string, error) {
	key := make([]byte, 32)
	if _, err := random(key); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key), nil
}
