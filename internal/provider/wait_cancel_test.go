package provider_test

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// --- wait -------------------------------------------------------------------------------------------------

func TestWaitReturnsEarlyOnDecision(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	type result struct {
		req     *provider.Request
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		req, err := c.Wait(ctx, refFor(t, created.ID), 30*time.Second)
		done <- result{req, err, time.Since(start)}
	}()
	g.Eventually(func() int64 { return srv.Stats().Waiting }).Should(BeEquivalentTo(1))
	g.Consistently(done, 100*time.Millisecond).ShouldNot(Receive(), "the long poll holds while the request is pending")

	decided, err := srv.Decide(created.ID, provider.StatusApproved, "ok by finance", nil)
	g.Expect(err).NotTo(HaveOccurred())

	var r result
	g.Eventually(done).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(r.elapsed).To(BeNumerically("<", 10*time.Second))
	g.Expect(r.req.ID).To(Equal(created.ID))
	g.Expect(r.req.Status).To(Equal(provider.StatusApproved))
	g.Expect(r.req.Decision).NotTo(BeNil())
	g.Expect(r.req.Decision.Status).To(Equal(provider.StatusApproved))
	g.Expect(r.req.Decision.Note).To(Equal("ok by finance"))
	g.Expect(r.req.Decision.ExpiresAt).NotTo(BeNil())
	g.Expect(*r.req.Decision.ExpiresAt).To(BeTemporally("==", *decided.Decision.ExpiresAt))
	g.Expect(*r.req.Decision.ExpiresAt).To(BeTemporally(">", time.Now()))
	g.Expect(srv.Stats().Gets).To(BeEquivalentTo(1))
}

func TestWaitShortPollReturnsPending(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	start := time.Now()
	req, err := c.Wait(ctx, refFor(t, created.ID), time.Second)
	elapsed := time.Since(start)

	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.ID).To(Equal(created.ID))
	g.Expect(req.Status).To(Equal(provider.StatusPending))
	g.Expect(req.Decision).To(BeNil())
	g.Expect(elapsed).To(BeNumerically(">=", 900*time.Millisecond), "the provider held the poll for the wait")
	g.Expect(elapsed).To(BeNumerically("<", 10*time.Second))
	g.Expect(srv.Stats().Gets).To(BeEquivalentTo(1))
}

func TestWaitAttemptTimeoutIsNotExpiry(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	f := newFailures()
	c := newClient(t, url, f.option)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	// The provider stalls the first poll far beyond the client's wait + 10s.
	g.Expect(srv.Faults().Add(faults.Rule{Op: faults.OpGet, Kind: faults.Delay, Delay: time.Minute, Count: 1})).To(Succeed())

	f.start = time.Now()
	req, err := c.Wait(ctx, refFor(t, created.ID), time.Second)
	elapsed := time.Since(f.start)

	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.ID).To(Equal(created.ID))
	g.Expect(req.Status).To(Equal(provider.StatusPending), "a client timeout is not an expiry")
	g.Expect(req.Decision).To(BeNil())

	failed := f.all()
	g.Expect(failed).To(HaveLen(1))
	g.Expect(failed[0].op).To(Equal("wait"))
	g.Expect(failed[0].code).To(Equal(provider.CodeTimeout))
	// The attempt was given wait + 10s, no less and not much more.
	g.Expect(failed[0].after).To(BeNumerically(">=", 11*time.Second))
	g.Expect(failed[0].after).To(BeNumerically("<", 15*time.Second))
	g.Expect(elapsed).To(BeNumerically(">=", 12*time.Second), "the retry polled for its wait too")

	g.Expect(srv.Stats().Gets).To(BeEquivalentTo(2))
	g.Eventually(func() int64 { return srv.Stats().Responses[faults.OpGet][0] }).Should(BeEquivalentTo(1))
	current, err := srv.Get(created.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(current.Status).To(Equal(provider.StatusPending))
}

func TestWaitRetriesReset(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = srv.Decide(created.ID, provider.StatusDenied, "not today", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.Faults().Add(faults.Rule{Op: faults.OpGet, Kind: faults.Reset, Count: 1})).To(Succeed())
	srv.ResetStats()

	req, err := c.Wait(ctx, refFor(t, created.ID), 30*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusDenied))
	g.Expect(req.Decision.Note).To(Equal("not today"))
	st := srv.Stats()
	g.Expect(st.Faults[faults.Reset]).To(BeEquivalentTo(1))
	g.Expect(st.Responses[faults.OpGet]).To(Equal(map[int]int64{0: 1, http.StatusOK: 1}))
}

func TestCancelPendingThenAgain(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	created, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	for i := range 2 {
		req, err := c.Cancel(ctx, refFor(t, created.ID))
		g.Expect(err).NotTo(HaveOccurred(), "cancel #%d", i+1)
		g.Expect(req.ID).To(Equal(created.ID))
		g.Expect(req.Status).To(Equal(provider.StatusCancelled))
		g.Expect(req.Decision).NotTo(BeNil())
		g.Expect(req.Decision.Status).To(Equal(provider.StatusCancelled))
	}
	st := srv.Stats()
	g.Expect(st.Responses[faults.OpCancel]).To(Equal(map[int]int64{http.StatusOK: 2}), "DELETE, answered 200 both times")
	g.Expect(st.Cancellations).To(BeEquivalentTo(1))
	g.Expect(st.Gets).To(BeZero())
}

// A cancel of a request that is already terminal gets 409 already_terminal; the client reads the
// request and returns it, so that the caller applies the decision it holds.
func TestCancelTerminalReturnsRequest(t *testing.T) {
	for _, status := range []string{provider.StatusApproved, provider.StatusDenied, provider.StatusExpired} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			clk := clocktesting.NewFakeClock(time.Now())
			srv, err := reference.New(reference.Options{DBPath: filepath.Join(t.TempDir(), "provider.db"), Credential: credential, Clock: clk, Faults: faults.New(0)})
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { NewWithT(t).Expect(srv.Close()).To(Succeed()) })
			url, err := srv.Start("127.0.0.1:0")
			g.Expect(err).NotTo(HaveOccurred())
			c := newClient(t, url)
			ctx := testContext(t)
			created, err := c.Submit(ctx, submission("toolcall-uid-1"))
			g.Expect(err).NotTo(HaveOccurred())
			note := ""
			if status == provider.StatusExpired {
				clk.Step(31 * time.Minute)
				g.Eventually(func() string { r, _ := srv.Get(created.ID); return r.Status }).Should(Equal(provider.StatusExpired))
			} else {
				note = "decided first"
				_, err := srv.Decide(created.ID, status, note, nil)
				g.Expect(err).NotTo(HaveOccurred())
			}
			decided, err := srv.Get(created.ID)
			g.Expect(err).NotTo(HaveOccurred())

			req, err := c.Cancel(ctx, refFor(t, created.ID))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.ID).To(Equal(created.ID))
			g.Expect(req.Status).To(Equal(status))
			g.Expect(req.Decision.Status).To(Equal(status))
			g.Expect(req.Decision.Note).To(Equal(note))
			g.Expect(req.Decision.ExpiresAt == nil).To(Equal(decided.Decision.ExpiresAt == nil))
			st := srv.Stats()
			g.Expect(st.Responses[faults.OpCancel]).To(Equal(map[int]int64{http.StatusConflict: 1}), "one 409, not retried")
			g.Expect(st.Responses[faults.OpGet]).To(Equal(map[int]int64{http.StatusOK: 1}), "then one read")
			g.Expect(st.Cancellations).To(BeZero())
		})
	}
}

// A human decides while the DELETE is on its way: the decision wins, and the client returns it.
func TestCancelRacingADecisionReturnsIt(t *testing.T) {
	for _, decision := range []string{provider.StatusApproved, provider.StatusDenied} {
		t.Run(decision, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			c := newClient(t, url)
			ctx := testContext(t)
			created, err := c.Submit(ctx, submission("toolcall-uid-1"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(srv.Faults().Add(faults.Rule{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Decision: decision, Count: 1})).To(Succeed())

			req, err := c.Cancel(ctx, refFor(t, created.ID))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.Status).To(Equal(decision))
			if decision == provider.StatusApproved {
				g.Expect(req.Decision.ExpiresAt).NotTo(BeNil())
			}
			st := srv.Stats()
			g.Expect(st.Faults[faults.DecideBeforeCancel]).To(BeEquivalentTo(1))
			g.Expect(st.Responses[faults.OpCancel]).To(Equal(map[int]int64{http.StatusConflict: 1}))
			g.Expect(st.Cancellations).To(BeZero())
		})
	}
}

// A 409 to a DELETE while the request is still pending is no decision to apply: an error, and the
// request is not reported cancelled.
func TestCancelConflictOnAPendingRequestIsAnError(t *testing.T) {
	g := newG(t)
	srv := startCanned(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			respondError(t, w, http.StatusConflict, provider.CodeAlreadyTerminal, "the request is already decided")
			return
		}
		respond(w, http.StatusOK, provider.ContentTypeJSON, requestJSON(t, nil))
	})
	c := newClient(t, srv.url)
	req, err := c.Cancel(testContext(t), refFor(t, requestID))
	g.Expect(req).To(BeNil())
	pe := providerError(g, err)
	g.Expect(pe.Op).To(Equal("cancel"))
	g.Expect(pe.Code).To(Equal(provider.CodeAlreadyTerminal))
	g.Expect(pe.StatusCode).To(Equal(http.StatusConflict))
	g.Expect(pe.Detail).To(ContainSubstring("still pending, so it was not cancelled"))
	g.Expect(provider.CannotCancel(err)).To(BeFalse())
	g.Expect(provider.IsUntrusted(err)).To(BeFalse())
	g.Expect(srv.hits.Load()).To(BeEquivalentTo(2), "the DELETE, then one read")
}
