package reference_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
)

func seedProfile(o *reference.Options) { o.Profile = reference.ProfileSeed }

// seedFields are the fields of a request in the seed's HTTP example, decision included once decided.
var seedFields = []string{"arguments", "created_at", "deadline_at", "id", "status", "timeout", "tool"}

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

// The seed profile answers with exactly the seed's fields: created, polled, decided.
func TestSeedProfileSendsTheSeedsFieldsOnly(t *testing.T) {
	e := start(t, seedProfile)
	r := e.submit("key-1", refund())
	e.g.Expect(r.status).To(Equal(http.StatusCreated))
	e.g.Expect(r.header.Get("Content-Type")).To(Equal(provider.ContentTypeJSON))
	fields, _ := fieldsOf(e.g, r.body)
	e.g.Expect(fields).To(Equal(seedFields))
	created := e.expectRequest(r, http.StatusCreated)

	fields, _ = fieldsOf(e.g, e.get(created.ID, "?wait=0s").body)
	e.g.Expect(fields).To(Equal(seedFields))

	_, err := e.srv.Decide(created.ID, provider.StatusApproved, "The duplicate charge has been confirmed.", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	polled := e.get(created.ID, "?wait=30s")
	e.g.Expect(polled.status).To(Equal(http.StatusOK))
	fields, decision := fieldsOf(e.g, polled.body)
	e.g.Expect(fields).To(Equal(append([]string{"arguments", "created_at", "deadline_at", "decision"}, seedFields[3:]...)))
	e.g.Expect(decision).To(Equal([]string{"decided_at", "expires_at", "note", "status"}))
	e.g.Expect(e.srv.Profile()).To(Equal(reference.ProfileSeed))
}

// A replay is answered as the creation was: 201 with the same request, no Idempotent-Replayed.
func TestSeedProfileAnswersReplaysAsTheCreation(t *testing.T) {
	e := start(t, seedProfile)
	first := e.create("key-1")
	r := e.submit("key-1", refund())
	replay := e.expectRequest(r, http.StatusCreated)
	e.g.Expect(replay).To(Equal(first))
	e.g.Expect(r.header.Values(provider.HeaderIdempotentReplayed)).To(BeEmpty())
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Replays).To(BeEquivalentTo(1))
}

// Errors are plain text, the status code says what happened; there is no cancel endpoint.
func TestSeedProfileErrorsArePlainText(t *testing.T) {
	e := start(t, seedProfile)
	created := e.create("key-1")
	unauthenticated := e.newRequest(http.MethodGet, "/v1/requests/"+created.ID, nil)
	otherBody := refund()
	otherBody.Timeout = "31m"
	cases := []struct {
		name   string
		req    *http.Request
		status int
	}{
		{"no credential", unauthenticated, http.StatusUnauthorized},
		{"no idempotency key", e.submitRequest("", refund()), http.StatusBadRequest},
		{"invalid timeout", e.submitRequest("key-2", provider.SubmitBody{Tool: "issue_refund", Arguments: json.RawMessage(`{}`), Timeout: "soon"}), http.StatusBadRequest},
		{"key reused with another body", e.submitRequest("key-1", otherBody), http.StatusUnprocessableEntity},
		{"unknown request", e.request(http.MethodGet, "/v1/requests/no-such-request", nil), http.StatusNotFound},
		{"cancel", e.request(http.MethodPost, "/v1/requests/"+created.ID+"/cancel", nil), http.StatusNotFound},
		{"method not allowed", e.request(http.MethodDelete, "/v1/requests/"+created.ID, nil), http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		r := e.do(tc.req)
		e.g.Expect(r.status).To(Equal(tc.status), tc.name)
		e.g.Expect(r.header.Get("Content-Type")).To(HavePrefix("text/plain"), tc.name)
		e.g.Expect(json.Valid(r.body)).To(BeFalse(), "%s: %s", tc.name, r.body)
		e.g.Expect(strings.TrimSpace(string(r.body))).NotTo(BeEmpty(), tc.name)
	}
	got, err := e.srv.Get(created.ID)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(got.Status).To(Equal(provider.StatusPending), "the request was not cancelled")
	e.g.Expect(e.stats().Cancels).To(BeZero())
}

// Injected faults answer in the profile's format too.
func TestSeedProfileFaultsArePlainText(t *testing.T) {
	e := start(t, seedProfile)
	e.g.Expect(e.srv.Faults().Add(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultRateLimit, RetryAfter: time.Second, Count: 1})).To(Succeed())
	e.g.Expect(e.srv.Faults().Add(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultError5xx, Status: http.StatusBadGateway, Count: 1})).To(Succeed())
	for _, status := range []int{http.StatusTooManyRequests, http.StatusBadGateway} {
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
