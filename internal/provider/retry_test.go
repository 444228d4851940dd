package provider_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
)

// AAP: an adapter respects Retry-After or stops waiting. One that would end past the caller's
// deadline stops the call at once, with the error that asked for the wait.
func TestRetryAfterPastTheDeadlineStopsWaiting(t *testing.T) {
	cases := []struct {
		name, retryAfter string
		status           int
		code             string
	}{
		{"429 with a delay in seconds", "60", http.StatusTooManyRequests, provider.CodeRateLimited},
		{"503 with an HTTP date", time.Now().Add(time.Minute).UTC().Format(http.TimeFormat), http.StatusServiceUnavailable, provider.CodeUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv := startCanned(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", tc.retryAfter)
				respondError(t, w, tc.status, tc.code, "slow down")
			})
			c := newClient(t, srv.url)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()

			start := time.Now()
			req, err := c.Submit(ctx, submission("toolcall-uid-1"))
			g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second), "stopped at once, not at the deadline")
			g.Expect(req).To(BeNil())
			pe := providerError(g, err)
			g.Expect(pe.Code).To(Equal(tc.code))
			g.Expect(pe.Retryable).To(BeTrue(), "the error is the provider's, retryable later")
			g.Expect(pe.RetryAfter).To(BeNumerically(">", 50*time.Second))
			g.Expect(ctx.Err()).NotTo(HaveOccurred())
			g.Expect(srv.hits.Load()).To(BeEquivalentTo(1))
		})
	}
}

// A Retry-After that ends before the deadline is a floor under the backoff, in either form.
func TestRetryAfterWithinTheDeadlineIsWaited(t *testing.T) {
	cases := []struct {
		name       string
		retryAfter func() string
		least      time.Duration
	}{
		{"in seconds", func() string { return "2" }, 1950 * time.Millisecond},
		// An HTTP date has whole seconds: 3s from now is at least 2s away.
		{"as an HTTP date", func() string { return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat) }, 1950 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			var mu sync.Mutex
			var at []time.Time
			srv := startCanned(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", tc.retryAfter())
					respondError(t, w, http.StatusServiceUnavailable, provider.CodeUnavailable, "restarting")
					return
				}
				respond(w, http.StatusCreated, provider.ContentTypeJSON, requestJSON(t, nil))
			})
			c := newClient(t, srv.url)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()

			req, err := c.Submit(ctx, submission("toolcall-uid-1"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.ID).To(Equal(requestID))
			mu.Lock()
			defer mu.Unlock()
			g.Expect(at).To(HaveLen(2))
			g.Expect(at[1].Sub(at[0])).To(BeNumerically(">=", tc.least))
		})
	}
}

// Without Retry-After, the delays between attempts grow from BackoffBase, double each time, and stop
// growing at BackoffCap.
func TestBackoffGrowsToItsCap(t *testing.T) {
	t.Parallel()
	g := newG(t)
	const base, ceiling = 20 * time.Millisecond, 160 * time.Millisecond
	var mu sync.Mutex
	var at []time.Time
	// Six failures, then the request is created.
	srv := startCanned(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if n < 7 {
			respond(w, http.StatusBadGateway, "text/html", []byte("<html>bad gateway</html>"))
			return
		}
		respond(w, http.StatusCreated, provider.ContentTypeJSON, requestJSON(t, nil))
	})
	c := newClient(t, srv.url, func(o *provider.Options) { o.BackoffBase, o.BackoffCap = base, ceiling })

	_, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	mu.Lock()
	defer mu.Unlock()
	g.Expect(at).To(HaveLen(7))
	for i := 1; i < len(at); i++ {
		least := min(base<<(i-1), ceiling)
		g.Expect(at[i].Sub(at[i-1])).To(BeNumerically(">=", least-2*time.Millisecond), "delay before attempt %d", i+1)
	}
	// 20, 40, 80, 160, 160 and 160ms with their jitter, none over the cap: the last is not the
	// uncapped 640ms or more.
	g.Expect(at[6].Sub(at[5])).To(BeNumerically("<", 400*time.Millisecond))
}
