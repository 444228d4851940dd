package reference_test

import (
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
	"toolgate.dev/toolgate/test/testcert"
)

// approveOne provisions an instance with rc, creates a request and approves it, and returns the
// instance.
func (e *env) approveOne(rc *receiver) provider.ProvisionInstanceResponse {
	e.t.Helper()
	res := e.hooked("p-"+uuid.NewString(), rc)
	req := e.createAs(res.Credential.Token, "r-"+uuid.NewString())
	_, err := e.srv.Decide(req.ID, provider.StatusApproved, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	return res
}

func (e *env) failures() func() int64 { return func() int64 { return e.stats().DeliveryFailures } }

// Failed attempts are retried with backoff by the server's clock: after a 500, a dropped connection,
// a 503 whose Retry-After is waited for, and a redirect, which is not followed.
func TestDeliveryRetries(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	rc, elsewhere := newReceiver(t, ca), newReceiver(t, ca)
	var mu sync.Mutex
	attempt := 0
	rc.answerWith(func(w http.ResponseWriter, m message) bool {
		if m.Type != "request.resolved" {
			return false
		}
		mu.Lock()
		attempt++
		n := attempt
		mu.Unlock()
		switch n {
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
		case 2:
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		case 3:
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 4:
			w.Header().Set("Location", elsewhere.url())
			w.WriteHeader(http.StatusTemporaryRedirect)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
		return true
	})
	e.approveOne(rc)
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(1), "the 500")
	e.clock.Step(12 * time.Second) // the first retry waits 10s, jittered up to 20% more
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(2), "the dropped connection")
	e.clock.Step(24 * time.Second) // then 20s, jittered
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(3), "the 503")
	e.clock.Step(59 * time.Minute)
	e.g.Consistently(e.failures(), 300*time.Millisecond).Should(BeEquivalentTo(3), "Retry-After says an hour")
	e.clock.Step(time.Minute)
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(4), "the redirect")
	e.g.Expect(elsewhere.events()).To(BeEmpty(), "a redirect is not followed")
	e.clock.Step(96 * time.Second) // then 80s, jittered
	e.g.Eventually(func() int64 { return e.stats().Delivered }).Should(BeEquivalentTo(1))

	events := rc.events()
	e.g.Expect(events).To(HaveLen(5))
	for _, m := range events[1:] {
		e.g.Expect(m.Body).To(Equal(events[0].Body), "the same body on every attempt")
		e.g.Expect(m.Header.Get("webhook-id")).To(Equal(events[0].Header.Get("webhook-id")))
	}
	e.g.Expect(e.stats()).To(And(HaveField("DeliveryAttempts", BeEquivalentTo(5)), HaveField("DeliveriesAbandoned", BeZero())))
	e.clock.Step(2 * time.Hour)
	e.g.Consistently(func() []message { return rc.events() }, 300*time.Millisecond).Should(HaveLen(5), "delivered: no more attempts")
}

// A receiver that never acknowledges gets attempts for seven days after the decision, and no more.
func TestDeliveryEndsSevenDaysAfterTheDecision(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	rc := newReceiver(t, ca)
	rc.answerWith(failWith(http.StatusInternalServerError))
	e.approveOne(rc) // decided at t0
	attempts := func() int64 { return e.stats().DeliveryAttempts }
	// Backoff doubles from 10s up to an hour, plus up to 20% jitter: a step of 73 minutes passes
	// exactly one attempt's wait. Attempt n is at t0 + (n-1)*73m; attempt 139, at 167h54m, is the
	// last, as no wait of at least an hour fits before t0 + 168h.
	var n int64
	for n = 1; ; n++ {
		e.g.Eventually(attempts).Should(Equal(n))
		if e.stats().DeliveriesAbandoned > 0 {
			break
		}
		e.clock.Step(73 * time.Minute)
	}
	e.g.Expect(n).To(BeEquivalentTo(139))
	e.g.Expect(e.clock.Now()).To(BeTemporally("<", t0.Add(168*time.Hour)))
	e.g.Expect(e.stats()).To(And(HaveField("DeliveriesAbandoned", BeEquivalentTo(1)), HaveField("DeliveryFailures", BeEquivalentTo(139)),
		HaveField("Delivered", BeZero())))
	e.clock.Step(24 * time.Hour)
	e.g.Consistently(attempts, 300*time.Millisecond).Should(BeEquivalentTo(139))
	e.g.Expect(rc.events()).To(HaveLen(139))
}

// At most one attempt per event is in flight, even when the receiver is replaced meanwhile; queued
// notifications then go to the new receiver at once, signed with its secret, with their ids and bodies.
func TestOneAttemptInFlightAndReplacement(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	first, second, third := newReceiver(t, ca), newReceiver(t, ca), newReceiver(t, ca)
	release := make(chan struct{})
	first.answerWith(func(w http.ResponseWriter, m message) bool {
		if m.Type != "request.resolved" {
			return false
		}
		<-release
		w.WriteHeader(http.StatusInternalServerError)
		return true
	})
	res := e.approveOne(first)
	e.g.Eventually(func() []message { return first.events() }).Should(HaveLen(1))

	e.expectInstance(e.patchInstance(res.Instance.ID, "to-second", second.body()))
	e.g.Expect(second.got("webhook.verification")).To(HaveLen(1))
	e.clock.Step(time.Hour)
	e.g.Consistently(func() int { return len(first.events()) + len(second.events()) }, 300*time.Millisecond).Should(Equal(1),
		"the attempt in flight is the only one")
	close(release)
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(1))
	// The new receiver gets it as soon as the attempt in flight ended, without waiting for the backoff.
	e.g.Eventually(func() int64 { return e.stats().Delivered }).Should(BeEquivalentTo(1))
	e.g.Expect(second.events()).To(HaveLen(1))
	e.g.Expect(second.events()[0].Body).To(Equal(first.events()[0].Body))
	e.g.Expect(first.events()).To(HaveLen(1))

	// A queued notification moves to a replacement at once, without waiting for its next attempt.
	second.answerWith(failWith(http.StatusInternalServerError))
	req := e.createAs(res.Credential.Token, "next")
	_, err := e.srv.Decide(req.ID, provider.StatusDenied, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(2))
	e.expectInstance(e.patchInstance(res.Instance.ID, "to-third", third.body()))
	e.g.Eventually(func() []message { return third.events() }).Should(HaveLen(1))
	e.g.Expect(third.events()[0].Body).To(Equal(second.events()[1].Body))
	e.g.Eventually(func() int64 { return e.stats().Delivered }).Should(BeEquivalentTo(2))
	e.g.Expect(first.rejections() + second.rejections() + third.rejections()).To(BeZero())
}

// Notifications are stored with the outcome: a restart loses none.
func TestNotificationsSurviveARestart(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, opts := startWebhooks(t, ca)
	rc := newReceiver(t, ca)
	rc.answerWith(failWith(http.StatusServiceUnavailable))
	e.approveOne(rc)
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(1))
	e.g.Expect(e.srv.Close()).To(Succeed())

	rc.answerWith(nil)
	e.open(opts)
	e.g.Consistently(func() []message { return rc.events() }, 300*time.Millisecond).Should(HaveLen(1), "the next attempt waits for its time")
	e.clock.Step(12 * time.Second)
	e.g.Eventually(func() int64 { return e.stats().Delivered }).Should(BeEquivalentTo(1))
	events := rc.events()
	e.g.Expect(events).To(HaveLen(2))
	e.g.Expect(events[1].Body).To(Equal(events[0].Body))
}

// Receivers must be at public addresses unless AllowedWebhookNetworks says otherwise.
func TestReceiverDestinations(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	rc := newReceiver(t, ca)
	e := start(t, func(o *reference.Options) { o.WebhookRootCAs = ca.Pool() })
	for _, url := range []string{
		rc.url(), "https://127.0.0.2/aap", "https://10.1.2.3/aap", "https://172.16.0.1/aap", "https://192.168.1.1/aap",
		"https://169.254.169.254/latest", "https://[::1]/aap", "https://[fd00:ec2::254]/aap", "https://[fe80::1]/aap",
		"https://0.0.0.0/aap", "https://[::]/aap", "https://[::ffff:127.0.0.1]/aap", "https://100.64.0.1/aap",
	} {
		got := e.expectError(e.provisionResponse("k", deliveryBody("webhook", url, uuid.NewString(), newSecret(e.g))),
			http.StatusBadRequest, provider.CodeInvalidWebhookURL)
		e.g.Expect(got.Param).To(Equal("delivery.url"), url)
	}
	e.g.Expect(rc.got("webhook.verification")).To(BeEmpty(), "nothing is sent to a refused address")
	e.g.Expect(e.stats().WebhookVerifications).To(BeZero())

	// Allowed networks let a local receiver in; others stay refused.
	allowed := start(t, func(o *reference.Options) {
		o.WebhookRootCAs = ca.Pool()
		o.AllowedWebhookNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	allowed.hooked("ok", rc)
	allowed.expectError(allowed.provisionResponse("k", deliveryBody("webhook", "https://[::1]/aap", uuid.NewString(), newSecret(e.g))),
		http.StatusBadRequest, provider.CodeInvalidWebhookURL)
}

// A notified request is kept until a day after its delivery ended, when that is later than its
// retention.
func TestANotifiedRequestIsKeptADayAfterItsDeliveryEnded(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	rc := newReceiver(t, ca)
	rc.answerWith(failWith(http.StatusInternalServerError))
	res := e.hooked("p", rc)
	req := e.createAs(res.Credential.Token, "r")
	_, err := e.srv.Decide(req.ID, provider.StatusDenied, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Eventually(e.failures()).Should(BeEquivalentTo(1))

	e.clock.Step(reference.MinRetention) // the next attempt finds the seven days over: delivery ends
	e.g.Eventually(func() int64 { return e.stats().DeliveriesAbandoned }).Should(BeEquivalentTo(1))
	e.clock.Step(time.Hour)
	e.g.Expect(e.srv.Purge()).To(BeZero(), "past its retention, but its delivery ended an hour ago")
	e.g.Expect(e.srv.Get(req.ID)).To(HaveField("Status", provider.StatusDenied))

	e.clock.Step(23*time.Hour + time.Minute)
	e.g.Eventually(func() error {
		_, err := e.srv.Purge()
		if err != nil {
			return err
		}
		_, err = e.srv.Get(req.ID)
		return err
	}).Should(MatchError(reference.ErrNotFound))
}

// Delivery faults (op deliver): a dropped attempt is sent nowhere and retried on the schedule, a
// duplicated one reaches the receiver twice with the same id and body, and a delayed one is
// overtaken by a later event. Rules of op any do not act on deliveries.
func TestDeliveryFaults(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	e, _ := startWebhooks(t, ca)
	rc := newReceiver(t, ca)
	g := e.g
	res := e.hooked("p-"+uuid.NewString(), rc)
	req := e.createAs(res.Credential.Token, "r-"+uuid.NewString())
	g.Expect(e.srv.Faults().Set(
		faults.Rule{Kind: faults.Error5xx, Count: 1},
		faults.Rule{Kind: faults.DropDelivery, Count: 1},
	)).To(Succeed())
	g.Expect(e.srv.Faults().Rules()[1].Op).To(Equal(faults.OpDeliver), "drop is a delivery fault")
	_, err := e.srv.Decide(req.ID, provider.StatusApproved, "", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(e.failures()).Should(BeEquivalentTo(1), "the dropped attempt")
	g.Expect(rc.events()).To(BeEmpty(), "a dropped attempt is not sent")
	g.Expect(e.srv.Faults().Rules()).To(HaveLen(1), "the 5xx rule of op any did not fire on the attempt")
	e.clock.Step(12 * time.Second)
	g.Eventually(func() int64 { return e.stats().Delivered }).Should(BeEquivalentTo(1), "retried")

	g.Expect(e.srv.Faults().Set(faults.Rule{Kind: faults.Duplicate, Count: 1})).To(Succeed())
	e.approveOne(rc)
	g.Eventually(func() []message { return rc.events() }).Should(HaveLen(3))
	twins := rc.events()[1:]
	g.Expect(twins[0].Header.Get("webhook-id")).To(Equal(twins[1].Header.Get("webhook-id")))
	g.Expect(twins[0].Body).To(Equal(twins[1].Body))
	g.Eventually(func() int64 { return e.stats().Delivered }).Should(BeEquivalentTo(2))

	g.Expect(e.srv.Faults().Set(faults.Rule{Op: faults.OpDeliver, Kind: faults.Delay, Delay: time.Second, Count: 1})).To(Succeed())
	e.approveOne(rc)
	e.approveOne(rc)
	g.Eventually(func() []message { return rc.events() }).Should(HaveLen(5))
	late := rc.events()
	g.Expect(late[3].Header.Get("webhook-id")).NotTo(Equal(late[4].Header.Get("webhook-id")))
	g.Expect(e.stats().Faults).To(And(HaveKeyWithValue(faults.DropDelivery, BeEquivalentTo(1)),
		HaveKeyWithValue(faults.Duplicate, BeEquivalentTo(1)), HaveKeyWithValue(faults.Delay, BeEquivalentTo(1))))

	for _, bad := range []faults.Rule{
		{Op: faults.OpGet, Kind: faults.DropDelivery, Count: 1},
		{Op: faults.OpDeliver, Kind: faults.Reset, Count: 1},
	} {
		g.Expect(e.srv.Faults().Set(bad)).NotTo(Succeed(), "%+v", bad)
	}
}
