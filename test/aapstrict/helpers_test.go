package aapstrict

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

const testCredential = "strict-instance-credential"

const refundBody = `{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"30m"}`

var wholeSecondUTC = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// peer is an HTTP client of one running provider, over a real loopback socket. Connections are not
// reused, so that a dropped response reaches the test as the error it is, never retried by the
// transport.
type peer struct {
	t    *testing.T
	g    *WithT
	s    *Server
	base string
	hc   *http.Client
}

// answer is one response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
	obj    map[string]any
}

func start(t *testing.T, opts ...func(*Options)) *peer {
	t.Helper()
	o := Options{Credential: testCredential}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(o)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	base := s.Start()
	t.Cleanup(s.Close)
	return &peer{t: t, g: newWithT(t), s: s, base: base, hc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
}

// newWithT is NewWithT whose Eventually waits up to 10s unless told otherwise: gomega's default of
// 1s is short on a loaded machine.
func newWithT(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(10 * time.Second)
	return g
}

// withFakeClock gives the provider a fake clock at a fixed instant and returns it.
func withFakeClock(clk **clocktesting.FakeClock) func(*Options) {
	return func(o *Options) {
		*clk = clocktesting.NewFakeClock(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
		o.Clock = *clk
	}
}

// send makes one request; path is relative to the base URL unless it starts with "http".
func (p *peer) send(method, path, body string, header ...string) (answer, error) {
	p.t.Helper()
	url := path
	if !strings.HasPrefix(path, "http") {
		url = p.base + path
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	p.g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+testCredential)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	a := answer{status: resp.StatusCode, header: resp.Header}
	a.body, err = io.ReadAll(resp.Body)
	p.g.Expect(err).NotTo(HaveOccurred())
	if len(a.body) > 0 {
		p.g.Expect(json.Unmarshal(a.body, &a.obj)).To(Succeed(), "every body is a JSON object: %s", a.body)
	}
	// Every response carries a fresh X-Request-ID.
	p.g.Expect(uuid.Validate(a.header.Get("X-Request-ID"))).To(Succeed(), "X-Request-ID of %s %s", method, path)
	return a, nil
}

func (p *peer) do(method, path, body string, header ...string) answer {
	p.t.Helper()
	a, err := p.send(method, path, body, header...)
	p.g.Expect(err).NotTo(HaveOccurred())
	return a
}

func (p *peer) create(key, body string) answer {
	p.t.Helper()
	return p.do(http.MethodPost, "/v1/requests", body, "Idempotency-Key", key)
}

// created creates a request and returns its id.
func (p *peer) created(key, body string) string {
	p.t.Helper()
	a := p.create(key, body)
	p.g.Expect(a.status).To(Equal(http.StatusCreated), "%s", a.body)
	return a.obj["id"].(string)
}

// expectedType is the specification's table of error types by status.
var expectedType = map[int]string{
	400: "invalid_request", 401: "authentication", 403: "authorization", 404: "not_found",
	409: "conflict", 422: "invalid_request", 429: "rate_limit", 500: "internal", 503: "dependency",
}

// expectError checks an ErrorResponse: exactly {"error": {type, code, message, param?, request_id}},
// its type by status, its request_id the X-Request-ID header; param is checked when not "-".
func expectError(g *WithT, a answer, status int, code, param string) {
	g.Expect(a.status).To(Equal(status), "%s", a.body)
	g.Expect(a.header.Get("Content-Type")).To(Equal("application/json"))
	g.Expect(a.obj).To(HaveLen(1))
	e, ok := a.obj["error"].(map[string]any)
	g.Expect(ok).To(BeTrue(), "%s", a.body)
	for k := range e {
		g.Expect(k).To(BeElementOf("type", "code", "message", "param", "request_id"))
	}
	g.Expect(e["type"]).To(Equal(expectedType[status]))
	g.Expect(e["code"]).To(MatchRegexp(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`))
	if code != "" {
		g.Expect(e["code"]).To(Equal(code))
	}
	g.Expect(e["message"]).NotTo(BeEmpty())
	g.Expect(e["request_id"]).To(Equal(a.header.Get("X-Request-ID")))
	if param != "-" {
		if param == "" {
			g.Expect(e).NotTo(HaveKey("param"))
		} else {
			g.Expect(e["param"]).To(Equal(param))
		}
	}
	g.Expect(string(a.body)).NotTo(ContainSubstring(testCredential))
}

// expectRequest checks an ApprovalRequest against the schema: only its fields, the required ones,
// whole-second UTC timestamps, a decision exactly when terminal with its status, and expires_at on an
// approval only, later than decided_at. It returns the request's status.
func expectRequest(g *WithT, obj map[string]any) string {
	for k := range obj {
		g.Expect(k).To(BeElementOf("id", "tool", "arguments", "timeout", "agent_reasoning", "context", "status", "created_at", "deadline_at", "decision"))
	}
	for _, k := range []string{"id", "tool", "arguments", "timeout", "status", "created_at", "deadline_at"} {
		g.Expect(obj).To(HaveKey(k))
	}
	g.Expect(uuid.Validate(obj["id"].(string))).To(Succeed())
	g.Expect(obj["created_at"]).To(MatchRegexp(wholeSecondUTC.String()))
	g.Expect(obj["deadline_at"]).To(MatchRegexp(wholeSecondUTC.String()))
	status := obj["status"].(string)
	g.Expect(status).To(BeElementOf(StatusPending, StatusApproved, StatusDenied, StatusExpired, StatusCancelled))
	if status == StatusPending {
		g.Expect(obj).NotTo(HaveKey("decision"))
		return status
	}
	d, ok := obj["decision"].(map[string]any)
	g.Expect(ok).To(BeTrue(), "a %s request carries a decision", status)
	for k := range d {
		g.Expect(k).To(BeElementOf("status", "note", "decided_at", "expires_at"))
	}
	g.Expect(d["status"]).To(Equal(status))
	g.Expect(d["decided_at"]).To(MatchRegexp(wholeSecondUTC.String()))
	if status != StatusApproved {
		g.Expect(d).NotTo(HaveKey("expires_at"))
		return status
	}
	g.Expect(d["expires_at"]).To(MatchRegexp(wholeSecondUTC.String()))
	decided, _ := time.Parse(time.RFC3339, d["decided_at"].(string))
	expires, _ := time.Parse(time.RFC3339, d["expires_at"].(string))
	g.Expect(expires).To(BeTemporally(">", decided))
	return status
}

func ts(g *WithT, v any) time.Time {
	t, err := time.Parse(time.RFC3339, v.(string))
	g.Expect(err).NotTo(HaveOccurred())
	return t
}
