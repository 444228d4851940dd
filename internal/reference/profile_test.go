package reference_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

func seedProfile(o *reference.Options) { o.Profile = reference.ProfileSeed }

// requiredFields are the required fields of AAP's ApprovalRequest.
var requiredFields = []string{"arguments", "created_at", "deadline_at", "id", "status", "timeout", "tool"}

// fieldsOf returns the sorted top-level keys of a JSON object, and those of its decision.
func fieldsOf(g *WithT, body []byte) (fields, decision []string) {
	var m map[string]json.RawMessage
	g.Expect(json.Unmarshal(body, &m)).To(Succeed(), string(body))
	for k := range m {
		fields = append(fields, k)
	}
	slices.Sort(fields)
	if d, ok := m["decision"]; ok {
		var dm map[string]json.RawMessage
		g.Expect(json.Unmarshal(d, &dm)).To(Succeed())
		for k := range dm {
			decision = append(decision, k)
		}
		slices.Sort(decision)
	}
	return fields, decision
}

func withClaims() provider.CreateApprovalRequest {
	body := refund()
	body.AgentReasoning = "The customer was charged twice."
	body.Context = json.RawMessage(`{"namespace":"payments"}`)
	return body
}

// The full profile echoes agent_reasoning and context; the seed profile sends the required fields
// only, created, polled and decided, though it keeps both for its approvers.
func TestProfilesEchoTheOptionalFieldsOrNot(t *testing.T) {
	full := start(t)
	r := full.submit("key-1", withClaims())
	created := full.expectRequest(r, http.StatusCreated)
	full.g.Expect(created.AgentReasoning).To(Equal("The customer was charged twice."))
	full.g.Expect(created.Context).To(MatchJSON(`{"namespace":"payments"}`))
	fields, _ := fieldsOf(full.g, r.body)
	full.g.Expect(fields).To(Equal([]string{"agent_reasoning", "arguments", "context", "created_at", "deadline_at", "id", "status", "timeout", "tool"}))
	full.g.Expect(full.expectRequest(full.get(created.ID, ""), http.StatusOK)).To(Equal(created))

	e := start(t, seedProfile)
	r = e.submit("key-1", withClaims())
	e.g.Expect(r.status).To(Equal(http.StatusCreated))
	fields, _ = fieldsOf(e.g, r.body)
	e.g.Expect(fields).To(Equal(requiredFields))
	seeded := e.expectRequest(r, http.StatusCreated)
	fields, _ = fieldsOf(e.g, e.get(seeded.ID, "?wait=1s").body)
	e.g.Expect(fields).To(Equal(requiredFields))
	stored, err := e.srv.Get(seeded.ID)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(stored.AgentReasoning).To(Equal("The customer was charged twice."), "kept for the approvers")

	_, err = e.srv.Decide(seeded.ID, provider.StatusApproved, "The duplicate charge has been confirmed.", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	polled := e.get(seeded.ID, "?wait=30s")
	e.g.Expect(polled.status).To(Equal(http.StatusOK))
	fields, decision := fieldsOf(e.g, polled.body)
	e.g.Expect(fields).To(Equal(append([]string{"arguments", "created_at", "deadline_at", "decision"}, requiredFields[3:]...)))
	e.g.Expect(decision).To(Equal([]string{"decided_at", "expires_at", "note", "status"}))
	e.g.Expect(e.srv.Profile()).To(Equal(reference.ProfileSeed))
}

// A replay is answered 200 with the current request, as AAP says, and a reused key with other
// fields 409; DELETE cancels.
func TestSeedProfileReplaysAndCancelsAsAAPSays(t *testing.T) {
	e := start(t, seedProfile)
	first := e.create("key-1")
	e.g.Expect(e.expectRequest(e.submit("key-1", refund()), http.StatusOK)).To(Equal(first))
	other := refund()
	other.Timeout = "31m"
	e.g.Expect(e.submit("key-1", other).status).To(Equal(http.StatusConflict))
	cancelled := e.expectRequest(e.cancel(first.ID), http.StatusOK)
	e.g.Expect(cancelled.Status).To(Equal(provider.StatusCancelled))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Replays).To(BeEquivalentTo(1))
}

// Errors are plain text: the status code says what happened.
func TestSeedProfileErrorsArePlainText(t *testing.T) {
	e := start(t, seedProfile)
	created := e.create("key-1")
	decided := e.create("key-2")
	_, err := e.srv.Decide(decided.ID, provider.StatusDenied, "no", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	otherBody := refund()
	otherBody.Timeout = "31m"
	cases := []struct {
		name   string
		req    *http.Request
		status int
	}{
		{"no credential", e.newRequest(http.MethodGet, "/v1/requests/"+created.ID, nil), http.StatusUnauthorized},
		{"the provisioner token", e.requestAs(provisioner, http.MethodGet, "/v1/requests/"+created.ID, nil), http.StatusForbidden},
		{"no idempotency key", e.submitRequest("", refund()), http.StatusBadRequest},
		{"invalid timeout", e.submitRequest("key-3", []byte(`{"tool":"issue_refund","arguments":{},"timeout":"soon"}`)), http.StatusBadRequest},
		{"key reused with other fields", e.submitRequest("key-1", otherBody), http.StatusConflict},
		{"unknown request", e.request(http.MethodGet, "/v1/requests/"+uuid.NewString(), nil), http.StatusNotFound},
		{"cancel a denied request", e.request(http.MethodDelete, "/v1/requests/"+decided.ID, nil), http.StatusConflict},
		{"unknown path", e.request(http.MethodPost, "/v1/requests/"+created.ID+"/approve", nil), http.StatusNotFound},
	}
	for _, tc := range cases {
		r := e.do(tc.req)
		e.g.Expect(r.status).To(Equal(tc.status), tc.name)
		e.g.Expect(r.header.Get("Content-Type")).To(HavePrefix("text/plain"), tc.name)
		e.g.Expect(json.Valid(r.body)).To(BeFalse(), "%s: %s", tc.name, r.body)
		e.g.Expect(strings.TrimSpace(string(r.body))).NotTo(BeEmpty(), tc.name)
	}
	e.g.Expect(e.srv.Get(created.ID)).To(HaveField("Status", provider.StatusPending))
}

// Injected faults answer in the profile's format too.
func TestSeedProfileFaultsArePlainText(t *testing.T) {
	e := start(t, seedProfile)
	e.g.Expect(e.srv.Faults().Add(faults.Rule{Op: faults.OpSubmit, Kind: faults.RateLimit, RetryAfter: time.Second, Count: 1})).To(Succeed())
	e.g.Expect(e.srv.Faults().Add(faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Count: 1})).To(Succeed())
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		r := e.submit("key-1", refund())
		e.g.Expect(r.status).To(Equal(status))
		e.g.Expect(r.header.Get("Content-Type")).To(HavePrefix("text/plain"))
	}
	e.create("key-1")
}

func TestUnknownProfileIsRefused(t *testing.T) {
	g := NewWithT(t)
	_, err := reference.New(reference.Options{Credential: credential, Profile: "strict"})
	g.Expect(err).To(MatchError(ContainSubstring(`unknown provider profile "strict": use "full" or "seed"`)))
}
