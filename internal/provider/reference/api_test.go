package reference_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
)

func TestSubmitCreatesPendingRequest(t *testing.T) {
	e := start(t)
	r := e.submit("key-1", refund())

	req := e.expectRequest(r, http.StatusCreated)
	e.g.Expect(uuid.Parse(r.header.Get(provider.HeaderRequestID))).Error().NotTo(HaveOccurred())
	e.g.Expect(r.header.Get(provider.HeaderIdempotentReplayed)).To(BeEmpty())
	e.g.Expect(uuid.Parse(req.ID)).Error().NotTo(HaveOccurred())
	e.g.Expect(req.Tool).To(Equal("issue_refund"))
	e.g.Expect(req.Arguments).To(MatchJSON(refund().Arguments))
	e.g.Expect(req.Timeout).To(Equal("30m"))
	e.g.Expect(req.Status).To(Equal(provider.StatusPending))
	e.g.Expect(req.CreatedAt).To(BeTemporally("==", t0))
	e.g.Expect(req.DeadlineAt).To(BeTemporally("==", t0.Add(30*time.Minute)))
	e.g.Expect(req.Decision).To(BeNil())
	canonical := sha256.Sum256([]byte(`{"amount":4900,"currency":"GBP","payment_id":"payment_123"}`))
	e.g.Expect(req.ArgumentsSHA256).To(Equal(hex.EncodeToString(canonical[:])))
	e.g.Expect(e.srv.Get(req.ID)).To(Equal(req))
	e.g.Expect(e.stats().Submits).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
}

func TestSubmitReplaysSameKeyAndBody(t *testing.T) {
	e := start(t)
	first := e.create("key-1")
	reordered := refund()
	reordered.Arguments = json.RawMessage(`{"currency":"GBP","amount":4900.0,"payment_id":"payment_123"}`)

	r := e.submit("key-1", reordered)
	replay := e.expectRequest(r, http.StatusOK)
	e.g.Expect(r.header.Get(provider.HeaderIdempotentReplayed)).To(Equal("true"))
	e.g.Expect(replay).To(Equal(first))

	_, err := e.srv.Decide(first.ID, provider.StatusApproved, "confirmed", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	current := e.expectRequest(e.submit("key-1", refund()), http.StatusOK)
	e.g.Expect(current.ID).To(Equal(first.ID))
	e.g.Expect(current.Status).To(Equal(provider.StatusApproved), "a replay returns the current state")

	e.g.Expect(e.srv.List("")).To(HaveLen(1))
	s := e.stats()
	e.g.Expect(s.Creates).To(BeEquivalentTo(1))
	e.g.Expect(s.Replays).To(BeEquivalentTo(2))
	e.g.Expect(s.Responses[reference.OpSubmit]).To(Equal(map[int]int64{201: 1, 200: 2}))
}

func TestSubmitRefusesReusedKeyWithDifferentBody(t *testing.T) {
	for name, change := range map[string]func(*provider.SubmitBody){
		"tool": func(b *provider.SubmitBody) { b.Tool = "issue_voucher" },
		"arguments": func(b *provider.SubmitBody) {
			b.Arguments = json.RawMessage(`{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`)
		},
		"timeout": func(b *provider.SubmitBody) { b.Timeout = "31m" },
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t)
			e.create("key-1")
			body := refund()
			change(&body)
			e.expectProblem(e.submit("key-1", body), http.StatusUnprocessableEntity, provider.CodeIdempotencyKeyReused)
			e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
		})
	}
}

func TestSubmitValidation(t *testing.T) {
	withBody := func(change func(*provider.SubmitBody)) any {
		b := refund()
		change(&b)
		return b
	}
	cases := []struct {
		name   string
		key    string
		body   any
		status int
		code   string
	}{
		{"missing key", "", refund(), 400, provider.CodeIdempotencyKeyMissing},
		{"malformed JSON", "k", []byte(`{"tool":`), 400, provider.CodeInvalidRequest},
		{"trailing data", "k", []byte(`{"tool":"t","arguments":{},"timeout":"1m"} {}`), 400, provider.CodeInvalidRequest},
		{"empty tool", "k", withBody(func(b *provider.SubmitBody) { b.Tool = "" }), 400, provider.CodeInvalidRequest},
		{"arguments missing", "k", map[string]string{"tool": "t", "timeout": "1m"}, 400, provider.CodeInvalidRequest},
		{"arguments null", "k", withBody(func(b *provider.SubmitBody) { b.Arguments = json.RawMessage(`null`) }), 400, provider.CodeInvalidRequest},
		{"arguments array", "k", withBody(func(b *provider.SubmitBody) { b.Arguments = json.RawMessage(`[1]`) }), 400, provider.CodeInvalidRequest},
		{"arguments string", "k", withBody(func(b *provider.SubmitBody) { b.Arguments = json.RawMessage(`"{}"`) }), 400, provider.CodeInvalidRequest},
		{"timeout missing", "k", withBody(func(b *provider.SubmitBody) { b.Timeout = "" }), 400, provider.CodeInvalidTimeout},
		{"timeout unparsable", "k", withBody(func(b *provider.SubmitBody) { b.Timeout = "soon" }), 400, provider.CodeInvalidTimeout},
		{"timeout below minimum", "k", withBody(func(b *provider.SubmitBody) { b.Timeout = "500ms" }), 400, provider.CodeInvalidTimeout},
		{"timeout above maximum", "k", withBody(func(b *provider.SubmitBody) { b.Timeout = "24h1s" }), 400, provider.CodeInvalidTimeout},
		{"body too large", "k", withBody(func(b *provider.SubmitBody) {
			b.Arguments = json.RawMessage(`{"blob":"` + strings.Repeat("x", int(provider.MaxRequestBodyBytes)) + `"}`)
		}), 413, provider.CodeInvalidRequest},
		{"key too long", strings.Repeat("k", 256), refund(), 400, provider.CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t)
			e.expectProblem(e.submit(tc.key, tc.body), tc.status, tc.code)
			e.g.Expect(e.stats().Creates).To(BeZero())
		})
	}
}

func TestSubmitTimeoutBoundsAreInclusive(t *testing.T) {
	e := start(t)
	for _, timeout := range []string{"1s", "24h"} {
		body := refund()
		body.Timeout = timeout
		req := e.expectRequest(e.submit("key-"+timeout, body), http.StatusCreated)
		e.g.Expect(req.Timeout).To(Equal(timeout))
	}
}

func TestAuthentication(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	paths := []struct{ method, path string }{
		{http.MethodPost, "/v1/requests"},
		{http.MethodGet, "/v1/requests/" + id},
		{http.MethodPost, "/v1/requests/" + id + "/cancel"},
		{http.MethodGet, "/admin/v1/requests"},
		{http.MethodPost, "/admin/v1/requests/" + id + "/decide"},
		{http.MethodPost, "/admin/v1/faults"},
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Basic " + credential, "Bearer " + credential + "x", credential} {
		for _, p := range paths {
			req := e.request(p.method, p.path, refund())
			req.Header.Set(provider.HeaderIdempotencyKey, "key-2")
			req.Header.Set("Authorization", auth)
			r := e.do(req)
			e.expectProblem(r, http.StatusUnauthorized, provider.CodeUnauthenticated)
			e.g.Expect(r.header.Get("WWW-Authenticate")).To(Equal("Bearer"))
		}
	}
	lowercase := e.request(http.MethodGet, "/v1/requests/"+id, nil)
	lowercase.Header.Set("Authorization", "bearer "+credential)
	e.expectRequest(e.do(lowercase), http.StatusOK)

	health := e.request(http.MethodGet, "/healthz", nil)
	health.Header.Del("Authorization")
	e.g.Expect(e.do(health).status).To(Equal(http.StatusOK))

	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusPending))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Responses[reference.OpSubmit][http.StatusUnauthorized]).To(BeEquivalentTo(7))
}

func TestAdminCredentialIsSeparateWhenSet(t *testing.T) {
	const admin = "admin-credential"
	e := start(t, func(o *reference.Options) { o.AdminCredential = admin })

	e.expectProblem(e.do(e.request(http.MethodGet, "/admin/v1/requests", nil)), http.StatusUnauthorized, provider.CodeUnauthenticated)
	list := e.request(http.MethodGet, "/admin/v1/requests", nil)
	list.Header.Set("Authorization", "Bearer "+admin)
	e.g.Expect(e.do(list).status).To(Equal(http.StatusOK))

	submit := e.submitRequest("key-1", refund())
	submit.Header.Set("Authorization", "Bearer "+admin)
	e.expectProblem(e.do(submit), http.StatusUnauthorized, provider.CodeUnauthenticated)
}

func TestNew(t *testing.T) {
	g := NewWithT(t)
	_, err := reference.New(reference.Options{})
	g.Expect(err).To(MatchError(ContainSubstring("credential is required")))
	_, err = reference.New(reference.Options{Credential: "c", MinTimeout: time.Hour, MaxTimeout: time.Minute})
	g.Expect(err).To(MatchError(ContainSubstring("exceeds MaxTimeout")))

	s, err := reference.New(reference.Options{Credential: "c"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.Start("127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.Start("127.0.0.1:0")
	g.Expect(err).To(MatchError(ContainSubstring("already started")))
	g.Expect(s.Close()).To(Succeed())
	g.Expect(s.Close()).To(Succeed())
}

func TestUnknownRequest(t *testing.T) {
	e := start(t)
	e.expectProblem(e.get("no-such-id", ""), http.StatusNotFound, provider.CodeNotFound)
	e.expectProblem(e.get(uuid.NewString(), "?wait=30s"), http.StatusNotFound, provider.CodeNotFound)
	e.expectProblem(e.cancel(uuid.NewString()), http.StatusNotFound, provider.CodeNotFound)
	decide := e.request(http.MethodPost, "/admin/v1/requests/"+uuid.NewString()+"/decide", map[string]string{"status": "approved"})
	e.expectProblem(e.do(decide), http.StatusNotFound, provider.CodeNotFound)

	_, err := e.srv.Get("no-such-id")
	e.g.Expect(err).To(MatchError(reference.ErrNotFound))
}

func TestUnknownEndpointsAndMethods(t *testing.T) {
	e := start(t)
	e.expectProblem(e.do(e.request(http.MethodGet, "/v2/requests", nil)), http.StatusNotFound, provider.CodeNotFound)
	e.expectProblem(e.do(e.request(http.MethodDelete, "/v1/requests/x", nil)), http.StatusMethodNotAllowed, provider.CodeInvalidRequest)
	e.expectProblem(e.do(e.request(http.MethodGet, "/v1/requests", nil)), http.StatusMethodNotAllowed, provider.CodeInvalidRequest)
}

func TestGetReturnsCurrentRequest(t *testing.T) {
	e := start(t)
	created := e.create("key-1")
	for _, query := range []string{"", "?wait=0s", "?wait=20ms"} {
		r := e.get(created.ID, query)
		e.g.Expect(e.expectRequest(r, http.StatusOK)).To(Equal(created))
		e.g.Expect(r.header.Get(provider.HeaderRequestID)).NotTo(BeEmpty())
	}
	e.g.Expect(e.srv.Get(created.ID)).To(Equal(created), "polls change nothing")
}

func TestGetRejectsInvalidWait(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	for _, wait := range []string{"abc", "-1s", "30"} {
		e.expectProblem(e.get(id, "?wait="+wait), http.StatusBadRequest, provider.CodeInvalidRequest)
	}
}

func TestGetReturnsTerminalRequestAtOnce(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	_, err := e.srv.Decide(id, provider.StatusDenied, "no", nil)
	e.g.Expect(err).NotTo(HaveOccurred())

	begin := time.Now()
	req := e.expectRequest(e.get(id, "?wait=10m"), http.StatusOK) // capped, and not waited on anyway
	e.g.Expect(time.Since(begin)).To(BeNumerically("<", 5*time.Second))
	e.g.Expect(req.Status).To(Equal(provider.StatusDenied))
}

// poll runs a long poll in the background; its result arrives on the returned channel.
func (e *env) poll(ctx context.Context, id, wait string) <-chan response {
	done := make(chan response, 1)
	req := e.request(http.MethodGet, "/v1/requests/"+id+"?wait="+wait, nil).WithContext(ctx)
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

func TestLongPollWithShortWaitReturnsPending(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	var r response
	e.g.Eventually(e.poll(context.Background(), id, "50ms")).Should(Receive(&r))
	e.g.Expect(e.expectRequest(r, http.StatusOK).Status).To(Equal(provider.StatusPending))
}

func TestLongPollEndsWhenClientGoesAway(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	ctx, cancel := context.WithCancel(context.Background())
	polled := e.poll(ctx, id, "55s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))

	cancel()
	e.g.Eventually(polled).Should(Receive())
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeZero())
	e.g.Eventually(func() int64 { return e.stats().Responses[reference.OpGet][0] }).Should(BeEquivalentTo(1))
}

func TestLongPollReturnsWhenServerCloses(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	polled := e.poll(context.Background(), id, "55s")
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
	e.g.Expect(err).To(MatchError(reference.ErrAlreadyDecided))
	e.g.Expect(e.stats().Expiries).To(BeEquivalentTo(1))
}

func TestCancelPendingRequest(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.clock.Step(time.Minute)

	first := e.expectRequest(e.cancel(id), http.StatusOK)
	e.g.Expect(first.Status).To(Equal(provider.StatusCancelled))
	e.g.Expect(first.Decision).To(Equal(&provider.Decision{Status: provider.StatusCancelled, DecidedAt: ptr(t0.Add(time.Minute))}))

	e.clock.Step(time.Minute)
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK)).To(Equal(first))
	e.g.Expect(e.stats().Cancellations).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Cancels).To(BeEquivalentTo(2))
}

func TestCancelDecidedRequestConflicts(t *testing.T) {
	for name, settle := range map[string]func(e *env, id string){
		"approved": func(e *env, id string) { _, _ = e.srv.Decide(id, provider.StatusApproved, "", nil) },
		"denied":   func(e *env, id string) { _, _ = e.srv.Decide(id, provider.StatusDenied, "", nil) },
		"expired":  func(e *env, _ string) { e.clock.Step(30 * time.Minute) },
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t)
			id := e.create("key-1").ID
			settle(e, id)

			p := e.expectProblem(e.cancel(id), http.StatusConflict, provider.CodeAlreadyDecided)
			e.g.Expect(p.Request).NotTo(BeNil())
			e.g.Expect(p.Request.ID).To(Equal(id))
			e.g.Expect(p.Request.Status).To(Equal(name))
			e.g.Expect(e.srv.Get(id)).To(Equal(*p.Request))
		})
	}
}

func TestDecideThroughAdminAPI(t *testing.T) {
	e := start(t)
	decide := func(id string, body any) response {
		return e.do(e.request(http.MethodPost, "/admin/v1/requests/"+id+"/decide", body))
	}
	e.clock.Step(time.Minute)
	now := t0.Add(time.Minute)

	valid := e.create("valid-for").ID
	req := e.expectRequest(decide(valid, map[string]string{"status": "approved", "note": "ok", "valid_for": "10m"}), http.StatusOK)
	e.g.Expect(req.Decision).To(Equal(&provider.Decision{
		Status: provider.StatusApproved, Note: "ok (approved by admin)", DecidedAt: ptr(now), ExpiresAt: ptr(now.Add(10 * time.Minute)),
	}))
	e.expectProblem(decide(valid, map[string]string{"status": "denied"}), http.StatusConflict, provider.CodeAlreadyDecided)

	past := e.create("expires-at").ID
	expiresAt := now.Add(-time.Second)
	req = e.expectRequest(decide(past, map[string]any{"status": "approved", "valid_for": "10m", "expires_at": expiresAt}), http.StatusOK)
	e.g.Expect(req.Decision.ExpiresAt).To(Equal(&expiresAt))

	denied := e.create("denied").ID
	req = e.expectRequest(decide(denied, map[string]string{"status": "denied", "note": "not a duplicate"}), http.StatusOK)
	e.g.Expect(req.Decision).To(Equal(&provider.Decision{Status: provider.StatusDenied, Note: "not a duplicate (denied by admin)", DecidedAt: ptr(now)}))

	bad := e.create("bad").ID
	for _, body := range []any{
		map[string]string{"status": "cancelled"},
		map[string]string{"status": "approved", "valid_for": "soon"},
		map[string]string{"status": "approved", "valid_for": "-1m"},
		"not an object",
	} {
		e.expectProblem(decide(bad, body), http.StatusBadRequest, provider.CodeInvalidRequest)
	}
	e.g.Expect(e.srv.Get(bad)).To(HaveField("Status", provider.StatusPending))
	_, err := e.srv.Decide(bad, provider.StatusExpired, "", nil)
	e.g.Expect(err).To(MatchError(reference.ErrInvalidDecision))
}

func TestListNewestFirst(t *testing.T) {
	e := start(t)
	first, second, third := e.create("a").ID, e.create("b").ID, e.create("c").ID
	_, err := e.srv.Decide(second, provider.StatusDenied, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())

	list := func(query string) []string {
		r := e.do(e.request(http.MethodGet, "/admin/v1/requests"+query, nil))
		e.g.Expect(r.status).To(Equal(http.StatusOK))
		var reqs []provider.Request
		e.g.Expect(json.Unmarshal(r.body, &reqs)).To(Succeed())
		ids := make([]string, 0, len(reqs))
		for _, req := range reqs {
			ids = append(ids, req.ID)
		}
		return ids
	}
	e.g.Expect(list("?status=pending")).To(Equal([]string{third, first}))
	e.g.Expect(list("")).To(Equal([]string{third, second, first}))
	e.g.Expect(list("?status=denied")).To(Equal([]string{second}))
	e.expectProblem(e.do(e.request(http.MethodGet, "/admin/v1/requests?status=maybe", nil)), http.StatusBadRequest, provider.CodeInvalidRequest)
}

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
	for r := range results {
		switch r.status {
		case http.StatusCreated, http.StatusOK:
			ids[e.expectRequest(r, r.status).ID] = true
		default:
			e.expectProblem(r, http.StatusConflict, provider.CodeIdempotencyInFlight)
			e.g.Expect(r.header.Get("Retry-After")).To(Equal("1"))
		}
	}
	e.g.Expect(ids).To(HaveLen(1))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
	e.g.Expect(e.srv.List("")).To(HaveLen(1))
}

func TestSubmissionInFlightConflicts(t *testing.T) {
	e := start(t)
	e.g.Expect(e.srv.Faults().Set(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultDelay, Delay: time.Minute, Count: 1})).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	delayed := make(chan error, 1)
	go func() {
		_, err := e.try(e.submitRequest("key-1", refund()).WithContext(ctx))
		delayed <- err
	}()
	e.g.Eventually(func() int64 { return e.stats().InFlight }).Should(BeEquivalentTo(1))

	r := e.submit("key-1", refund())
	e.expectProblem(r, http.StatusConflict, provider.CodeIdempotencyInFlight)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("1"))
	e.expectRequest(e.submit("key-2", refund()), http.StatusCreated)

	cancel()
	e.g.Eventually(delayed).Should(Receive(MatchError(context.Canceled)))
	e.g.Eventually(func() int64 { return e.stats().InFlight }).Should(BeZero())
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1), "an abandoned delayed submission creates nothing")
	e.expectRequest(e.submit("key-1", refund()), http.StatusCreated)
}

// Keys maps each Idempotency-Key to the one request it created; a replay adds nothing.
func TestKeysMapEachKeyToItsRequest(t *testing.T) {
	e := start(t)
	a := e.create("toolcall-uid-a")
	b := e.create("toolcall-uid-b")
	e.expectRequest(e.submit("toolcall-uid-a", refund()), http.StatusOK)
	keys, err := e.srv.Keys()
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(keys).To(Equal(map[string]string{"toolcall-uid-a": a.ID, "toolcall-uid-b": b.ID}))
}

// Stats count accepted connections, so a client's connection reuse can be measured.
func TestStatsCountConnections(t *testing.T) {
	e := start(t) // its client opens a connection per request
	for i := range 3 {
		e.submit("key-"+strconv.Itoa(i), refund())
	}
	e.g.Expect(e.stats().Connections).To(BeEquivalentTo(3))

	e.client = &http.Client{Transport: &http.Transport{}} // keeps its connection alive
	for i := range 3 {
		e.submit("reuse-"+strconv.Itoa(i), refund())
	}
	e.g.Expect(e.stats().Connections).To(BeEquivalentTo(4))
}
