package reference_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/test/testcert"
)

// failWith answers notifications (not verifications) with a status.
func failWith(status int) func(http.ResponseWriter, message) bool {
	return func(w http.ResponseWriter, m message) bool {
		if m.Type != "request.resolved" {
			return false
		}
		w.WriteHeader(status)
		return true
	}
}

func TestWebhookVerification(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca, func(o *reference.Options) { o.WebhookTimeout = time.Second })
	rc := newReceiver(t, ca)
	res := e.hooked("p1", rc)

	vs := rc.got("webhook.verification")
	e.g.Expect(vs).To(HaveLen(1))
	var v aapVerification
	strictly(e.g, vs[0].Body, &v)
	e.g.Expect(uuid.Parse(v.ID)).Error().NotTo(HaveOccurred())
	e.g.Expect(uuid.Parse(v.Challenge)).Error().NotTo(HaveOccurred())
	e.g.Expect(v).To(Equal(aapVerification{ID: v.ID, Type: "webhook.verification", RegistrationID: rc.regID,
		InstanceID: res.Instance.ID, CreatedAt: "2026-09-16T12:00:00Z", Challenge: v.Challenge}))
	e.g.Expect(vs[0].Header.Get("webhook-id")).To(Equal(v.ID))

	r := e.instance(res.Instance.ID)
	e.g.Expect(e.expectInstance(r).Delivery).To(Equal(&provider.WebhookDelivery{Type: "webhook", URL: rc.url(), RegistrationID: rc.regID}))
	e.g.Expect(string(r.body)).NotTo(ContainSubstring("signing_secret"))
	// A replay returns the instance without verifying again.
	e.g.Expect(e.provisionResponse("p1", rc.body()).status).To(Equal(http.StatusOK))
	e.g.Expect(rc.got("webhook.verification")).To(HaveLen(1))
	e.g.Expect(e.stats().WebhookVerifications).To(BeEquivalentTo(1))

	slow := make(chan struct{})
	defer close(slow)
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter, message) bool
	}{
		{"refused", func(w http.ResponseWriter, _ message) bool { w.WriteHeader(http.StatusForbidden); return true }},
		{"bare 200", func(w http.ResponseWriter, _ message) bool { w.WriteHeader(http.StatusOK); return true }},
		{"204", func(w http.ResponseWriter, _ message) bool { w.WriteHeader(http.StatusNoContent); return true }},
		{"wrong challenge", func(w http.ResponseWriter, _ message) bool {
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": uuid.NewString()})
			return true
		}},
		{"redirect", func(w http.ResponseWriter, _ message) bool {
			w.Header().Set("Location", rc.url()+"?again")
			w.WriteHeader(http.StatusTemporaryRedirect)
			return true
		}},
		{"too slow", func(http.ResponseWriter, message) bool { <-slow; return true }},
	} {
		rc.answerWith(tc.answer)
		before := len(rc.got("webhook.verification"))
		got := e.expectError(e.provisionResponse("f-"+tc.name, rc.body()), http.StatusUnprocessableEntity, provider.CodeWebhookVerificationFailed)
		e.g.Expect(got.Param).To(Equal("delivery"), tc.name)
		e.g.Expect(rc.got("webhook.verification")).To(HaveLen(before+1), "%s: one attempt, no redirect followed", tc.name)
	}
	// Nothing was committed: the same key and input succeed once the receiver verifies.
	rc.answerWith(nil)
	e.hooked("f-refused", rc)

	// A failed replacement changes nothing, not even the name.
	other := newReceiver(t, ca)
	other.answerWith(func(w http.ResponseWriter, _ message) bool { w.WriteHeader(http.StatusForbidden); return true })
	e.expectError(e.patchInstance(res.Instance.ID, "u1", `{"instance_name":"renamed",`+other.body()[1:]),
		http.StatusUnprocessableEntity, provider.CodeWebhookVerificationFailed)
	inst := e.expectInstance(e.instance(res.Instance.ID))
	e.g.Expect(inst.Name).To(Equal(res.Instance.Name))
	e.g.Expect(inst.Delivery.URL).To(Equal(rc.url()))
	e.g.Expect(rc.rejections()+other.rejections()).To(BeZero(), "every message was signed with the receiver's secret")
}

func TestANotificationPerTerminalOutcome(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	rc := newReceiver(t, ca)
	res := e.hooked("p", rc)
	token, inst := res.Credential.Token, res.Instance.ID
	delivered := func(n int) {
		e.t.Helper()
		e.g.Eventually(func() int64 { return e.stats().Delivered }).Should(BeEquivalentTo(n))
		e.g.Expect(rc.events()).To(HaveLen(n))
	}

	approved, denied, cancelled, expired := e.createAs(token, "a"), e.createAs(token, "d"), e.createAs(token, "c"), e.createAs(token, "x")
	unhooked := e.create("default") // the default instance has no receiver
	var outcomes []provider.Request
	decided, err := e.srv.Decide(approved.ID, provider.StatusApproved, "ok", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	outcomes = append(outcomes, decided)
	delivered(1)
	e.clock.Step(time.Minute)
	decided, err = e.srv.Decide(denied.ID, provider.StatusDenied, "no", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	outcomes = append(outcomes, decided)
	delivered(2)
	e.clock.Step(time.Minute)
	outcomes = append(outcomes, e.expectRequest(e.do(e.requestAs(token, http.MethodDelete, "/v1/requests/"+cancelled.ID, nil)), http.StatusOK))
	delivered(3)
	_, err = e.srv.Decide(unhooked.ID, provider.StatusApproved, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.clock.Step(28 * time.Minute) // the last one's deadline passes
	delivered(4)
	decided, err = e.srv.Get(expired.ID)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(decided.Status).To(Equal(provider.StatusExpired))
	outcomes = append(outcomes, decided)

	ids := map[string]bool{}
	for i, m := range rc.events() {
		ev := e.expectEvent(m, inst, outcomes[i])
		ids[ev.ID] = true
	}
	e.g.Expect(ids).To(HaveLen(4), "each event has its own id")

	// Reading and replaying create no more; neither does cancelling a cancelled request.
	e.expectRequest(e.do(e.requestAs(token, http.MethodGet, "/v1/requests/"+approved.ID, nil)), http.StatusOK)
	e.expectRequest(e.do(e.submitRequestAs(token, "a", refund())), http.StatusOK)
	e.expectRequest(e.do(e.requestAs(token, http.MethodDelete, "/v1/requests/"+cancelled.ID, nil)), http.StatusOK)
	e.g.Consistently(func() []message { return rc.events() }, 300*time.Millisecond).Should(HaveLen(4))
	e.g.Expect(e.stats()).To(And(HaveField("DeliveryAttempts", BeEquivalentTo(4)), HaveField("DeliveryFailures", BeZero())))
}

// Deleting an instance cancels its pending requests without notifications and ends its deliveries.
func TestDeletingTheInstanceEndsDelivery(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	rc := newReceiver(t, ca)
	res := e.hooked("p", rc)
	rc.answerWith(failWith(http.StatusInternalServerError))
	decided := e.createAs(res.Credential.Token, "decided")
	pending := e.createAs(res.Credential.Token, "pending")
	_, err := e.srv.Decide(decided.ID, provider.StatusApproved, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Eventually(func() int64 { return e.stats().DeliveryFailures }).Should(BeEquivalentTo(1))

	e.g.Expect(e.deleteInstance(res.Instance.ID).status).To(Equal(http.StatusNoContent))
	e.g.Expect(e.srv.Get(pending.ID)).To(HaveField("Status", provider.StatusCancelled))
	rc.answerWith(nil)
	e.clock.Step(2 * time.Hour)
	e.g.Consistently(func() []message { return rc.events() }, 300*time.Millisecond).Should(HaveLen(1), "no retry, no cancellation notification")
	e.g.Expect(e.stats().DeliveryAttempts).To(BeEquivalentTo(1))
}

// Removing delivery (PATCH delivery: null) ends outstanding deliveries.
func TestRemovingDeliveryEndsIt(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	rc := newReceiver(t, ca)
	res := e.hooked("p", rc)
	rc.answerWith(failWith(http.StatusInternalServerError))
	req := e.createAs(res.Credential.Token, "r")
	_, err := e.srv.Decide(req.ID, provider.StatusDenied, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Eventually(func() int64 { return e.stats().DeliveryFailures }).Should(BeEquivalentTo(1))

	e.g.Expect(e.expectInstance(e.patchInstance(res.Instance.ID, "u", `{"delivery":null}`)).Delivery).To(BeNil())
	e.g.Expect(e.expectInstance(e.instance(res.Instance.ID)).Delivery).To(BeNil())
	e.clock.Step(2 * time.Hour)
	e.g.Consistently(func() []message { return rc.events() }, 300*time.Millisecond).Should(HaveLen(1))
	// Later outcomes have no receiver to notify.
	later := e.createAs(res.Credential.Token, "later")
	_, err = e.srv.Decide(later.ID, provider.StatusDenied, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Consistently(func() []message { return rc.events() }, 300*time.Millisecond).Should(HaveLen(1))
}
