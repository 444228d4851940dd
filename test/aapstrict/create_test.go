package aapstrict

import (
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

// A body that is not exactly a CreateApprovalRequest is refused with 400, the param naming the field
// and a message saying how to fix it, and creates nothing.
func TestCreateRefusesAnythingButACreateApprovalRequest(t *testing.T) {
	p := start(t)
	cases := []struct {
		name, body, param, message string
	}{
		{"unknown field", `{"tool":"t","arguments":{},"timeout":"30m","arguments_sha256":"ab"}`, "arguments_sha256", `unknown field "arguments_sha256"`},
		{"unknown field first", `{"priority":1,"tool":"t","arguments":{},"timeout":"30m"}`, "priority", `unknown field "priority"`},
		{"no tool", `{"arguments":{},"timeout":"30m"}`, "tool", "tool is required"},
		{"no arguments", `{"tool":"t","timeout":"30m"}`, "arguments", "arguments is required"},
		{"no timeout", `{"tool":"t","arguments":{}}`, "timeout", "timeout is required"},
		{"empty tool", `{"tool":"","arguments":{},"timeout":"30m"}`, "tool", "non-empty string"},
		{"tool a number", `{"tool":7,"arguments":{},"timeout":"30m"}`, "tool", "non-empty string"},
		{"arguments an array", `{"tool":"t","arguments":[],"timeout":"30m"}`, "arguments", "JSON object"},
		{"arguments null", `{"tool":"t","arguments":null,"timeout":"30m"}`, "arguments", "JSON object"},
		{"arguments a string", `{"tool":"t","arguments":"{}","timeout":"30m"}`, "arguments", "JSON object"},
		{"timeout in two units", `{"tool":"t","arguments":{},"timeout":"1h30m"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout without unit", `{"tool":"t","arguments":{},"timeout":"30"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout zero", `{"tool":"t","arguments":{},"timeout":"0s"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout leading zero", `{"tool":"t","arguments":{},"timeout":"030m"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout fraction", `{"tool":"t","arguments":{},"timeout":"1.5h"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout upper case", `{"tool":"t","arguments":{},"timeout":"30M"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout in ms", `{"tool":"t","arguments":{},"timeout":"500ms"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout days", `{"tool":"t","arguments":{},"timeout":"1d"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout with space", `{"tool":"t","arguments":{},"timeout":" 30m"}`, "timeout", "timeout must be a duration such as 30m"},
		{"timeout a number", `{"tool":"t","arguments":{},"timeout":1800}`, "timeout", "timeout must be a duration such as 30m"},
		{"agent_reasoning a number", `{"tool":"t","arguments":{},"timeout":"30m","agent_reasoning":1}`, "agent_reasoning", "must be a string"},
		{"agent_reasoning null", `{"tool":"t","arguments":{},"timeout":"30m","agent_reasoning":null}`, "agent_reasoning", "must be a string"},
		{"context an array", `{"tool":"t","arguments":{},"timeout":"30m","context":[]}`, "context", "JSON object"},
		{"duplicate field", `{"tool":"t","tool":"u","arguments":{},"timeout":"30m"}`, "-", `"tool" appears twice`},
		{"not an object", `["tool"]`, "-", "one JSON object"},
		{"not JSON", `tool=t`, "-", "one JSON object"},
		{"trailing data", `{"tool":"t","arguments":{},"timeout":"30m"} {}`, "-", "data follows"},
		{"truncated", `{"tool":"t","arguments":{`, "-", "one JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			a := p.create("key-"+c.name, c.body)
			expectError(g, a, http.StatusBadRequest, "invalid_request", c.param)
			g.Expect(a.obj["error"]).To(HaveKeyWithValue("message", ContainSubstring(c.message)))
		})
	}
	t.Run("no Idempotency-Key", func(t *testing.T) {
		g := NewWithT(t)
		a := p.do(http.MethodPost, "/v1/requests", refundBody)
		expectError(g, a, http.StatusBadRequest, "invalid_request", "Idempotency-Key")
		g.Expect(a.obj["error"]).To(HaveKeyWithValue("message", ContainSubstring("Idempotency-Key header is required")))
	})
	t.Run("not application/json", func(t *testing.T) {
		g := NewWithT(t)
		a := p.do(http.MethodPost, "/v1/requests", refundBody, "Idempotency-Key", "k", "Content-Type", "text/plain")
		expectError(g, a, http.StatusBadRequest, "invalid_request", "")
		g.Expect(a.obj["error"]).To(HaveKeyWithValue("message", ContainSubstring("application/json")))
	})
	t.Run("too large", func(t *testing.T) {
		g := NewWithT(t)
		body := `{"tool":"t","arguments":{"x":"` + strings.Repeat("x", maxBodyBytes) + `"},"timeout":"30m"}`
		expectError(g, p.create("k", body), http.StatusBadRequest, "invalid_request", "")
	})
	p.g.Expect(p.s.List()).To(BeEmpty(), "a refused submission creates nothing")
	for _, ex := range p.s.Log() {
		p.g.Expect(ex.Status).To(Equal(http.StatusBadRequest))
	}
}

// Any duration of one unit is accepted, however it would usually be written.
func TestCreateAcceptsEveryOneUnitDuration(t *testing.T) {
	p := start(t)
	for _, timeout := range []string{"1s", "30s", "90s", "44m", "90m", "1h", "24h", "2669s", "100000h"} {
		a := p.create("k-"+timeout, `{"tool":"t","arguments":{},"timeout":"`+timeout+`"}`)
		p.g.Expect(a.status).To(Equal(http.StatusCreated), "%s: %s", timeout, a.body)
		p.g.Expect(a.obj["timeout"]).To(Equal(timeout))
	}
}

// 201 returns the stored request: the submitted call as sent, pending, created now, due at
// created_at + timeout, and no other field.
func TestCreateReturnsThePendingRequest(t *testing.T) {
	var clk *clocktesting.FakeClock
	p := start(t, withFakeClock(&clk))
	g := p.g
	clk.SetTime(time.Date(2026, 9, 16, 12, 0, 0, 700_000_000, time.UTC))
	body := `{ "tool": "issue_refund", "arguments": {"payment_id":"payment_123", "amount": 4900, "currency":"GBP", "Nested": {"Keep": "Spelling", "n": 1.50}},
		"timeout": "30m", "agent_reasoning": "The customer was charged twice.", "context": {"session_id": "session_456"} }`
	a := p.create("k", body)
	g.Expect(a.status).To(Equal(http.StatusCreated))
	g.Expect(a.header.Get("Content-Type")).To(Equal("application/json"))
	g.Expect(expectRequest(g, a.obj)).To(Equal(StatusPending))
	g.Expect(a.obj).To(HaveLen(9))
	g.Expect(a.obj["tool"]).To(Equal("issue_refund"))
	g.Expect(string(a.body)).To(ContainSubstring(`"arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP","Nested":{"Keep":"Spelling","n":1.50}}`),
		"arguments are echoed as sent, member order, spelling and number form kept")
	g.Expect(a.obj["timeout"]).To(Equal("30m"))
	g.Expect(a.obj["agent_reasoning"]).To(Equal("The customer was charged twice."))
	g.Expect(a.obj["context"]).To(Equal(map[string]any{"session_id": "session_456"}))
	g.Expect(a.obj["created_at"]).To(Equal("2026-09-16T12:00:00Z"))
	g.Expect(a.obj["deadline_at"]).To(Equal("2026-09-16T12:30:00Z"))

	stored, ok := p.s.ByKey("k")
	g.Expect(ok).To(BeTrue())
	g.Expect(stored.ID).To(Equal(a.obj["id"]))
	g.Expect(stored.Key).To(Equal("k"))
	g.Expect(*stored.AgentReasoning).To(Equal("The customer was charged twice."))

	minimal := p.create("k2", refundBody)
	g.Expect(minimal.obj).To(HaveLen(7), "agent_reasoning and context are echoed only when sent")
	g.Expect(minimal.obj["id"]).NotTo(Equal(a.obj["id"]))
}

// A replay of the key with the same parsed fields is 200 with the request as it is now; other fields
// under the key are 409 idempotency_conflict and change nothing.
func TestIdempotencyKeyReplayAndConflict(t *testing.T) {
	p := start(t)
	g := p.g
	first := p.create("attempt-1", refundBody)
	g.Expect(first.status).To(Equal(http.StatusCreated))
	id := first.obj["id"].(string)

	same := []string{
		refundBody,
		`{"timeout":"30m","arguments":{"currency":"GBP","amount":4900,"payment_id":"payment_123"},"tool":"issue_refund"}`,
		"{\n  \"tool\" : \"issue_refund\",\n  \"arguments\" : { \"payment_id\" : \"payment_123\", \"amount\" : 4.9e3, \"currency\" : \"GBP\" },\n  \"timeout\" : \"30m\"\n}",
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900.0,"currency":"GBP"},"timeout":"30m"}`,
	}
	for _, body := range same {
		a := p.create("attempt-1", body)
		g.Expect(a.status).To(Equal(http.StatusOK), body)
		g.Expect(a.obj["id"]).To(Equal(id))
		g.Expect(string(a.body)).To(Equal(string(first.body)), "the same request, as first stored")
	}
	_, err := p.s.Approve(id, 5*time.Minute, "ok")
	g.Expect(err).NotTo(HaveOccurred())
	replay := p.create("attempt-1", refundBody)
	g.Expect(replay.status).To(Equal(http.StatusOK))
	g.Expect(expectRequest(g, replay.obj)).To(Equal(StatusApproved), "a replay returns the current state")

	different := []string{
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4901,"currency":"GBP"},"timeout":"30m"}`,
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"31m"}`,
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"1800s"}`,
		`{"tool":"refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"30m"}`,
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900},"timeout":"30m"}`,
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":"4900","currency":"GBP"},"timeout":"30m"}`,
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"30m","agent_reasoning":""}`,
		`{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"30m","context":{}}`,
	}
	for _, body := range different {
		a := p.create("attempt-1", body)
		expectError(g, a, http.StatusConflict, "idempotency_conflict", "")
	}
	held, _ := p.s.Get(id)
	g.Expect(string(held.Arguments)).To(Equal(`{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`))
	g.Expect(held.Timeout).To(Equal("30m"))
	g.Expect(held.Status).To(Equal(StatusApproved))

	other := p.create("attempt-2", refundBody)
	g.Expect(other.status).To(Equal(http.StatusCreated), "a new key is a new execution attempt")
	g.Expect(other.obj["id"]).NotTo(Equal(id))
	g.Expect(p.s.List()).To(HaveLen(2))
}

// A provider window shorter than the asked timeout makes deadline_at earlier; timeout stays as asked.
func TestMaxWindowShortensTheDeadline(t *testing.T) {
	var clk *clocktesting.FakeClock
	p := start(t, withFakeClock(&clk), func(o *Options) { o.MaxWindow = 10 * time.Minute })
	g := p.g
	long := p.create("long", refundBody)
	g.Expect(long.obj["timeout"]).To(Equal("30m"))
	g.Expect(ts(g, long.obj["deadline_at"]).Sub(ts(g, long.obj["created_at"]))).To(Equal(10 * time.Minute))
	short := p.create("short", `{"tool":"t","arguments":{},"timeout":"5m"}`)
	g.Expect(ts(g, short.obj["deadline_at"]).Sub(ts(g, short.obj["created_at"]))).To(Equal(5*time.Minute), "never lengthened")
}
