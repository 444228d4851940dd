package reference

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The destination check runs on the address every connection dials, after name resolution, so a
// name that resolves to a refused address later (DNS rebinding) cannot be reached.
func TestEveryConnectionChecksItsAddress(t *testing.T) {
	g := NewWithT(t)
	var hits atomic.Int64
	rc := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(rc.Close)
	_, port, _ := strings.Cut(strings.TrimPrefix(rc.URL, "https://"), ":")

	s, err := New(Options{Credential: "c"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(s.Close()).To(Succeed()) })
	for _, url := range []string{rc.URL, "https://localhost:" + port} {
		_, err = s.webhooks.Post(url, "application/json", strings.NewReader("{}"))
		g.Expect(err).To(MatchError(errForbiddenDestination), url)
	}
	g.Expect(hits.Load()).To(BeZero(), "no connection was made")
	for _, addr := range []string{"127.0.0.1:443", "10.0.0.1:443", "[::1]:443", "169.254.169.254:80", "[fd00:ec2::254]:80", "[::ffff:10.0.0.1]:443"} {
		g.Expect(s.controlDial("tcp", addr, nil)).To(MatchError(errForbiddenDestination), addr)
	}
	g.Expect(s.controlDial("tcp", "93.184.215.14:443", nil)).To(Succeed())
	g.Expect(s.controlDial("tcp", "[2606:4700::1]:443", nil)).To(Succeed())

	allowed, err := New(Options{Credential: "c", AllowedWebhookNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(allowed.Close()).To(Succeed()) })
	allowed.webhooks.Transport.(*http.Transport).TLSClientConfig.RootCAs = rc.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	resp, err := allowed.webhooks.Post(rc.URL, "application/json", strings.NewReader("{}"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Body.Close()).To(Succeed())
	g.Expect(hits.Load()).To(BeEquivalentTo(1))
}

// Outbound webhook exchanges are bounded per receiver host and in all.
func TestWebhookConcurrencyIsBounded(t *testing.T) {
	g := NewWithT(t)
	l := newWebhookLimiter()
	var releases []func()
	for i := range maxWebhookHostConcurrency {
		release, err := l.acquire(t.Context(), "https://receiver.example/aap/"+strconv.Itoa(i))
		g.Expect(err).NotTo(HaveOccurred())
		releases = append(releases, release)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := l.acquire(ctx, "https://receiver.example/other")
	g.Expect(err).To(MatchError(context.DeadlineExceeded), "a fifth exchange with one host waits")
	other, err := l.acquire(t.Context(), "https://elsewhere.example/aap")
	g.Expect(err).NotTo(HaveOccurred(), "another host has its own slots")
	other()
	releases[0]()
	release, err := l.acquire(t.Context(), "https://receiver.example/aap")
	g.Expect(err).NotTo(HaveOccurred(), "a slot freed")
	release()

	held := maxWebhookHostConcurrency - 1 // releases[1:] still hold theirs
	for i := held; i < maxWebhookConcurrency; i++ {
		release, err := l.acquire(t.Context(), "https://host"+strconv.Itoa(i)+".example/")
		g.Expect(err).NotTo(HaveOccurred())
		defer release()
	}
	ctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = l.acquire(ctx, "https://one-more.example/")
	g.Expect(err).To(MatchError(context.DeadlineExceeded), "no more than maxWebhookConcurrency in all")
}

// The wait before a retry: backoff with jitter, and at least Retry-After on 429 and 503 only.
func TestRetryDelay(t *testing.T) {
	g := NewWithT(t)
	answer := func(status int, retryAfter string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {retryAfter}}}
	}
	for attempts, base := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 9: 2560 * time.Second, 10: time.Hour, 100: time.Hour} {
		g.Expect(retryDelay(firstRetryDelay, maxRetryDelay, attempts, nil)).To(And(BeNumerically(">=", base), BeNumerically("<", base+base/5)), "attempt %d", attempts)
	}
	g.Expect(retryDelay(firstRetryDelay, maxRetryDelay, 1, answer(http.StatusTooManyRequests, "120"))).To(Equal(120 * time.Second))
	g.Expect(retryDelay(firstRetryDelay, maxRetryDelay, 1, answer(http.StatusServiceUnavailable, "1"))).To(BeNumerically(">=", 10*time.Second), "never sooner than the backoff")
	g.Expect(retryDelay(firstRetryDelay, maxRetryDelay, 1, answer(http.StatusInternalServerError, "120"))).To(BeNumerically("<", 12*time.Second), "Retry-After counts on 429 and 503")
	date := answer(http.StatusServiceUnavailable, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
	g.Expect(retryDelay(firstRetryDelay, maxRetryDelay, 1, date)).To(And(BeNumerically(">", 58*time.Minute), BeNumerically("<=", time.Hour)))
	g.Expect(retryDelay(firstRetryDelay, maxRetryDelay, 1, answer(http.StatusServiceUnavailable, "soon"))).To(BeNumerically("<", 12*time.Second))
}
