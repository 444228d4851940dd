package reference_test

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/test/testcert"
)

// A webhook receiver for the tests: HTTPS on 127.0.0.1 with a certificate of a test CA, verifying every
// message with the official Standard Webhooks library and the secret it was given. By default it
// answers a verification with its challenge and acknowledges a notification with 204; answer
// overrides that per message.
type receiver struct {
	t        *testing.T
	srv      *httptest.Server
	secret   string
	regID    string
	verifier *standardwebhooks.Webhook

	mu       sync.Mutex
	messages []message
	rejected int // messages whose signature, timestamp or id did not verify
	answer   func(w http.ResponseWriter, m message) bool
}

// message is one verified message as the receiver got it.
type message struct {
	Header http.Header
	Body   []byte
	Type   string
	Fields map[string]any
}

// The wire objects exactly as openapi.yaml defines them.
type (
	aapVerification struct {
		ID             string `json:"id"`
		Type           string `json:"type"`
		RegistrationID string `json:"registration_id"`
		InstanceID     string `json:"instance_id"`
		CreatedAt      string `json:"created_at"`
		Challenge      string `json:"challenge"`
	}
	aapResolved struct {
		ID         string `json:"id"`
		Type       string `json:"type"`
		InstanceID string `json:"instance_id"`
		RequestID  string `json:"request_id"`
		CreatedAt  string `json:"created_at"`
	}
)

// newSecret draws a signing secret: whsec_ and 32 random bytes in padded base64.
func newSecret(g *WithT) string {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	g.Expect(err).NotTo(HaveOccurred())
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func newReceiver(t *testing.T, ca *testcert.CA) *receiver {
	t.Helper()
	g := NewWithT(t)
	rc := &receiver{t: t, secret: newSecret(g), regID: uuid.NewString()}
	var err error
	rc.verifier, err = standardwebhooks.NewWebhook(rc.secret)
	g.Expect(err).NotTo(HaveOccurred())
	rc.srv = httptest.NewUnstartedServer(rc)
	rc.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.ServerCert(t)}}
	rc.srv.StartTLS()
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) url() string { return rc.srv.URL + "/aap/events" }

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var fields map[string]any
	if err == nil {
		err = json.Unmarshal(body, &fields)
	}
	if err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != provider.ContentTypeJSON ||
		rc.verifier.Verify(body, r.Header) != nil || fields["id"] != r.Header.Get("webhook-id") {
		rc.mu.Lock()
		rc.rejected++
		rc.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	m := message{Header: r.Header.Clone(), Body: body, Type: fields["type"].(string), Fields: fields}
	rc.mu.Lock()
	rc.messages = append(rc.messages, m)
	answer := rc.answer
	rc.mu.Unlock()
	if answer != nil && answer(w, m) {
		return
	}
	if m.Type == "webhook.verification" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"challenge": fields["challenge"]})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// answerWith sets how the receiver answers (nil: the default answers).
func (rc *receiver) answerWith(f func(w http.ResponseWriter, m message) bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answer = f
}

// got returns the verified messages of a type, in order.
func (rc *receiver) got(typ string) []message {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []message
	for _, m := range rc.messages {
		if m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}

func (rc *receiver) events() []message { return rc.got("request.resolved") }

func (rc *receiver) rejections() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.rejected
}

// body is a provisioning or update body configuring this receiver.
func (rc *receiver) body() string { return deliveryBody("webhook", rc.url(), rc.regID, rc.secret) }

// startWebhooks starts a provider that may reach receivers on loopback, trusting ca, and returns its
// options too (to reopen its store).
func startWebhooks(t *testing.T, ca *testcert.CA, options ...func(*reference.Options)) (*env, reference.Options) {
	var kept reference.Options
	e := start(t, func(o *reference.Options) {
		o.AllowedWebhookNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		o.WebhookRootCAs = ca.Pool()
		o.WebhookTimeout = 2 * time.Second
		for _, f := range options {
			f(o)
		}
		kept = *o
	})
	return e, kept
}

// hooked provisions an instance with rc as its receiver and returns it with its credential.
func (e *env) hooked(key string, rc *receiver) provider.ProvisionInstanceResponse {
	e.t.Helper()
	r := e.provisionResponse(key, rc.body())
	e.g.Expect(r.status).To(Equal(http.StatusCreated), string(r.body))
	var wire aapProvisioned
	strictly(e.g, r.body, &wire)
	var res provider.ProvisionInstanceResponse
	e.g.Expect(json.Unmarshal(r.body, &res)).To(Succeed())
	e.g.Expect(res.Instance.Delivery).To(Equal(&provider.WebhookDelivery{Type: "webhook", URL: rc.url(), RegistrationID: rc.regID}))
	e.g.Expect(string(r.body)).NotTo(ContainSubstring(rc.secret), "the secret is never returned")
	return res
}

// expectEvent checks a request.resolved notification strictly: AAP's fields, webhook-id equal to its
// id, and created_at the request's decided_at.
func (e *env) expectEvent(m message, instance string, req provider.Request) aapResolved {
	e.t.Helper()
	var ev aapResolved
	strictly(e.g, m.Body, &ev)
	e.g.Expect(uuid.Parse(ev.ID)).Error().NotTo(HaveOccurred())
	e.g.Expect(m.Header.Get("webhook-id")).To(Equal(ev.ID))
	e.g.Expect(m.Header.Get("webhook-signature")).To(HavePrefix("v1,"))
	e.g.Expect(ev.Type).To(Equal("request.resolved"))
	e.g.Expect(ev.InstanceID).To(Equal(instance))
	e.g.Expect(ev.RequestID).To(Equal(req.ID))
	e.g.Expect(req.Decision).NotTo(BeNil())
	e.g.Expect(ev.CreatedAt).To(Equal(req.Decision.DecidedAt.UTC().Format(time.RFC3339Nano)))
	return ev
}

// createAs submits refund() under key with an instance's credential and returns the created request.
func (e *env) createAs(token, key string) provider.Request {
	e.t.Helper()
	return e.expectRequest(e.do(e.submitRequestAs(token, key, refund())), http.StatusCreated)
}
