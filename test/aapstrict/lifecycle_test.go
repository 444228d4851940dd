package aapstrict

import (
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestGetReturnsTheRequestOrNotFound(t *testing.T) {
	p := start(t)
	g := p.g
	id := p.created("k", refundBody)
	a := p.do(http.MethodGet, "/v1/requests/"+id, "")
	g.Expect(a.status).To(Equal(http.StatusOK))
	g.Expect(expectRequest(g, a.obj)).To(Equal(StatusPending))
	g.Expect(a.obj["id"]).To(Equal(id))
	for _, unknown := range []string{"7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71", "not-a-uuid", id + "x"} {
		expectError(g, p.do(http.MethodGet, "/v1/requests/"+unknown, ""), http.StatusNotFound, "not_found", "")
		expectError(g, p.do(http.MethodDelete, "/v1/requests/"+unknown, ""), http.StatusNotFound, "not_found", "")
	}
}

func TestGetRefusesAMalformedWait(t *testing.T) {
	p := start(t)
	id := p.created("k", refundBody)
	for _, q := range []string{"wait=", "wait=30", "wait=0s", "wait=1m30s", "wait=30S", "wait=2.5s", "wait=-1s", "wait=1s&wait=2s"} {
		a := p.do(http.MethodGet, "/v1/requests/"+id+"?"+q, "")
		expectError(p.g, a, http.StatusBadRequest, "invalid_request", "wait")
		p.g.Expect(a.obj["error"]).To(HaveKeyWithValue("message", ContainSubstring("such as 30s")), q)
	}
}

// The wait's pattern and its cap (pure logic: a 30s cap is not waited out in a test).
func TestParseWait(t *testing.T) {
	cases := []struct {
		values []string
		want   time.Duration
		ok     bool
	}{
		{nil, 0, true},
		{[]string{"1s"}, time.Second, true},
		{[]string{"30s"}, 30 * time.Second, true},
		{[]string{"31s"}, 30 * time.Second, true},
		{[]string{"10m"}, 30 * time.Second, true},
		{[]string{"1h"}, 30 * time.Second, true},
		{[]string{"99999999999999999999h"}, 30 * time.Second, true},
		{[]string{"0s"}, 0, false},
		{[]string{"30"}, 0, false},
		{[]string{"5ms"}, 0, false},
		{[]string{"1s", "1s"}, 0, false},
	}
	for _, c := range cases {
		got, err := parseWait(c.values)
		NewWithT(t).Expect(err == nil).To(Equal(c.ok), "%v", c.values)
		NewWithT(t).Expect(got).To(Equal(c.want), "%v", c.values)
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1s", time.Second, true}, {"90s", 90 * time.Second, true}, {"44m", 44 * time.Minute, true},
		{"90m", 90 * time.Minute, true}, {"24h", 24 * time.Hour, true},
		{"9999999999999h", maxDuration, true},
		{"", 0, false}, {"s", 0, false}, {"0m", 0, false}, {"01m", 0, false}, {"1h30m", 0, false},
		{"1.5h", 0, false}, {"+1s", 0, false}, {"1 s", 0, false}, {"1sec", 0, false}, {"1d", 0, false},
	}
	for _, c := range cases {
		got, ok := parseDuration(c.in)
		NewWithT(t).Expect(ok).To(Equal(c.ok), c.in)
		NewWithT(t).Expect(got).To(Equal(c.want), c.in)
	}
}

func TestJSONEqualComparesParsedValues(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`, true},
		{`{"a":4900}`, `{"a":4.9e3}`, true},
		{`{"a":1}`, `{"a":1.0}`, true},
		{`{"a":9007199254740993}`, `{"a":9007199254740992}`, false},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{`{"a":null}`, `{}`, false},
		{`{"a":true}`, `{"a":true}`, true},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"C"}}`, false},
	}
	for _, c := range cases {
		a, err := parseValue([]byte(c.a))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		b, err := parseValue([]byte(c.b))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(jsonEqual(a, b)).To(Equal(c.want), "%s vs %s", c.a, c.b)
	}
}

// A long poll holds its answer until the request becomes terminal, whichever way it does.
func TestLongPollEndsWhenTheRequestBecomesTerminal(t *testing.T) {
	var clk *clocktesting.FakeClock
	p := start(t, withFakeClock(&clk))
	cases := []struct {
		name   string
		end    func(id string)
		status string
	}{
		{"approved", func(id string) { _, err := p.s.Approve(id, time.Minute, "fine"); p.g.Expect(err).NotTo(HaveOccurred()) }, StatusApproved},
		{"denied", func(id string) { _, err := p.s.Deny(id, "no"); p.g.Expect(err).NotTo(HaveOccurred()) }, StatusDenied},
		{"cancelled", func(id string) {
			p.g.Expect(p.do(http.MethodDelete, "/v1/requests/"+id, "").status).To(Equal(http.StatusOK))
		}, StatusCancelled},
		{"expired", func(string) { clk.Step(30 * time.Minute) }, StatusExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newWithT(t)
			id := p.created("k-"+c.name, refundBody)
			got := make(chan answer, 1)
			go func() {
				a, err := p.send(http.MethodGet, "/v1/requests/"+id+"?wait=30s", "")
				if err == nil {
					got <- a
				}
				close(got)
			}()
			g.Eventually(func() int { return p.s.Waiting(id) }).Should(Equal(1), "the poll is held")
			g.Consistently(got).WithTimeout(200*time.Millisecond).ShouldNot(Receive(), "a pending request holds the poll")
			began := time.Now()
			c.end(id)
			var a answer
			g.Eventually(got).WithTimeout(5 * time.Second).Should(Receive(&a))
			g.Expect(time.Since(began)).To(BeNumerically("<", 5*time.Second), "the poll ended early")
			g.Expect(a.status).To(Equal(http.StatusOK))
			g.Expect(expectRequest(g, a.obj)).To(Equal(c.status))
			g.Expect(p.s.Waiting(id)).To(BeZero())
		})
	}
}

// A completed wait without a decision answers 200 pending; no wait answers at once.
func TestLongPollThatEndsWithoutADecisionIsPending(t *testing.T) {
	p := start(t)
	g := p.g
	id := p.created("k", refundBody)
	began := time.Now()
	a := p.do(http.MethodGet, "/v1/requests/"+id+"?wait=1s", "")
	g.Expect(time.Since(began)).To(BeNumerically(">=", time.Second))
	g.Expect(a.status).To(Equal(http.StatusOK))
	g.Expect(expectRequest(g, a.obj)).To(Equal(StatusPending))
	began = time.Now()
	p.do(http.MethodGet, "/v1/requests/"+id, "")
	g.Expect(time.Since(began)).To(BeNumerically("<", time.Second))
}

// A terminal request answers a long poll at once.
func TestLongPollOnATerminalRequestAnswersAtOnce(t *testing.T) {
	p := start(t)
	id := p.created("k", refundBody)
	_, err := p.s.Deny(id, "")
	p.g.Expect(err).NotTo(HaveOccurred())
	began := time.Now()
	a := p.do(http.MethodGet, "/v1/requests/"+id+"?wait=30s", "")
	p.g.Expect(time.Since(began)).To(BeNumerically("<", 5*time.Second))
	p.g.Expect(expectRequest(p.g, a.obj)).To(Equal(StatusDenied))
	p.g.Expect(a.obj["decision"]).NotTo(HaveKey("note"), "an empty note is not sent")
}

func TestCancel(t *testing.T) {
	var clk *clocktesting.FakeClock
	p := start(t, withFakeClock(&clk))
	g := p.g
	id := p.created("pending", refundBody)
	clk.Step(90 * time.Second)
	first := p.do(http.MethodDelete, "/v1/requests/"+id, "")
	g.Expect(first.status).To(Equal(http.StatusOK))
	g.Expect(expectRequest(g, first.obj)).To(Equal(StatusCancelled))
	g.Expect(first.obj["decision"]).To(Equal(map[string]any{"status": "cancelled", "decided_at": "2026-09-16T12:01:30Z"}))
	clk.Step(time.Minute)
	again := p.do(http.MethodDelete, "/v1/requests/"+id, "")
	g.Expect(again.status).To(Equal(http.StatusOK))
	g.Expect(string(again.body)).To(Equal(string(first.body)), "cancelling again returns the same cancelled request")

	terminal := map[string]func(id string){
		StatusApproved: func(id string) { _, err := p.s.Approve(id, time.Minute, ""); g.Expect(err).NotTo(HaveOccurred()) },
		StatusDenied:   func(id string) { _, err := p.s.Deny(id, "no"); g.Expect(err).NotTo(HaveOccurred()) },
		StatusExpired:  func(string) { clk.Step(31 * time.Minute) },
	}
	for status, decide := range terminal {
		id := p.created("k-"+status, refundBody)
		decide(id)
		before, _ := p.s.Get(id)
		g.Expect(before.Status).To(Equal(status))
		a := p.do(http.MethodDelete, "/v1/requests/"+id, "")
		expectError(g, a, http.StatusConflict, "already_terminal", "")
		after, _ := p.s.Get(id)
		g.Expect(after).To(Equal(before), "the outcome is unchanged")
	}
}

// A request still pending at deadline_at becomes expired, decided at its deadline; it can no longer
// be approved. Expiry is reported by reads at once, before the clock's timer has run.
func TestExpiryAtTheDeadline(t *testing.T) {
	var clk *clocktesting.FakeClock
	p := start(t, withFakeClock(&clk))
	g := p.g
	id := p.created("k", `{"tool":"t","arguments":{},"timeout":"90s"}`)
	clk.Step(89 * time.Second)
	g.Expect(expectRequest(g, p.do(http.MethodGet, "/v1/requests/"+id, "").obj)).To(Equal(StatusPending))
	clk.Step(time.Second)
	a := p.do(http.MethodGet, "/v1/requests/"+id, "")
	g.Expect(expectRequest(g, a.obj)).To(Equal(StatusExpired))
	g.Expect(a.obj["decision"]).To(Equal(map[string]any{"status": "expired", "decided_at": "2026-09-16T12:01:30Z"}))
	_, err := p.s.Approve(id, time.Minute, "")
	g.Expect(err).To(MatchError(ContainSubstring("already expired")))

	// Nobody reads: the clock's timer records the expiry.
	other := p.created("k2", `{"tool":"t","arguments":{},"timeout":"1m"}`)
	clk.Step(time.Minute)
	g.Eventually(func() string {
		p.s.mu.Lock()
		defer p.s.mu.Unlock()
		return p.s.byID[other].req.Status
	}).Should(Equal(StatusExpired))
}

// One terminal outcome per request; expires_at later than decided_at in whole seconds, fixed across
// reads.
func TestDecisions(t *testing.T) {
	var clk *clocktesting.FakeClock
	p := start(t, withFakeClock(&clk))
	g := p.g
	id := p.created("k", refundBody)
	clk.Step(2*time.Minute + 400*time.Millisecond)
	r, err := p.s.Approve(id, 5*time.Minute, "The duplicate charge has been confirmed.")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Status).To(Equal(StatusApproved))
	a := p.do(http.MethodGet, "/v1/requests/"+id, "")
	g.Expect(a.obj["decision"]).To(Equal(map[string]any{
		"status": "approved", "note": "The duplicate charge has been confirmed.",
		"decided_at": "2026-09-16T12:02:00Z", "expires_at": "2026-09-16T12:07:00Z",
	}))
	clk.Step(time.Hour)
	g.Expect(p.do(http.MethodGet, "/v1/requests/"+id, "").body).To(Equal(a.body), "reading again changes nothing, past expires_at too")
	_, err = p.s.Deny(id, "")
	g.Expect(err).To(MatchError("request " + id + " is already approved: a request has one terminal outcome"))
	_, err = p.s.Approve(id, time.Minute, "")
	g.Expect(err).To(MatchError("request " + id + " is already approved: a request has one terminal outcome"))

	short := p.created("short", refundBody)
	r, err = p.s.Approve(short, 300*time.Millisecond, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Decision.ExpiresAt.Sub(r.Decision.DecidedAt)).To(Equal(time.Second), "rounded up to a whole second")
	_, err = p.s.Approve(p.created("zero", refundBody), 0, "")
	g.Expect(err).To(MatchError(ContainSubstring("positive validity")))
	_, err = p.s.Approve("no-such-id", time.Minute, "")
	g.Expect(err).To(MatchError(ErrUnknownRequest))
}

// A rule decides at creation: the 201 carries the decision, and a replay returns it.
func TestRuleDecidesAtCreation(t *testing.T) {
	p := start(t)
	g := p.g
	p.s.SetRule(func(r Request) *Verdict {
		switch r.Tool {
		case "issue_refund":
			return &Verdict{Status: StatusApproved, Note: "pre-approved", Validity: 5 * time.Minute}
		case "drop_tables":
			return &Verdict{Status: StatusDenied, Note: "never"}
		}
		return nil
	})
	a := p.create("k1", refundBody)
	g.Expect(a.status).To(Equal(http.StatusCreated))
	g.Expect(expectRequest(g, a.obj)).To(Equal(StatusApproved))
	g.Expect(a.obj["decision"]).To(HaveKeyWithValue("note", "pre-approved"))
	g.Expect(p.create("k1", refundBody).body).To(Equal(a.body))
	d := p.create("k2", `{"tool":"drop_tables","arguments":{},"timeout":"1m"}`)
	g.Expect(expectRequest(g, d.obj)).To(Equal(StatusDenied))
	g.Expect(expectRequest(g, p.create("k3", `{"tool":"other","arguments":{},"timeout":"1m"}`).obj)).To(Equal(StatusPending))
	p.s.SetRule(nil)
	g.Expect(expectRequest(g, p.create("k4", refundBody).obj)).To(Equal(StatusPending))
}

// Close ends held long polls.
func TestCloseEndsLongPolls(t *testing.T) {
	p := start(t)
	id := p.created("k", refundBody)
	done := make(chan struct{})
	go func() {
		_, _ = p.send(http.MethodGet, "/v1/requests/"+id+"?wait=30s", "")
		close(done)
	}()
	p.g.Eventually(func() int { return p.s.Waiting(id) }).Should(Equal(1))
	p.s.Close()
	p.g.Eventually(done).WithTimeout(5 * time.Second).Should(BeClosed())
}
