package reference

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"

	"toolgate.dev/toolgate/internal/provider"
)

// Webhook delivery configuration (AAP asynchronous mode). An instance may have one receiver: an HTTPS
// URL, the provisioner's registration id for it and the signing secret the receiver already holds.
// The store keeps the secret with the instance, to sign notifications; no answer ever shows it.

// deliveryType is the only delivery transport AAP v1 defines.
const deliveryType = "webhook"

// deliveryConfig is an instance's verified receiver as the store keeps it.
type deliveryConfig struct {
	Type           string `json:"type"`
	URL            string `json:"url"`
	RegistrationID string `json:"registration_id"`
	SigningSecret  string `json:"signing_secret"`
}

// wire is the configuration as instance answers show it: without the secret.
func (d *deliveryConfig) wire() *provider.WebhookDelivery {
	if d == nil {
		return nil
	}
	return &provider.WebhookDelivery{Type: d.Type, URL: d.URL, RegistrationID: d.RegistrationID}
}

var deliveryFields = []string{"type", "url", "registration_id", "signing_secret"}

// webhookURLPattern is the syntax AAP gives a receiver URL: HTTPS, no userinfo, no fragment.
var webhookURLPattern = regexp.MustCompile(`^https://[^/?#@\s]+([/?][^#\s]*)?$`)

// signingSecretPattern is the canonical padded base64 of exactly 32 bytes, after whsec_.
var signingSecretPattern = regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$`)

// parseDelivery validates a WebhookDeliveryInput. A wrong type is unsupported_delivery_type; a URL that
// is not a valid HTTPS receiver URL is invalid_webhook_url; everything else is invalid_request. Every
// error names the offending field in param (delivery.<field>). Destination addresses are checked apart
// (checkDestination), as that needs the resolver.
func parseDelivery(raw json.RawMessage) (*deliveryConfig, reply, bool) {
	fields, ferr := readObject(raw, "a WebhookDeliveryInput", deliveryFields)
	if ferr != nil {
		if ferr.param != "" {
			ferr.param = "delivery." + ferr.param
		} else {
			ferr.param = "delivery"
		}
		return nil, refused(ferr), false
	}
	var d deliveryConfig
	var ok bool
	if d.Type, ok = jsonString(fields["type"]); !ok {
		return nil, failParam(provider.CodeInvalidRequest, "delivery.type", "delivery.type is required, a string: \"webhook\""), false
	}
	if d.Type != deliveryType {
		return nil, failParam(provider.CodeUnsupportedDeliveryType, "delivery.type",
			"this provider delivers by webhook only: delivery.type must be \"webhook\", not "+quote(d.Type)), false
	}
	for _, name := range deliveryFields {
		if _, ok := fields[name]; !ok {
			return nil, failParam(provider.CodeInvalidRequest, "delivery."+name,
				"delivery."+name+" is required: a delivery has type, url, registration_id and signing_secret"), false
		}
	}
	if d.URL, ok = jsonString(fields["url"]); !ok || !webhookURLPattern.MatchString(d.URL) {
		return nil, failParam(provider.CodeInvalidWebhookURL, "delivery.url",
			"delivery.url must be an https:// URL without userinfo or fragment"), false
	}
	if d.RegistrationID, ok = jsonString(fields["registration_id"]); !ok || !isUUID(d.RegistrationID) {
		return nil, failParam(provider.CodeInvalidRequest, "delivery.registration_id",
			"delivery.registration_id must be a UUID the provisioner generated for this configuration"), false
	}
	if d.SigningSecret, ok = jsonString(fields["signing_secret"]); !ok || !validSecret(d.SigningSecret) {
		return nil, failParam(provider.CodeInvalidRequest, "delivery.signing_secret",
			"delivery.signing_secret must be \"whsec_\" followed by the padded base64 of 32 random bytes"), false
	}
	return &d, reply{}, true
}

// validSecret reports whether a signing secret is whsec_ and the canonical base64 of 32 bytes.
func validSecret(secret string) bool {
	if !signingSecretPattern.MatchString(secret) {
		return false
	}
	key, err := base64.StdEncoding.Strict().DecodeString(strings.TrimPrefix(secret, "whsec_"))
	return err == nil && len(key) == 32
}
