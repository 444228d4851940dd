package aapstrict

import (
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestNewRefusesBadOptions(t *testing.T) {
	cases := []struct {
		name    string
		opts    Options
		message string
	}{
		{"no credential", Options{}, "Options.Credential is required"},
		{"relative base path", Options{Credential: "c", BasePath: "api/aap"}, "must start with /"},
		{"trailing slash", Options{Credential: "c", BasePath: "/api/aap/"}, "not end with one"},
		{"root", Options{Credential: "c", BasePath: "/"}, "not end with one"},
		{"negative window", Options{Credential: "c", MaxWindow: -time.Second}, "must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.opts)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(c.message)))
		})
	}
}

// Everything outside the base path is 404, with or without a credential; inside it, only the three
// request operations exist.
func TestOnlyTheBasePathIsServed(t *testing.T) {
	p := start(t)
	g := p.g
	g.Expect(p.base).To(MatchRegexp(`^http://127\.0\.0\.1:\d+/api/aap$`))
	root := strings.TrimSuffix(p.base, "/api/aap")
	cases := []struct{ method, url string }{
		{http.MethodPost, root + "/v1/requests"},
		{http.MethodGet, root + "/"},
		{http.MethodPost, root + "/api/v1/requests"},
		{http.MethodPost, root + "/api/aapx/v1/requests"},
		{http.MethodPost, root + "/API/AAP/v1/requests"},
		{http.MethodGet, p.base},
		{http.MethodGet, p.base + "/"},
		{http.MethodGet, p.base + "/v1/requests"},
		{http.MethodPut, p.base + "/v1/requests/00000000-0000-0000-0000-000000000000"},
		{http.MethodPost, p.base + "/v1/requests/00000000-0000-0000-0000-000000000000/cancel"},
		{http.MethodGet, p.base + "/v1/instances"},
	}
	for _, c := range cases {
		a := p.do(c.method, c.url, "")
		expectError(g, a, http.StatusNotFound, "not_found", "")
	}
	g.Expect(p.s.List()).To(BeEmpty())
}

func TestOnlyTheInstanceCredentialIsAccepted(t *testing.T) {
	p := start(t)
	cases := []struct {
		name, authorization string
		ok                  bool
	}{
		{"none", "", false},
		{"another token", "Bearer not-the-credential", false},
		{"a prefix of it", "Bearer " + testCredential[:5], false},
		{"another scheme", "Basic " + testCredential, false},
		{"no scheme", testCredential, false},
		{"two spaces", "Bearer  " + testCredential, false},
		{"the credential", "Bearer " + testCredential, true},
		{"scheme in lower case", "bearer " + testCredential, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			a := p.do(http.MethodPost, "/v1/requests", refundBody, "Idempotency-Key", "key-"+c.name, "Authorization", c.authorization)
			if c.ok {
				g.Expect(a.status).To(Equal(http.StatusCreated), "%s", a.body)
				return
			}
			expectError(g, a, http.StatusUnauthorized, "unauthenticated", "")
			g.Expect(a.header.Get("WWW-Authenticate")).To(HavePrefix("Bearer"))
			_, created := p.s.ByKey("key-" + c.name)
			g.Expect(created).To(BeFalse())
		})
	}
}

// Every response has its own X-Request-ID, and every error's request_id is it.
func TestEveryResponseHasItsOwnRequestID(t *testing.T) {
	p := start(t)
	g := p.g
	id := p.created("k1", refundBody)
	answers := []answer{
		p.create("k1", refundBody),
		p.do(http.MethodGet, "/v1/requests/"+id, ""),
		p.do(http.MethodGet, "/v1/requests/"+id+"?wait=x", ""),
		p.do(http.MethodDelete, "/v1/requests/"+id, ""),
		p.do(http.MethodGet, "/nowhere", ""),
		p.do(http.MethodGet, "/v1/requests/"+id, "", "Authorization", ""),
	}
	seen := map[string]bool{}
	for _, a := range answers {
		rid := a.header.Get("X-Request-ID")
		g.Expect(seen).NotTo(HaveKey(rid))
		seen[rid] = true
		if a.status >= 400 {
			g.Expect(a.obj["error"]).To(HaveKeyWithValue("request_id", rid))
		}
	}
}

// FailNext answers with the status asked for, an ErrorResponse of the status's type and Retry-After;
// the requests it fails change nothing.
func TestFailNextAnswersErrorsWithRetryAfter(t *testing.T) {
	cases := []struct {
		status     int
		retryAfter time.Duration
		header     string
	}{
		{http.StatusServiceUnavailable, 3 * time.Second, "3"},
		{http.StatusTooManyRequests, 1500 * time.Millisecond, "2"},
		{http.StatusInternalServerError, 0, ""},
	}
	for _, c := range cases {
		t.Run(http.StatusText(c.status), func(t *testing.T) {
			p := start(t)
			g := p.g
			p.s.FailNext(2, c.status, c.retryAfter)
			for range 2 {
				a := p.create("k", refundBody)
				expectError(g, a, c.status, defaultCode(c.status), "")
				g.Expect(a.header.Get("Retry-After")).To(Equal(c.header))
			}
			g.Expect(p.s.List()).To(BeEmpty(), "a failed request is not applied")
			g.Expect(p.create("k", refundBody).status).To(Equal(http.StatusCreated))
		})
	}
	t.Run("cleared", func(t *testing.T) {
		p := start(t)
		p.s.FailNext(5, http.StatusServiceUnavailable, time.Second)
		p.s.FailNext(0, 0, 0)
		p.g.Expect(p.create("k", refundBody).status).To(Equal(http.StatusCreated))
	})
	t.Run("not an error status", func(t *testing.T) {
		p := start(t)
		p.g.Expect(func() { p.s.FailNext(1, http.StatusOK, 0) }).To(PanicWith(ContainSubstring("needs an error status")))
	})
}

// A dropped response is a lost one: the request is applied, the connection closes unanswered, and a
// replay with the same key recovers the same request.
func TestDropNextResponseAppliesTheRequestAndAnswersNothing(t *testing.T) {
	p := start(t)
	g := p.g
	p.s.DropNextResponse(1)
	_, err := p.send(http.MethodPost, "/v1/requests", refundBody, "Idempotency-Key", "lost")
	g.Expect(err).To(HaveOccurred(), "no answer arrives")
	held, ok := p.s.ByKey("lost")
	g.Expect(ok).To(BeTrue(), "the request was applied")
	a := p.create("lost", refundBody)
	g.Expect(a.status).To(Equal(http.StatusOK))
	g.Expect(a.obj["id"]).To(Equal(held.ID))
	g.Expect(p.s.List()).To(HaveLen(1))

	// A dropped DELETE cancels all the same.
	p.s.DropNextResponse(1)
	_, err = p.send(http.MethodDelete, "/v1/requests/"+held.ID, "")
	g.Expect(err).To(HaveOccurred())
	got, _ := p.s.Get(held.ID)
	g.Expect(got.Status).To(Equal(StatusCancelled))

	log := p.s.Log()
	g.Expect(log).To(HaveLen(3))
	g.Expect(log[0]).To(MatchFields(http.MethodPost, http.StatusCreated, true))
	g.Expect(log[1]).To(MatchFields(http.MethodPost, http.StatusOK, false))
	g.Expect(log[2]).To(MatchFields(http.MethodDelete, http.StatusOK, true))
}

// MatchFields matches an Exchange's method, status and Dropped.
func MatchFields(method string, status int, dropped bool) OmegaMatcher {
	return And(HaveField("Method", method), HaveField("Status", status), HaveField("Dropped", dropped))
}

func TestLogRecordsEveryExchange(t *testing.T) {
	p := start(t)
	g := p.g
	id := p.created("k1", refundBody)
	p.create("k1", `{"tool":"other","arguments":{},"timeout":"1m"}`)
	p.do(http.MethodGet, "/v1/requests/"+id+"?wait=1s", "", "Idempotency-Key", "")
	p.do(http.MethodGet, "/v1/requests/"+id+"?wait=soon", "")
	p.do(http.MethodPost, "/v1/requests", refundBody, "Idempotency-Key", "")
	p.do(http.MethodDelete, "/v1/requests/"+id, "", "Authorization", "Bearer wrong")
	log := p.s.Log()
	g.Expect(log).To(HaveLen(6))
	want := []struct {
		method string
		status int
		code   string
		key    string
	}{
		{http.MethodPost, 201, "", "k1"},
		{http.MethodPost, 409, "idempotency_conflict", "k1"},
		{http.MethodGet, 200, "", ""},
		{http.MethodGet, 400, "invalid_request", ""},
		{http.MethodPost, 400, "invalid_request", ""},
		{http.MethodDelete, 401, "unauthenticated", ""},
	}
	for i, w := range want {
		g.Expect(log[i].Method).To(Equal(w.method), "exchange %d", i)
		g.Expect(log[i].Status).To(Equal(w.status), "exchange %d", i)
		g.Expect(log[i].Code).To(Equal(w.code), "exchange %d", i)
		g.Expect(log[i].IdempotencyKey).To(Equal(w.key), "exchange %d", i)
		g.Expect(log[i].Path).To(HavePrefix("/api/aap/v1/requests"))
		g.Expect(log[i].At).NotTo(BeZero())
		g.Expect(log[i].Answered).To(BeTemporally(">=", log[i].At))
	}
	g.Expect(log[2].Query).To(Equal("wait=1s"))
	g.Expect(log[2].Answered.Sub(log[2].At)).To(BeNumerically(">=", time.Second), "the held poll")
	g.Expect(log[2].Path).To(Equal("/api/aap/v1/requests/" + id))
}
