package reference

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"toolgate.dev/toolgate/internal/aapwebhook"
	"toolgate.dev/toolgate/internal/provider"
)

// Signing and receiver verification. Every message is a JSON POST signed with Standard Webhooks v1
// (webhook-id, webhook-timestamp, webhook-signature) by the official library, with the secret of the
// configuration it is sent to. webhook-timestamp is the attempt's wall-clock time, as the receiver
// compares it with its own clock; the server's clock only schedules attempts.

// send POSTs a signed message to a receiver and returns its status and headers (the body is read, at
// most maxWebhookResponse of it, and returned).
func (s *Server) send(ctx context.Context, d *deliveryConfig, id string, body []byte) (*http.Response, []byte, error) {
	wh, err := standardwebhooks.NewWebhook(d.SigningSecret)
	if err != nil {
		return nil, nil, fmt.Errorf("signing secret: %w", err)
	}
	release, err := s.webhookLimits.acquire(ctx, d.URL)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	now := time.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", provider.ContentTypeJSON)
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := s.webhooks.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxWebhookResponse))
	return resp, answer, err
}

var errVerification = errors.New("webhook verification failed")

// verifyReceiver sends one webhook.verification for a proposed configuration of an instance and
// succeeds only on a 200 whose JSON body echoes the challenge, within Options.WebhookTimeout. It makes
// one attempt and does not retry.
func (s *Server) verifyReceiver(ctx context.Context, instanceID string, d *deliveryConfig) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.WebhookTimeout)
	defer cancel()
	msg := aapwebhook.Message{
		ID: uuid.NewString(), Type: aapwebhook.TypeVerification, RegistrationID: d.RegistrationID,
		InstanceID: instanceID, CreatedAt: s.now().Truncate(time.Second), Challenge: uuid.NewString(),
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	s.stats.update(func(st *Stats) { st.WebhookVerifications++ })
	resp, answer, err := s.send(ctx, d, msg.ID, body)
	if err != nil {
		return fmt.Errorf("%w: %v", errVerification, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: the receiver answered %d, not 200", errVerification, resp.StatusCode)
	}
	var echo struct {
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(answer, &echo); err != nil || echo.Challenge != msg.Challenge {
		return fmt.Errorf("%w: the receiver's answer does not echo the challenge", errVerification)
	}
	return nil
}

// admitDelivery checks a proposed configuration's destination and verifies its receiver. It answers
// what the provisioner is told on failure: invalid_webhook_url for a refused destination,
// webhook_verification_failed for a receiver that did not verify.
func (s *Server) admitDelivery(ctx context.Context, instanceID string, d *deliveryConfig) (reply, bool) {
	err := s.checkDestination(ctx, d.URL)
	if errors.Is(err, errForbiddenDestination) {
		return failParam(provider.CodeInvalidWebhookURL, "delivery.url",
			"delivery.url must reach a public address: "+err.Error()), false
	}
	if err == nil {
		err = s.verifyReceiver(ctx, instanceID, d)
	}
	if err != nil {
		s.log.Info("webhook verification failed", "instance", instanceID, "url", d.URL, "error", err.Error())
		if errors.Is(err, errForbiddenDestination) {
			return failParam(provider.CodeInvalidWebhookURL, "delivery.url",
				"delivery.url must reach a public address: "+err.Error()), false
		}
		return failParam(provider.CodeWebhookVerificationFailed, "delivery",
			"the webhook receiver could not be verified: it must answer 200 with the challenge within "+
				s.opts.WebhookTimeout.String()), false
	}
	return reply{}, true
}
