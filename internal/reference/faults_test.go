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
)

func (e *env) setFaults(rules ...reference.FaultRule) {
	e.t.Helper()
	e.g.Expect(e.srv.Faults().Set(rules...)).To(Succeed())
}

// A 500 or 503 is an ErrorResponse of its type; another 5xx is plain text, as a proxy in front of a
// provider would answer.
func TestFaultError5xx(t *testing.T) {
	e := start(t)
	e.setFaults(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultError5xx, Status: 502, Count: 1})

	r := e.submit("key-1", refund())
	e.g.Expect(r.status).To(Equal(http.StatusBadGateway))
	e.g.Expect(r.header.Get("Content-Type")).To(HavePrefix("text/plain"))
	e.g.Expect(string(r.body)).To(Equal("502 Bad Gateway\n"))
	e.g.Expect(e.srv.List("")).To(BeEmpty(), "the operation did not happen")
	e.g.Expect(e.srv.Faults().Rules()).To(BeEmpty(), "the rule's count is used up")
	e.expectRequest(e.submit("key-1", refund()), http.StatusCreated)

	e.setFaults(reference.FaultRule{Kind: reference.FaultError5xx, Count: 1, RetryAfter: 2 * time.Second})
	r = e.get(uuid.NewString(), "")
	e.expectError(r, http.StatusServiceUnavailable, provider.CodeUnavailable)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("2"))
	e.setFaults(reference.FaultRule{Kind: reference.FaultError5xx, Status: 500, Count: 1})
	e.expectError(e.get(uuid.NewString(), ""), http.StatusInternalServerError, provider.CodeInternal)

	s := e.stats()
	e.g.Expect(s.FaultsFired).To(BeEquivalentTo(3))
	e.g.Expect(s.Faults).To(Equal(map[reference.FaultKind]int64{reference.FaultError5xx: 3}))
	e.g.Expect(s.Creates).To(BeEquivalentTo(1))
}

func TestFaultRateLimit(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.setFaults(reference.FaultRule{Op: reference.OpGet, Kind: reference.FaultRateLimit, RetryAfter: 3 * time.Second, Count: 1})

	r := e.get(id, "")
	e.expectError(r, http.StatusTooManyRequests, provider.CodeRateLimited)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("3"))
	e.expectRequest(e.get(id, ""), http.StatusOK)
	e.g.Expect(e.stats().Responses[reference.OpGet]).To(Equal(map[int]int64{429: 1, 200: 1}))
}

func TestFaultDropAfterCommitOnSubmit(t *testing.T) {
	e := start(t)
	e.setFaults(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultDropAfterCommit, Count: 1})

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
	e.g.Expect(s.Responses[reference.OpSubmit]).To(Equal(map[int]int64{0: 1, 200: 1}))
}

// Every fault kind acts on DELETE /v1/requests/{id} too.
func TestFaultsOnCancel(t *testing.T) {
	e := start(t)

	id := e.create("drop").ID
	e.setFaults(reference.FaultRule{Op: reference.OpCancel, Kind: reference.FaultDropAfterCommit, Count: 1})
	_, err := e.try(e.request(http.MethodDelete, "/v1/requests/"+id, nil))
	e.g.Expect(err).To(MatchError(io.EOF))
	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusCancelled), "committed, the response lost")
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK).Status).To(Equal(provider.StatusCancelled), "and a retry gets it")

	id = e.create("reset").ID
	e.setFaults(reference.FaultRule{Op: reference.OpCancel, Kind: reference.FaultReset, Count: 1})
	_, err = e.try(e.request(http.MethodDelete, "/v1/requests/"+id, nil))
	e.g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "%v", err)
	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusPending), "not done")

	e.setFaults(reference.FaultRule{Op: reference.OpCancel, Kind: reference.FaultError5xx, Count: 1, RetryAfter: time.Second})
	r := e.cancel(id)
	e.expectError(r, http.StatusServiceUnavailable, provider.CodeUnavailable)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("1"))
	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusPending))

	e.setFaults(reference.FaultRule{Op: reference.OpCancel, Kind: reference.FaultRateLimit, Count: 1, RetryAfter: 4 * time.Second})
	r = e.cancel(id)
	e.expectError(r, http.StatusTooManyRequests, provider.CodeRateLimited)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("4"))

	e.setFaults(reference.FaultRule{Op: reference.OpCancel, Kind: reference.FaultDelay, Delay: 100 * time.Millisecond, Count: 1})
	begin := time.Now()
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK).Status).To(Equal(provider.StatusCancelled))
	e.g.Expect(time.Since(begin)).To(BeNumerically(">=", 100*time.Millisecond))
	e.g.Expect(e.stats().Faults).To(HaveLen(5))
}

// decide_before_cancel makes a decision race a cancellation: the request is decided just before the
// DELETE is applied, which then answers 409 already_terminal and leaves the decision as it is.
func TestFaultDecideBeforeCancel(t *testing.T) {
	e := start(t)
	e.setFaults(reference.FaultRule{Kind: reference.FaultDecideBeforeCancel, Count: 1},
		reference.FaultRule{Kind: reference.FaultDecideBeforeCancel, Decision: provider.StatusDenied, Count: 1})
	e.g.Expect(e.srv.Faults().Rules()).To(HaveEach(HaveField("Op", reference.OpCancel)))

	for _, want := range []string{provider.StatusApproved, provider.StatusDenied} {
		id := e.create("key-" + want).ID
		e.expectError(e.cancel(id), http.StatusConflict, provider.CodeAlreadyTerminal)
		decided := e.expectRequest(e.get(id, ""), http.StatusOK)
		e.g.Expect(decided.Status).To(Equal(want))
		e.g.Expect(decided.Decision.Note).To(ContainSubstring("injected race"))
	}
	id := e.create("no-more-rules").ID
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK).Status).To(Equal(provider.StatusCancelled))
	e.g.Expect(e.stats().Faults[reference.FaultDecideBeforeCancel]).To(BeEquivalentTo(2))
}

func TestFaultReset(t *testing.T) {
	e := start(t)
	e.setFaults(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultReset, Count: 1})

	_, err := e.try(e.submitRequest("key-1", refund()))
	e.g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "%v", err)
	e.g.Expect(e.srv.List("")).To(BeEmpty(), "the operation did not happen")
	e.g.Expect(e.stats().Responses[reference.OpSubmit]).To(Equal(map[int]int64{0: 1}))
	e.expectRequest(e.submit("key-1", refund()), http.StatusCreated)
}

func TestFaultDelay(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.setFaults(reference.FaultRule{Op: reference.OpGet, Kind: reference.FaultDelay, Delay: 100 * time.Millisecond, Count: 1})

	begin := time.Now()
	e.expectRequest(e.get(id, ""), http.StatusOK)
	e.g.Expect(time.Since(begin)).To(BeNumerically(">=", 100*time.Millisecond))
}

func TestFaultDelayExceedsClientTimeout(t *testing.T) {
	e := start(t)
	e.setFaults(reference.FaultRule{Op: reference.OpSubmit, Kind: reference.FaultDelay, Delay: time.Minute, Count: 1})
	e.client.Timeout = 100 * time.Millisecond

	_, err := e.try(e.submitRequest("key-1", refund()))
	var netErr net.Error
	e.g.Expect(errors.As(err, &netErr)).To(BeTrue(), "%v", err)
	e.g.Expect(netErr.Timeout()).To(BeTrue())
	e.g.Eventually(func() int64 { return e.stats().InFlight }).Should(BeZero())
	e.g.Eventually(func() int64 { return e.stats().Responses[reference.OpSubmit][0] }).Should(BeEquivalentTo(1))
	e.g.Expect(e.srv.List("")).To(BeEmpty(), "the client went away before the operation")
}

func TestFaultProbabilityIsSeeded(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.FaultSeed = 7 })
	id := e.create("key-1").ID
	pattern := func() []int {
		var statuses []int
		for range 40 {
			statuses = append(statuses, e.get(id, "").status)
		}
		return statuses
	}
	e.setFaults(reference.FaultRule{Op: reference.OpGet, Kind: reference.FaultError5xx, Probability: 0.5})
	first := pattern()
	e.g.Expect(first).To(ContainElement(http.StatusServiceUnavailable))
	e.g.Expect(first).To(ContainElement(http.StatusOK))

	e.srv.Faults().Seed(7)
	e.g.Expect(pattern()).To(Equal(first))
}

func TestFaultProbabilityWithCount(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.setFaults(reference.FaultRule{Op: reference.OpAny, Kind: reference.FaultRateLimit, Probability: 0.5, Count: 3})
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
		reference.FaultRule{Op: reference.OpCancel, Kind: reference.FaultRateLimit, Count: 1},
		reference.FaultRule{Op: reference.OpAny, Kind: reference.FaultError5xx, Status: 500, Count: 2},
	)
	e.expectError(e.get(id, ""), http.StatusInternalServerError, provider.CodeInternal)
	e.expectError(e.cancel(id), http.StatusTooManyRequests, provider.CodeRateLimited)
	e.expectError(e.cancel(id), http.StatusInternalServerError, provider.CodeInternal)
	e.expectRequest(e.cancel(id), http.StatusOK)
	e.g.Expect(e.srv.Faults().Rules()).To(BeEmpty())
}

func TestFaultRuleValidation(t *testing.T) {
	g := NewWithT(t)
	s, err := reference.New(reference.Options{Credential: "c"})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(s.Close()).To(Succeed()) }()
	good := reference.FaultRule{Kind: reference.FaultReset, Count: 1}
	g.Expect(s.Faults().Set(good)).To(Succeed())
	for _, bad := range []reference.FaultRule{
		{Kind: reference.FaultReset},
		{Kind: "explode", Count: 1},
		{Op: "delete", Kind: reference.FaultReset, Count: 1},
		{Kind: reference.FaultReset, Probability: 1.5},
		{Kind: reference.FaultReset, Count: -1},
		{Kind: reference.FaultError5xx, Status: 404, Count: 1},
		{Kind: reference.FaultDelay, Count: 1},
		{Kind: reference.FaultRateLimit, RetryAfter: -time.Second, Count: 1},
		{Op: reference.OpGet, Kind: reference.FaultDecideBeforeCancel, Count: 1},
		{Kind: reference.FaultDecideBeforeCancel, Decision: "expired", Count: 1},
		{Kind: reference.FaultReset, Decision: "approved", Count: 1},
	} {
		g.Expect(s.Faults().Set(good, bad)).NotTo(Succeed(), "%+v", bad)
		g.Expect(s.Faults().Add(bad)).NotTo(Succeed(), "%+v", bad)
	}
	g.Expect(s.Faults().Rules()).To(Equal([]reference.FaultRule{{Op: reference.OpAny, Kind: reference.FaultReset, Count: 1}}))
	s.Faults().Clear()
	g.Expect(s.Faults().Rules()).To(BeEmpty())
}

func TestFaultsThroughAdminAPI(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	rules := func(r response) []reference.FaultRule {
		e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		var out []reference.FaultRule
		e.g.Expect(json.Unmarshal(r.body, &out)).To(Succeed())
		return out
	}

	added := rules(e.do(e.adminRequest(http.MethodPost, "/admin/v1/faults",
		json.RawMessage(`{"op":"get","kind":"rate_limit","count":2,"retry_after":"2s"}`))))
	e.g.Expect(added).To(Equal([]reference.FaultRule{{Op: reference.OpGet, Kind: reference.FaultRateLimit, Count: 2, RetryAfter: 2 * time.Second}}))
	r := e.get(id, "")
	e.expectError(r, http.StatusTooManyRequests, provider.CodeRateLimited)
	e.g.Expect(r.header.Get("Retry-After")).To(Equal("2"))
	e.g.Expect(rules(e.do(e.adminRequest(http.MethodGet, "/admin/v1/faults", nil)))).To(HaveExactElements(HaveField("Count", 1)))

	e.g.Expect(rules(e.do(e.adminRequest(http.MethodDelete, "/admin/v1/faults", nil)))).To(BeEmpty())
	e.expectRequest(e.get(id, ""), http.StatusOK)

	set := rules(e.do(e.adminRequest(http.MethodPut, "/admin/v1/faults",
		json.RawMessage(`[{"kind":"delay","delay":"10ms","probability":1},{"op":"cancel","kind":"reset","count":1},`+
			`{"kind":"decide_before_cancel","decision":"denied","count":1}]`))))
	e.g.Expect(set).To(Equal([]reference.FaultRule{
		{Op: reference.OpAny, Kind: reference.FaultDelay, Delay: 10 * time.Millisecond, Probability: 1},
		{Op: reference.OpCancel, Kind: reference.FaultReset, Count: 1},
		{Op: reference.OpCancel, Kind: reference.FaultDecideBeforeCancel, Decision: provider.StatusDenied, Count: 1},
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
	e.g.Expect(s.Faults[reference.FaultRateLimit]).To(BeEquivalentTo(1))
	e.g.Expect(s.Responses[reference.OpGet][429]).To(BeEquivalentTo(1))
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
