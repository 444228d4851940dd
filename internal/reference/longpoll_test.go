package reference_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// poll runs a long poll in the background; its result arrives on the returned channel.
func (e *env) poll(ctx context.Context, id, wait string) <-chan response {
	return e.pollAs(ctx, credential, id, wait)
}

func (e *env) pollAs(ctx context.Context, token, id, wait string) <-chan response {
	done := make(chan response, 1)
	req := e.requestAs(token, http.MethodGet, "/v1/requests/"+id+"?wait="+wait, nil).WithContext(ctx)
	go func() {
		r, _ := e.try(req)
		done <- r
	}()
	return done
}

func TestLongPollReturnsEarlyOnDecision(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	polled := e.poll(context.Background(), id, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))

	begin := time.Now()
	_, err := e.srv.Decide(id, provider.StatusApproved, "confirmed", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	var r response
	e.g.Eventually(polled).Should(Receive(&r))
	e.g.Expect(time.Since(begin)).To(BeNumerically("<", 10*time.Second))

	req := e.expectRequest(r, http.StatusOK)
	e.g.Expect(req.Status).To(Equal(provider.StatusApproved))
	e.g.Expect(req.Decision).To(Equal(&provider.Decision{
		Status: provider.StatusApproved, Note: "confirmed", DecidedAt: ptr(t0), ExpiresAt: ptr(t0.Add(5 * time.Minute)),
	}))
	e.g.Expect(e.stats().Waiting).To(BeZero())
}

func TestLongPollsAllWakeOnCancel(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	var polls []<-chan response
	for range 3 {
		polls = append(polls, e.poll(context.Background(), id, "30s"))
	}
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(3))

	e.expectRequest(e.cancel(id), http.StatusOK)
	for _, polled := range polls {
		var r response
		e.g.Eventually(polled).Should(Receive(&r))
		e.g.Expect(e.expectRequest(r, http.StatusOK).Status).To(Equal(provider.StatusCancelled))
	}
}

// The wait ends with the request still pending: 200 with status pending. Waits are capped (here at
// 1s, by Options.MaxWait, which AAP's 30s bounds): a longer wait is not refused.
func TestLongPollWaitEndsPendingAndIsCapped(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.MaxWait = time.Second })
	id := e.create("key-1").ID
	for _, wait := range []string{"1s", "10m"} {
		begin := time.Now()
		var r response
		e.g.Eventually(e.poll(context.Background(), id, wait)).Should(Receive(&r))
		e.g.Expect(e.expectRequest(r, http.StatusOK).Status).To(Equal(provider.StatusPending))
		e.g.Expect(time.Since(begin)).To(BeNumerically(">=", 900*time.Millisecond), wait)
	}
}

func TestLongPollEndsWhenClientGoesAway(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	ctx, cancel := context.WithCancel(context.Background())
	polled := e.poll(ctx, id, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))

	cancel()
	e.g.Eventually(polled).Should(Receive())
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeZero())
	e.g.Eventually(func() int64 { return e.stats().Responses[faults.OpGet][0] }).Should(BeEquivalentTo(1))
}

func TestLongPollReturnsWhenServerCloses(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	polled := e.poll(context.Background(), id, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))

	e.g.Expect(e.srv.Close()).To(Succeed())
	var r response
	e.g.Eventually(polled).Should(Receive(&r))
	e.g.Expect(e.expectRequest(r, http.StatusOK).Status).To(Equal(provider.StatusPending))
}

func TestDeadlineExpiryWakesLongPoll(t *testing.T) {
	e := start(t)
	body := refund()
	body.Timeout = "1m"
	created := e.expectRequest(e.submit("key-1", body), http.StatusCreated)
	polled := e.poll(context.Background(), created.ID, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))

	e.clock.Step(59 * time.Second)
	e.g.Expect(e.expectRequest(e.get(created.ID, ""), http.StatusOK).Status).To(Equal(provider.StatusPending))
	e.clock.Step(time.Second)

	var r response
	e.g.Eventually(polled).Should(Receive(&r))
	req := e.expectRequest(r, http.StatusOK)
	e.g.Expect(req.Status).To(Equal(provider.StatusExpired))
	e.g.Expect(req.Decision).To(Equal(&provider.Decision{Status: provider.StatusExpired, DecidedAt: ptr(created.DeadlineAt)}))
	e.g.Expect(req.DeadlineAt).To(Equal(created.DeadlineAt))
	e.g.Expect(e.stats().Expiries).To(BeEquivalentTo(1))
}

func TestDeadlineExpiryOnRead(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.clock.Step(time.Hour)

	req := e.expectRequest(e.get(id, ""), http.StatusOK)
	e.g.Expect(req.Status).To(Equal(provider.StatusExpired))
	e.g.Expect(req.Decision.DecidedAt).To(Equal(ptr(t0.Add(30 * time.Minute))))
	e.g.Expect(e.srv.List(provider.StatusPending)).To(BeEmpty())
	_, err := e.srv.Decide(id, provider.StatusApproved, "too late", nil)
	e.g.Expect(err).To(MatchError(reference.ErrAlreadyTerminal))
	e.g.Expect(e.stats().Expiries).To(BeEquivalentTo(1))
}

// Concurrent submissions with one key create one request: the first creates it (201), the others
// wait for it and replay it (200).
func TestConcurrentSubmissionsWithOneKeyCreateOneRequest(t *testing.T) {
	e := start(t)
	const n = 16
	results := make(chan response, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { results <- e.submit("key-1", refund()) })
	}
	wg.Wait()
	close(results)

	ids := map[string]bool{}
	statuses := map[int]int{}
	for r := range results {
		statuses[r.status]++
		ids[e.expectRequest(r, r.status).ID] = true
	}
	e.g.Expect(statuses).To(Equal(map[int]int{http.StatusCreated: 1, http.StatusOK: n - 1}))
	e.g.Expect(ids).To(HaveLen(1))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
	e.g.Expect(e.srv.List("")).To(HaveLen(1))
}

// A submission whose key another submission holds waits for it; when that one is abandoned before it
// committed, the waiting one creates the request.
func TestSubmissionsWithOneKeyWaitForEachOther(t *testing.T) {
	e := start(t)
	e.g.Expect(e.srv.Faults().Set(faults.Rule{Op: faults.OpSubmit, Kind: faults.Delay, Delay: time.Minute, Count: 1})).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	delayed := make(chan error, 1)
	go func() {
		_, err := e.try(e.submitRequest("key-1", refund()).WithContext(ctx))
		delayed <- err
	}()
	e.g.Eventually(func() int64 { return e.stats().InFlight }).Should(BeEquivalentTo(1))

	second := make(chan response, 1)
	go func() { second <- e.submit("key-1", refund()) }()
	e.g.Eventually(func() int64 { return e.stats().KeyWaits }).Should(BeEquivalentTo(1))
	e.expectRequest(e.submit("key-2", refund()), http.StatusCreated) // another key does not wait
	e.g.Expect(second).NotTo(Receive())

	cancel()
	e.g.Eventually(delayed).Should(Receive(MatchError(context.Canceled)))
	var r response
	e.g.Eventually(second).Should(Receive(&r))
	e.expectRequest(r, http.StatusCreated)
	e.g.Eventually(func() int64 { return e.stats().InFlight }).Should(BeZero())
	e.g.Expect(e.stats().KeyWaits).To(BeZero())
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(2), "the abandoned delayed submission created nothing")
}
