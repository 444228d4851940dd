package reference_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// provisionResponse sends POST /v1/instances with the provisioner token.
func (e *env) provisionResponse(key, body string) response {
	e.t.Helper()
	req := e.requestAs(provisioner, http.MethodPost, "/v1/instances", []byte(body))
	if key != "" {
		req.Header.Set(provider.HeaderIdempotencyKey, key)
	}
	return e.do(req)
}

// provision provisions an instance, checks the answer strictly and returns it.
func (e *env) provision(key, body string, status int) provider.ProvisionInstanceResponse {
	e.t.Helper()
	r := e.provisionResponse(key, body)
	e.g.Expect(r.status).To(Equal(status), string(r.body))
	e.g.Expect(r.header.Get("Content-Type")).To(Equal(provider.ContentTypeJSON))
	var wire aapProvisioned
	strictly(e.g, r.body, &wire)
	e.g.Expect(uuid.Parse(wire.Instance.ID)).Error().NotTo(HaveOccurred())
	e.g.Expect(wire.Instance.Name).NotTo(BeEmpty())
	e.g.Expect(wire.Instance.Delivery).To(BeNil())
	e.g.Expect(wire.Credential.Token).NotTo(BeEmpty())
	var res provider.ProvisionInstanceResponse
	e.g.Expect(json.Unmarshal(r.body, &res)).To(Succeed())
	return res
}

// instance sends GET /v1/instances/{id} with the provisioner token.
func (e *env) instance(id string) response {
	e.t.Helper()
	return e.do(e.requestAs(provisioner, http.MethodGet, "/v1/instances/"+id, nil))
}

// expectInstance checks an Instance answer strictly and returns it.
func (e *env) expectInstance(r response) provider.Instance {
	e.t.Helper()
	e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
	var wire aapInstance
	strictly(e.g, r.body, &wire)
	var inst provider.Instance
	e.g.Expect(json.Unmarshal(r.body, &inst)).To(Succeed())
	return inst
}

// patchInstance sends PATCH /v1/instances/{id} with the provisioner token.
func (e *env) patchInstance(id, key, body string) response {
	e.t.Helper()
	req := e.requestAs(provisioner, http.MethodPatch, "/v1/instances/"+id, []byte(body))
	if key != "" {
		req.Header.Set(provider.HeaderIdempotencyKey, key)
	}
	return e.do(req)
}

// deleteInstance sends DELETE /v1/instances/{id} with the provisioner token.
func (e *env) deleteInstance(id string) response {
	e.t.Helper()
	return e.do(e.requestAs(provisioner, http.MethodDelete, "/v1/instances/"+id, nil))
}

// exampleSecret is AAP's illustrative signing secret (32 bytes 0..31).
const exampleSecret = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// deliveryBody is a provisioning or update body with a delivery configuration.
func deliveryBody(typ, url, registrationID, secret string) string {
	b, err := json.Marshal(map[string]any{"delivery": map[string]string{
		"type": typ, "url": url, "registration_id": registrationID, "signing_secret": secret}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestProvisionValidation(t *testing.T) {
	e := start(t)
	regID := uuid.NewString()
	for _, tc := range []struct {
		name, key, body string
		code, param     string
	}{
		{"no key", "", `{}`, provider.CodeInvalidRequest, "Idempotency-Key"},
		{"no body", "k", ``, provider.CodeInvalidRequest, ""},
		{"not an object", "k", `"x"`, provider.CodeInvalidRequest, ""},
		{"unknown field", "k", `{"name":"x"}`, provider.CodeInvalidRequest, "name"},
		{"empty name", "k", `{"instance_name":""}`, provider.CodeInvalidRequest, "instance_name"},
		{"long name", "k", `{"instance_name":"` + strings.Repeat("n", 129) + `"}`, provider.CodeInvalidRequest, "instance_name"},
		{"name a number", "k", `{"instance_name":7}`, provider.CodeInvalidRequest, "instance_name"},
		{"null delivery", "k", `{"delivery":null}`, provider.CodeInvalidRequest, "delivery"},
		{"delivery a string", "k", `{"delivery":"https://example.com"}`, provider.CodeInvalidRequest, "delivery"},
		{"other transport", "k", deliveryBody("socket", "https://example.com/aap", regID, exampleSecret), provider.CodeUnsupportedDeliveryType, "delivery.type"},
		{"no type", "k", `{"delivery":{"url":"https://example.com/aap"}}`, provider.CodeInvalidRequest, "delivery.type"},
		{"no secret", "k", `{"delivery":{"type":"webhook","url":"https://example.com/aap","registration_id":"` + regID + `"}}`,
			provider.CodeInvalidRequest, "delivery.signing_secret"},
		{"unknown delivery field", "k", `{"delivery":{"type":"webhook","extra":1}}`, provider.CodeInvalidRequest, "delivery.extra"},
		{"http url", "k", deliveryBody("webhook", "http://example.com/aap", regID, exampleSecret), provider.CodeInvalidWebhookURL, "delivery.url"},
		{"userinfo", "k", deliveryBody("webhook", "https://user@example.com/aap", regID, exampleSecret), provider.CodeInvalidWebhookURL, "delivery.url"},
		{"fragment", "k", deliveryBody("webhook", "https://example.com/aap#x", regID, exampleSecret), provider.CodeInvalidWebhookURL, "delivery.url"},
		{"loopback", "k", deliveryBody("webhook", "https://127.0.0.1:8443/aap", regID, exampleSecret), provider.CodeInvalidWebhookURL, "delivery.url"},
		{"registration not a uuid", "k", deliveryBody("webhook", "https://example.com/aap", "reg-1", exampleSecret),
			provider.CodeInvalidRequest, "delivery.registration_id"},
		{"secret without prefix", "k", deliveryBody("webhook", "https://example.com/aap", regID, strings.TrimPrefix(exampleSecret, "whsec_")),
			provider.CodeInvalidRequest, "delivery.signing_secret"},
		{"secret of 31 bytes", "k", deliveryBody("webhook", "https://example.com/aap", regID, "whsec_"+base64.StdEncoding.EncodeToString(make([]byte, 31))),
			provider.CodeInvalidRequest, "delivery.signing_secret"},
		{"secret not canonical", "k", deliveryBody("webhook", "https://example.com/aap", regID, "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9="),
			provider.CodeInvalidRequest, "delivery.signing_secret"},
	} {
		got := e.expectError(e.provisionResponse(tc.key, tc.body), http.StatusBadRequest, tc.code)
		e.g.Expect(got.Param).To(Equal(tc.param), tc.name)
	}
	// Nothing was committed: the key is still free.
	res := e.provision("k", `{}`, http.StatusCreated)
	e.g.Expect(res.Instance.Name).To(Equal("instance-"+res.Instance.ID[:8]), "a name the provider assigns")
	e.g.Expect(res.Credential.ExpiresAt).To(BeNil(), "no expiry is scheduled")
}

func TestUpdateInstance(t *testing.T) {
	e := start(t)
	res := e.provision("p", `{"instance_name":"first"}`, http.StatusCreated)
	id := res.Instance.ID

	e.g.Expect(e.expectInstance(e.patchInstance(id, "u1", `{"instance_name":"second"}`)).Name).To(Equal("second"))
	e.g.Expect(e.expectInstance(e.instance(id)).Name).To(Equal("second"))
	e.g.Expect(e.expectInstance(e.patchInstance(id, "u2", `{"instance_name":"third"}`)).Name).To(Equal("third"))
	// A replay of the first update returns its original result and does not overwrite the later one.
	e.g.Expect(e.expectInstance(e.patchInstance(id, "u1", `{ "instance_name" : "second" }`)).Name).To(Equal("second"))
	e.g.Expect(e.expectInstance(e.instance(id)).Name).To(Equal("third"))
	e.expectError(e.patchInstance(id, "u1", `{"instance_name":"other"}`), http.StatusConflict, provider.CodeIdempotencyConflict)
	// Removing a delivery that is not there changes nothing; only webhook delivery is supported, and a
	// webhook configuration is checked as on provisioning.
	e.g.Expect(e.expectInstance(e.patchInstance(id, "u3", `{"delivery":null}`)).Name).To(Equal("third"))
	got := e.expectError(e.patchInstance(id, "u4", `{"delivery":{"type":"socket"}}`), http.StatusBadRequest, provider.CodeUnsupportedDeliveryType)
	e.g.Expect(got.Param).To(Equal("delivery.type"))
	got = e.expectError(e.patchInstance(id, "u4", deliveryBody("webhook", "https://[::1]/aap", uuid.NewString(), exampleSecret)),
		http.StatusBadRequest, provider.CodeInvalidWebhookURL)
	e.g.Expect(got.Param).To(Equal("delivery.url"))
	e.g.Expect(e.expectInstance(e.instance(id)).Delivery).To(BeNil())

	for _, tc := range []struct{ key, body, param string }{
		{"", `{"instance_name":"x"}`, "Idempotency-Key"},
		{"u5", `{}`, ""},
		{"u5", `{"instance_name":"x","extra":1}`, "extra"},
	} {
		got := e.expectError(e.patchInstance(id, tc.key, tc.body), http.StatusBadRequest, provider.CodeInvalidRequest)
		e.g.Expect(got.Param).To(Equal(tc.param), tc.body)
	}
	e.expectError(e.patchInstance("not-a-uuid", "u6", `{"instance_name":"x"}`), http.StatusBadRequest, provider.CodeInvalidRequest)
	e.expectError(e.patchInstance(uuid.NewString(), "u6", `{"instance_name":"x"}`), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.instance("not-a-uuid"), http.StatusBadRequest, provider.CodeInvalidRequest)
	e.expectError(e.deleteInstance("not-a-uuid"), http.StatusNotFound, provider.CodeNotFound)
}

// The default instance (the static credential's) is outside the provisioner's scope.
func TestTheDefaultInstanceIsNotTheProvisioners(t *testing.T) {
	e := start(t)
	id := e.srv.DefaultInstance().ID
	e.expectError(e.instance(id), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.patchInstance(id, "u", `{"instance_name":"mine"}`), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.deleteInstance(id), http.StatusNotFound, provider.CodeNotFound)
	e.create("still-works")
}

// Without a provisioner token there is nothing that may provision.
func TestNoProvisionerWithoutAToken(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.ProvisionerToken = "" })
	e.expectError(e.provisionResponse("k", `{}`), http.StatusUnauthorized, provider.CodeUnauthenticated)
	req := e.request(http.MethodPost, "/v1/instances", []byte(`{}`))
	req.Header.Set(provider.HeaderIdempotencyKey, "k")
	e.expectError(e.do(req), http.StatusForbidden, provider.CodeForbidden)
}

// Instance operations take faults too (op instances, or any).
func TestFaultsOnInstanceOperations(t *testing.T) {
	e := start(t)
	e.g.Expect(e.srv.Faults().Set(faults.Rule{Op: faults.OpInstances, Kind: faults.DropAfterCommit, Count: 1})).To(Succeed())
	req := e.requestAs(provisioner, http.MethodPost, "/v1/instances", []byte(`{"instance_name":"lost"}`))
	req.Header.Set(provider.HeaderIdempotencyKey, "lost")
	_, err := e.try(req)
	e.g.Expect(err).To(HaveOccurred(), "the response was dropped")
	res := e.provision("lost", `{"instance_name":"lost"}`, http.StatusOK) // committed: the replay recovers it
	e.g.Expect(res.Instance.Name).To(Equal("lost"))
	e.g.Expect(e.stats().Instances).To(BeEquivalentTo(2))
	e.g.Expect(e.stats().Responses[faults.OpInstances]).To(Equal(map[int]int64{0: 1, 200: 1}))
}

// With a credential lifetime, provisioning gives the credential's expires_at (replays the same), the
// credential makes requests until then and is refused with 401 from then on, also after a restart
// from the store; the provider's other credentials are not affected.
func TestIssuedCredentialExpires(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "expiry.db")
	opts := reference.Options{DBPath: dbPath, Credential: credential, ProvisionerToken: provisioner, CredentialLifetime: time.Hour}
	e := start(t, func(o *reference.Options) { opts.Clock = o.Clock; *o = opts })
	res := e.provision("p", `{}`, http.StatusCreated)
	e.g.Expect(res.Credential.ExpiresAt).To(HaveValue(BeTemporally("==", t0.Add(time.Hour))))
	e.g.Expect(e.provision("p", `{}`, http.StatusOK).Credential).To(Equal(res.Credential), "a replay gives the same credential and expiry")
	token := res.Credential.Token

	e.clock.Step(time.Hour - time.Second)
	e.expectRequest(e.do(e.submitRequestAs(token, "before", refund())), http.StatusCreated)

	e.clock.Step(time.Second)
	e.expectError(e.do(e.submitRequestAs(token, "after", refund())), http.StatusUnauthorized, provider.CodeUnauthenticated)
	e.expectRequest(e.submit("static", refund()), http.StatusCreated)

	// The expiry is kept in the store: a provider started again from it refuses the credential too.
	e.g.Expect(e.srv.Close()).To(Succeed())
	e.open(opts)
	e.expectError(e.do(e.submitRequestAs(token, "after", refund())), http.StatusUnauthorized, provider.CodeUnauthenticated)
}
