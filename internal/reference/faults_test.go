package reference_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

func (e *env) setFaults(rules ...faults.Rule) {
	e.t.Helper()
	e.g.Expect(e.srv.Faults().Set(rules...)).To(Succeed())
}

// A 500 or 503 is an ErrorResponse of its type; another 5xx is plain text, as a proxy in front of a
// provider would answer.
func TestFaultError5xx(t *testing.T) {
	e := start(t)
	e.setFaults(faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Status: 502, Count: 1})

	r := e.submit("key-1", refund())
	e.g.Expect(r.status).To(Equal(http.StatusBadGateway))
	e.g.Expect(r.header.Get("Content-Type")).To(HavePrefix("text/plain"))
	e.g.Expect(string(r.body)).To(Equal("502 Bad Gateway\n"))
	e.g.Expect(e.srv.List("")).To(BeEmpty(), "the operation did not happen")
	e.g.Expect(e.srv.Faults().Rules()).To(BeEmpty(), "the rule's count is used up")
	e.expectRequest(e.submit("key-1", refund()), http.StatusCreated)

	e.setFaults(faults.Rule{Kind: faults.Error5xx, Count: 1, RetryAfter: 2 * time.Second})
	r = e.get(uuid.NewString(), "")
	e.expectError(r, http.StatusServiceUnavailable, provider.CodeUnavailable)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("2"))
	e.setFaults(faults.Rule{Kind: faults.Error5xx, Status: 500, Count: 1})
	e.expectError(e.get(uuid.NewString(), ""), http.StatusInternalServerError, provider.CodeInternal)

	s := e.stats()
	e.g.Expect(s.FaultsFired).To(BeEquivalentTo(3))
	e.g.Expect(s.Faults).To(Equal(map[faults.Kind]int64{faults.Error5xx: 3}))
	e.g.Expect(s.Creates).To(BeEquivalentTo(1))
}

func TestFaultRateLimit(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.setFaults(faults.Rule{Op: faults.OpGet, Kind: faults.RateLimit, RetryAfter: 3 * time.Second, Count: 1})

	r := e.get(id, "")
	e.expectError(r, http.StatusTooManyRequests, provider.CodeRateLimited)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("3"))
	e.expectRequest(e.get(id, ""), http.StatusOK)
	e.g.Expect(e.stats().Responses[faults.OpGet]).To(Equal(map[int]int64{429: 1, 200: 1}))
}

func TestFaultDropAfterCommitOnSubmit(t *testing.T) {
	e := start(t)
	e.setFaults(faults.Rule{Op: faults.OpSubmit, Kind: faults.DropAfterCommit, Count: 1})

	_, err := e.try(e.submitRequest("key-1", refund()))
	e.g.Expect(err).To(MatchError(io.EOF))
	pending, err := e.srv.List(provider.StatusPending)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(pending).To(HaveLen(1), "the request was created although no response arrived")

	r := e.submit("key-1", refund())
	e.g.Expect(e.expectRequest(r, http.StatusOK).ID).To(Equal(pending[0].ID), "the replay recovers it")
	s := e.stats()
	e.g.Expect(s.Creates).To(BeEquivalentTo(1))
	e.g.Expect(s.Replays).To(BeEquivalentTo(1))
	e.g.Expect(s.Responses[faults.OpSubmit]).To(Equal(map[int]int64{0: 1, 200: 1}))
}

// Every fault kind acts on DELETE /v1/requests/{id} too.
func TestFaultsOnCancel(t *testing.T) {
	e := start(t)

	id := e.create("drop").ID
	e.setFaults(faults.Rule{Op: faults.OpCancel, Kind: faults.DropAfterCommit, Count: 1})
	_, err := e.try(e.request(http.MethodDelete, "/v1/requests/"+id, nil))
	e.g.Expect(err).To(MatchError(io.EOF))
	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusCancelled), "committed, the response lost")
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK).Status).To(Equal(provider.StatusCancelled), "and a retry gets it")

	id = e.create("reset").ID
	e.setFaults(faults.Rule{Op: faults.OpCancel, Kind: faults.Reset, Count: 1})
	_, err = e.try(e.request(http.MethodDelete, "/v1/requests/"+id, nil))
	e.g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "%v", err)
	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusPending), "not done")

	e.setFaults(faults.Rule{Op: faults.OpCancel, Kind: faults.Error5xx, Count: 1, RetryAfter: time.Second})
	r := e.cancel(id)
	e.expectError(r, http.StatusServiceUnavailable, provider.CodeUnavailable)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("1"))
	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusPending))

	e.setFaults(faults.Rule{Op: faults.OpCancel, Kind: faults.RateLimit, Count: 1, RetryAfter: 4 * time.Second})
	r = e.cancel(id)
	e.expectError(r, http.StatusTooManyRequests, provider.CodeRateLimited)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("4"))

	e.setFaults(faults.Rule{Op: faults.OpCancel, Kind: faults.Delay, Delay: 100 * time.Millisecond, Count: 1})
	begin := time.Now()
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK).Status).To(Equal(provider.StatusCancelled))
	e.g.Expect(time.Since(begin)).To(BeNumerically(">=", 100*time.Millisecond))
	e.g.Expect(e.stats().Faults).To(HaveLen(5))
}

// decide_before_cancel makes a decision race a cancellation: the request is decided just before the
// DELETE is applied, which then answers 409 already_terminal and leaves the decision as it is.
func TestFaultDecideBeforeCancel(t *testing.T) {
	e := start(t)
	e.setFaults(faults.Rule{Kind: faults.DecideBeforeCancel, Count: 1},
		faults.Rule{Kind: faults.DecideBeforeCancel, Decision: provider.StatusDenied, Count: 1})
	e.g.Expect(e.srv.Faults().Rules()).To(HaveEach(HaveField("Op", faults.OpCancel)))

	for _, want := range []string{provider.StatusApproved, provider.StatusDenied} {
		id := e.create("key-" + want).ID
		e.expectError(e.cancel(id), http.StatusConflict, provider.CodeAlreadyTerminal)
		decided := e.expectRequest(e.get(id, ""), http.StatusOK)
		e.g.Expect(decided.Status).To(Equal(want))
		e.g.Expect(decided.Decision.Note).To(ContainSubstring("injected race"))
	}
	id := e.create("no-more-rules").ID
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK).Status).To(Equal(provider.StatusCancelled))
	e.g.Expect(e.stats().Faults[faults.DecideBeforeCancel]).To(BeEquivalentTo(2))
}

func TestFaultReset(t *testing.T) {
	e := start(t)
	e.setFaults(faults.Rule{Op: faults.OpSubmit, Kind: faults.Reset, Count: 1})

	_, err := e.try(e.submitRequest("key-1", refund()))
	e.g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "%v", err)
	e.g.Expect(e.srv.List("")).To(BeEmpty(), "the operation did not happen")
	e.g.Expect(e.stats().Responses[faults.OpSubmit]).To(Equal(map[int]int64{0: 1}))
	e.expectRequest(e.submit("key-1", refund()), http.StatusCreated)
}

func TestFaultDelay(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.setFaults(faults.Rule{Op: faults.OpGet, Kind: faults.Delay, Delay: 100 * time.Millisecond, Count: 1})

	begin := time.Now()
	e.expectRequest(e.get(id, ""), http.StatusOK)
	e.g.Expect(time.Since(begin)).To(BeNumerically(">=", 100*time.Millisecond))
}

func TestFaultDelayExceedsClientTimeout(t *testing.T) {
	e := start(t)
	e.setFaults(faults.Rule{Op: faults.OpSubmit, Kind: faults.Delay, Delay: time.Minute, Count: 1})
	e.client.Timeout = 100 * time.Millisecond

	_, err := e.try(e.submitRequest("key-1", refund()))
	var netErr net.Error
	e.g.Expect(errors.As(err, &netErr)).To(BeTrue(), "%v", err)
	e.g.Expect(netErr.Timeout()).To(BeTrue())
	e.g.Eventually(func() int64 { return e.stats().InFlight }).Should(BeZero())
	e.g.Eventually(func() int64 { return e.stats().Responses[faults.OpSubmit][0] }).Should(BeEquivalentTo(1))
	e.g.Expect(e.srv.List("")).To(BeEmpty(), "the client went away before the operation")
}

func TestFaultProbabilityIsSeeded(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.Faults = faults.New(7) })
	id := e.create("key-1").ID
	pattern := func() []int {
		var statuses []int
		for range 40 {
			statuses = append(statuses, e.get(id, "").status)
		}
		return statuses
	}
	e.setFaults(faults.Rule{Op: faults.OpGet, Kind: faults.Error5xx, Probability: 0.5})
	first := pattern()
	e.g.Expect(first).To(ContainElement(http.StatusServiceUnavailable))
	e.g.Expect(first).To(ContainElement(http.StatusOK))

	e.srv.Faults().Seed(7)
	e.g.Expect(pattern()).To(Equal(first))
}

func TestFaultProbabilityWithCount(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.setFaults(faults.Rule{Op: faults.OpAny, Kind: faults.RateLimit, Probability: 0.5, Count: 3})
	for range 100 {
		e.get(id, "")
	}
	e.g.Expect(e.stats().FaultsFired).To(BeEquivalentTo(3))
	e.g.Expect(e.srv.Faults().Rules()).To(BeEmpty())
}

func TestFaultRulesMatchTheirOperation(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.setFaults(
		faults.Rule{Op: faults.OpCancel, Kind: faults.RateLimit, Count: 1},
		faults.Rule{Op: faults.OpAny, Kind: faults.Error5xx, Status: 500, Count: 2},
	)
	e.expectError(e.get(id, ""), http.StatusInternalServerError, provider.CodeInternal)
	e.expectError(e.cancel(id), http.StatusTooManyRequests, provider.CodeRateLimited)
	e.expectError(e.cancel(id), http.StatusInternalServerError, provider.CodeInternal)
	e.expectRequest(e.cancel(id), http.StatusOK)
	e.g.Expect(e.srv.Faults().Rules()).To(BeEmpty())
}

func TestFaultRuleValidation(t *testing.T) {
	g := NewWithT(t)
	s, err := reference.New(reference.Options{Credential: "c", Faults: faults.New(0)})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(s.Close()).To(Succeed()) }()
	good := faults.Rule{Kind: faults.Reset, Count: 1}
	g.Expect(s.Faults().Set(good)).To(Succeed())
	for _, bad := range []faults.Rule{
		{Kind: faults.Reset},
		{Kind: "explode", Count: 1},
		{Op: "delete", Kind: faults.Reset, Count: 1},
		{Kind: faults.Reset, Probability: 1.5},
		{Kind: faults.Reset, Count: -1},
		{Kind: faults.Error5xx, Status: 404, Count: 1},
		{Kind: faults.Delay, Count: 1},
		{Kind: faults.RateLimit, RetryAfter: -time.Second, Count: 1},
		{Op: faults.OpGet, Kind: faults.DecideBeforeCancel, Count: 1},
		{Kind: faults.DecideBeforeCancel, Decision: "expired", Count: 1},
		{Kind: faults.Reset, Decision: "approved", Count: 1},
	} {
		g.Expect(s.Faults().Set(good, bad)).NotTo(Succeed(), "%+v", bad)
		g.Expect(s.Faults().Add(bad)).NotTo(Succeed(), "%+v", bad)
	}
	g.Expect(s.Faults().Rules()).To(Equal([]faults.Rule{{Op: faults.OpAny, Kind: faults.Reset, Count: 1}}))
	s.Faults().Clear()
	g.Expect(s.Faults().Rules()).To(BeEmpty())
}

func TestFaultsThroughAdminAPI(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	rules := func(r response) []faults.Rule {
		e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		var out []faults.Rule
		e.g.Expect(json.Unmarshal(r.body, &out)).To(Succeed())
		return out
	}

	added := rules(e.do(e.adminRequest(http.MethodPost, "/admin/v1/faults",
		json.RawMessage(`{"op":"get","kind":"rate_limit","count":2,"retry_after":"2s"}`))))
	e.g.Expect(added).To(Equal([]faults.Rule{{Op: faults.OpGet, Kind: faults.RateLimit, Count: 2, RetryAfter: 2 * time.Second}}))
	r := e.get(id, "")
	e.expectError(r, http.StatusTooManyRequests, provider.CodeRateLimited)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("2"))
	e.g.Expect(rules(e.do(e.adminRequest(http.MethodGet, "/admin/v1/faults", nil)))).To(HaveExactElements(HaveField("Count", 1)))

	e.g.Expect(rules(e.do(e.adminRequest(http.MethodDelete, "/admin/v1/faults", nil)))).To(BeEmpty())
	e.expectRequest(e.get(id, ""), http.StatusOK)

	set := rules(e.do(e.adminRequest(http.MethodPut, "/admin/v1/faults",
		json.RawMessage(`[{"kind":"delay","delay":"10ms","probability":1},{"op":"cancel","kind":"reset","count":1},`+
			`{"kind":"decide_before_cancel","decision":"denied","count":1}]`))))
	e.g.Expect(set).To(Equal([]faults.Rule{
		{Op: faults.OpAny, Kind: faults.Delay, Delay: 10 * time.Millisecond, Probability: 1},
		{Op: faults.OpCancel, Kind: faults.Reset, Count: 1},
		{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Decision: provider.StatusDenied, Count: 1},
	}))

	for _, bad := range []string{`{"kind":"reset"}`, `{"kind":"delay","delay":"soon","count":1}`, `[]`} {
		e.expectError(e.do(e.adminRequest(http.MethodPost, "/admin/v1/faults", json.RawMessage(bad))),
			http.StatusBadRequest, provider.CodeInvalidRequest)
	}
	e.g.Expect(e.srv.Faults().Rules()).To(HaveLen(3), "a refused rule changes nothing")

	stats := e.do(e.adminRequest(http.MethodGet, "/admin/v1/stats", nil))
	var s reference.Stats
	e.g.Expect(json.Unmarshal(stats.body, &s)).To(Succeed())
	e.g.Expect(s.Creates).To(BeEquivalentTo(1))
	e.g.Expect(s.Faults[faults.RateLimit]).To(BeEquivalentTo(1))
	e.g.Expect(s.Responses[faults.OpGet][429]).To(BeEquivalentTo(1))
}

func TestResetStats(t *testing.T) {
	e := start(t)
	e.create("key-1")
	e.srv.ResetStats()
	s := e.stats()
	e.g.Expect(s.Submits).To(BeZero())
	e.g.Expect(s.Creates).To(BeZero())
	e.g.Expect(s.Responses).To(BeEmpty())
}

// Fault injection is a test hook: a server made without an injector (as `reference-provider serve`
// makes it) has no fault rules to change, and its admin API says so.
func TestServerWithoutAnInjectorHasNoFaults(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.Faults = nil })
	e.g.Expect(e.srv.Faults()).To(BeNil())
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		var body any
		if method == http.MethodPost || method == http.MethodPut {
			body = json.RawMessage(`[]`)
		}
		e.expectError(e.do(e.adminRequest(method, "/admin/v1/faults", body)), http.StatusNotFound, provider.CodeNotFound)
	}
	e.g.Expect(e.srv.Faults().Add(faults.Rule{Kind: faults.Reset, Count: 1})).To(MatchError(ContainSubstring("no fault injector")))
	e.expectRequest(e.submit("key-1", refund()), http.StatusCreated)
}
