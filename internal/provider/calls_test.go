package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// --- submit against the reference provider -----------------------------------------------------------------

func TestSubmitCreatesThenReplays(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	ctx := testContext(t)
	s := submission("toolcall-uid-1")
	s.AgentReasoning = "The customer was charged twice."
	s.Context = json.RawMessage(`{"namespace":"payments","toolcall":{"name":"refund-1"}}`)

	first, err := c.Submit(ctx, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.ID).NotTo(BeEmpty())
	g.Expect(first.Tool).To(Equal(tool))
	g.Expect(first.Arguments).To(MatchJSON(arguments))
	g.Expect(first.Timeout).To(Equal("30m"))
	g.Expect(first.AgentReasoning).To(Equal(s.AgentReasoning))
	g.Expect(first.Context).To(MatchJSON(s.Context))
	g.Expect(first.Status).To(Equal(provider.StatusPending))
	g.Expect(first.DeadlineAt.Sub(first.CreatedAt)).To(Equal(30 * time.Minute))
	g.Expect(srv.Stats().Responses[faults.OpSubmit]).To(Equal(map[int]int64{http.StatusCreated: 1}))

	replay, err := c.Submit(ctx, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(replay.ID).To(Equal(first.ID))

	st := srv.Stats()
	g.Expect(st.Responses[faults.OpSubmit]).To(Equal(map[int]int64{http.StatusCreated: 1, http.StatusOK: 1}), "a replay is a 200")
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Expect(st.Replays).To(BeEquivalentTo(1))
	g.Expect(srv.List("")).To(HaveLen(1))

	other, err := c.Submit(ctx, submission("toolcall-uid-2"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.ID).NotTo(Equal(first.ID), "another key is another request")
}

func TestSubmitRecoversLostResponse(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	c := newClient(t, url)
	g.Expect(srv.Faults().Add(faults.Rule{Op: faults.OpSubmit, Kind: faults.DropAfterCommit, Count: 1})).To(Succeed())

	req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusPending))

	all, err := srv.List("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(all).To(HaveLen(1))
	g.Expect(all[0].ID).To(Equal(req.ID), "the recovered request is the one committed before the response was lost")
	st := srv.Stats()
	g.Expect(st.Faults[faults.DropAfterCommit]).To(BeEquivalentTo(1))
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Expect(st.Replays).To(BeEquivalentTo(1))
	g.Expect(st.Responses[faults.OpSubmit]).To(Equal(map[int]int64{0: 1, http.StatusOK: 1}))
}

func TestSubmitRetriesTransientFailures(t *testing.T) {
	cases := []struct {
		name          string
		rule          faults.Rule
		wantResponses map[int]int64
		wantFailures  []string
	}{
		{
			name:          "connection reset twice",
			rule:          faults.Rule{Op: faults.OpSubmit, Kind: faults.Reset, Count: 2},
			wantResponses: map[int]int64{0: 2, http.StatusCreated: 1},
		},
		{
			name:          "503 twice",
			rule:          faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Count: 2},
			wantResponses: map[int]int64{http.StatusServiceUnavailable: 2, http.StatusCreated: 1},
			wantFailures:  []string{"submit/unavailable", "submit/unavailable"},
		},
		{
			name:          "500 once",
			rule:          faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Status: 500, Count: 1},
			wantResponses: map[int]int64{http.StatusInternalServerError: 1, http.StatusCreated: 1},
			wantFailures:  []string{"submit/internal"},
		},
		{
			name:          "a plain-text 502 on any operation",
			rule:          faults.Rule{Op: faults.OpAny, Kind: faults.Error5xx, Status: 502, Count: 3},
			wantResponses: map[int]int64{http.StatusBadGateway: 3, http.StatusCreated: 1},
			wantFailures:  []string{"submit/unavailable", "submit/unavailable", "submit/unavailable"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			f := newFailures()
			c := newClient(t, url, f.option)
			g.Expect(srv.Faults().Add(tc.rule)).To(Succeed())

			req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.Status).To(Equal(provider.StatusPending))

			st := srv.Stats()
			g.Expect(st.Faults[tc.rule.Kind]).To(BeEquivalentTo(tc.rule.Count))
			g.Expect(st.Responses[faults.OpSubmit]).To(Equal(tc.wantResponses))
			g.Expect(st.Creates).To(BeEquivalentTo(1))
			g.Expect(srv.List("")).To(HaveLen(1))
			g.Expect(srv.Faults().Rules()).To(BeEmpty())
			if tc.wantFailures != nil {
				g.Expect(f.codes()).To(Equal(tc.wantFailures))
				g.Expect(f.attemptsOf("submit")).To(Equal(len(tc.wantFailures)+1), "every attempt is counted: each failed one and the one that succeeded")
			} else {
				// A reset may be replayed by the transport itself; the client saw at most every reset.
				g.Expect(len(f.codes())).To(BeNumerically("<=", tc.rule.Count))
			}
		})
	}
}

func TestSubmitHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	f := newFailures()
	c := newClient(t, url, f.option)
	g.Expect(srv.Faults().Add(faults.Rule{
		Op: faults.OpSubmit, Kind: faults.RateLimit, RetryAfter: time.Second, Count: 1,
	})).To(Succeed())

	start := time.Now()
	req, err := c.Submit(testContext(t), submission("toolcall-uid-1"))
	elapsed := time.Since(start)

	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusPending))
	// The backoff (at most 15ms here) is raised to the provider's Retry-After.
	g.Expect(elapsed).To(BeNumerically(">=", 950*time.Millisecond))
	g.Expect(f.codes()).To(Equal([]string{"submit/" + provider.CodeRateLimited}))
	st := srv.Stats()
	g.Expect(st.Responses[faults.OpSubmit]).To(Equal(map[int]int64{http.StatusTooManyRequests: 1, http.StatusCreated: 1}))
	g.Expect(st.Creates).To(BeEquivalentTo(1))
}

// A second submission with the key of one still being processed waits for it, then replays it: one
// request, and no error on either.
func TestSubmitConcurrentWithTheSameKeyReplays(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	g.Expect(srv.Faults().Add(faults.Rule{
		Op: faults.OpSubmit, Kind: faults.Delay, Delay: 2 * time.Second, Count: 1,
	})).To(Succeed())
	ctx := testContext(t)

	type result struct {
		req *provider.Request
		err error
	}
	firstDone := make(chan result, 1)
	first := newClient(t, url)
	go func() {
		req, err := first.Submit(ctx, submission("toolcall-uid-1"))
		firstDone <- result{req, err}
	}()
	// The first submission is delayed while holding its Idempotency-Key.
	g.Eventually(func() int64 { return srv.Stats().InFlight }).Should(BeEquivalentTo(1))

	f := newFailures()
	second := newClient(t, url, f.option)
	dup, err := second.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(err).NotTo(HaveOccurred())

	var r result
	g.Eventually(firstDone).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(dup.ID).To(Equal(r.req.ID))
	g.Expect(f.codes()).To(BeEmpty())
	st := srv.Stats()
	g.Expect(st.Responses[faults.OpSubmit]).To(Equal(map[int]int64{http.StatusCreated: 1, http.StatusOK: 1}))
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Expect(st.Replays).To(BeEquivalentTo(1))
	g.Expect(srv.List("")).To(HaveLen(1))
}

func TestRetriesStatusesTheReferenceCannotProduce(t *testing.T) {
	cases := []struct {
		name     string
		answers  func(t *testing.T, n int64, w http.ResponseWriter)
		attempts int
		wantHits int64
		wantErr  *provider.Error
	}{
		{
			name:     "408 then created",
			answers:  failOnceThenCreated(http.StatusRequestTimeout, "text/plain", "request timeout"),
			wantHits: 2,
		},
		{
			name:     "an HTML 502 then created",
			answers:  failOnceThenCreated(http.StatusBadGateway, "text/html", "<html><body>bad gateway</body></html>"),
			wantHits: 2,
		},
		{
			name:     "an HTML 504 then created",
			answers:  failOnceThenCreated(http.StatusGatewayTimeout, "text/html", "<html><body>gateway timeout</body></html>"),
			wantHits: 2,
		},
		{
			// The first attempt was committed before its 503: the retry is a replay, answered 200.
			name: "503 then the replay answered 200",
			answers: func(t *testing.T, n int64, w http.ResponseWriter) {
				if n == 1 {
					respond(w, http.StatusServiceUnavailable, "text/plain", []byte("try later"))
					return
				}
				respond(w, http.StatusOK, provider.ContentTypeJSON, requestJSON(t, nil))
			},
			wantHits: 2,
		},
		{
			// A proxy's error page over the body bound is still the 503 it says it is.
			name:     "503 page larger than the body bound then created",
			answers:  failOnceThenCreated(http.StatusServiceUnavailable, "text/html", "<html>"+strings.Repeat("unavailable ", 1<<20)+"</html>"),
			wantHits: 2,
		},
		{
			name: "a plain-text 500 until attempts run out",
			answers: func(_ *testing.T, _ int64, w http.ResponseWriter) {
				respond(w, http.StatusInternalServerError, "text/plain", []byte("oops"))
			},
			attempts: 3,
			wantHits: 3,
			wantErr: &provider.Error{Op: "submit", StatusCode: 500, Code: provider.CodeInternal,
				Detail: "Internal Server Error", Retryable: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv := startCanned(t, func(n int64, w http.ResponseWriter, _ *http.Request) { tc.answers(t, n, w) })
			ctx := testContext(t)
			opts := []func(*provider.Options){}
			if tc.attempts > 0 {
				lim := limitAttempts(tc.attempts)
				ctx, opts = lim.ctx(t), append(opts, lim.option)
			}
			c := newClient(t, srv.url, opts...)

			req, err := c.Submit(ctx, submission("toolcall-uid-1"))
			g.Expect(srv.hits.Load()).To(Equal(tc.wantHits))
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(req.ID).To(Equal(requestID))
				return
			}
			g.Expect(req).To(BeNil())
			g.Expect(providerError(g, err)).To(Equal(tc.wantErr))
		})
	}
}

// failOnceThenCreated answers the first call with status and body, and every later one with 201.
func failOnceThenCreated(status int, contentType, body string) func(*testing.T, int64, http.ResponseWriter) {
	return func(t *testing.T, n int64, w http.ResponseWriter) {
		if n == 1 {
			respond(w, status, contentType, []byte(body))
			return
		}
		respond(w, http.StatusCreated, provider.ContentTypeJSON, requestJSON(t, nil))
	}
}

func TestNotRetried(t *testing.T) {
	cases := []struct {
		name       string
		credential string
		call       func(context.Context, *testing.T, *provider.HTTPClient, *reference.Server) (*provider.Request, error)
		status     int
		code       string
		detail     []string
		attempts   func(reference.Stats) int64
	}{
		{
			name: "400 timeout over the provider's 24h",
			call: func(ctx context.Context, _ *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				s := submission("toolcall-uid-1")
				s.Timeout = 25 * time.Hour
				return c.Submit(ctx, s)
			},
			status: http.StatusBadRequest, code: provider.CodeInvalidRequest, detail: []string{"25h", "(param: timeout)"},
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
		{
			name:       "401 wrong credential",
			credential: "tg-some-other-credential",
			call: func(ctx context.Context, _ *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				return c.Submit(ctx, submission("toolcall-uid-1"))
			},
			status: http.StatusUnauthorized, code: provider.CodeUnauthenticated,
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
		{
			name: "404 wait for an unknown id",
			call: func(ctx context.Context, t *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				return c.Wait(ctx, refFor(t, unknownID()), time.Second)
			},
			status: http.StatusNotFound, code: provider.CodeNotFound,
			attempts: func(s reference.Stats) int64 { return s.Gets },
		},
		{
			name: "404 cancel of an unknown id",
			call: func(ctx context.Context, t *testing.T, c *provider.HTTPClient, _ *reference.Server) (*provider.Request, error) {
				return c.Cancel(ctx, refFor(t, unknownID()))
			},
			status: http.StatusNotFound, code: provider.CodeCancelUnsupported,
			attempts: func(s reference.Stats) int64 { return s.Cancels },
		},
		{
			name: "409 same key with other arguments",
			call: func(ctx context.Context, t *testing.T, c *provider.HTTPClient, srv *reference.Server) (*provider.Request, error) {
				if _, err := c.Submit(ctx, submission("toolcall-uid-1")); err != nil {
					return nil, err
				}
				srv.ResetStats()
				s := submission("toolcall-uid-1")
				s.Arguments = json.RawMessage(`{"payment_id": "payment_123", "amount": 4901, "currency": "GBP"}`)
				return c.Submit(ctx, s)
			},
			status: http.StatusConflict, code: provider.CodeIdempotencyConflict, detail: []string{"Idempotency-Key"},
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
		{
			name: "409 same key with another agent_reasoning",
			call: func(ctx context.Context, t *testing.T, c *provider.HTTPClient, srv *reference.Server) (*provider.Request, error) {
				if _, err := c.Submit(ctx, submission("toolcall-uid-1")); err != nil {
					return nil, err
				}
				srv.ResetStats()
				s := submission("toolcall-uid-1")
				s.AgentReasoning = "changed my mind"
				return c.Submit(ctx, s)
			},
			status: http.StatusConflict, code: provider.CodeIdempotencyConflict,
			attempts: func(s reference.Stats) int64 { return s.Submits },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			f := newFailures()
			opts := []func(*provider.Options){f.option}
			if tc.credential != "" {
				opts = append(opts, func(o *provider.Options) { o.CredentialFile = writeFile(t, "other", tc.credential) })
			}
			c := newClient(t, url, opts...)

			req, err := tc.call(testContext(t), t, c, srv)
			g.Expect(req).To(BeNil())
			pe := providerError(g, err)
			g.Expect(pe.Code).To(Equal(tc.code), err.Error())
			g.Expect(pe.StatusCode).To(Equal(tc.status))
			g.Expect(pe.Retryable).To(BeFalse())
			g.Expect(provider.IsUntrusted(err)).To(BeFalse())
			g.Expect(pe.Detail).NotTo(BeEmpty(), "the provider's message is kept")
			for _, want := range tc.detail {
				g.Expect(pe.Detail).To(ContainSubstring(want))
			}
			g.Expect(tc.attempts(srv.Stats())).To(BeEquivalentTo(1), "exactly one attempt reached the provider")
			g.Expect(f.codes()).To(HaveLen(1))
			g.Expect(srv.Stats().Creates).To(BeZero())
		})
	}
}

// A call is retried until its context ends, and gives up at once, with its last failure, when the
// next attempt would begin after the context's deadline instead of sleeping out a backoff to fail there.
func TestRetriesEndWhenTheNextAttemptWouldMissTheDeadline(t *testing.T) {
	t.Parallel()
	g := newG(t)
	srv, url := startProvider(t)
	g.Expect(srv.Faults().Add(faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Probability: 1})).To(Succeed())
	c := newClient(t, url, func(o *provider.Options) { o.BackoffBase, o.BackoffCap = time.Hour, time.Hour })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	req, err := c.Submit(ctx, submission("toolcall-uid-1"))
	g.Expect(ctx.Err()).NotTo(HaveOccurred(), "the call returned before its deadline")
	g.Expect(req).To(BeNil())
	pe := providerError(g, err)
	g.Expect(pe.Code).To(Equal(provider.CodeUnavailable))
	g.Expect(pe.StatusCode).To(Equal(http.StatusServiceUnavailable))
	g.Expect(pe.Retryable).To(BeTrue(), "the last error is still a retryable one")
	g.Expect(srv.Stats().Submits).To(BeEquivalentTo(1))
	g.Expect(srv.Stats().Creates).To(BeZero())
}

func TestContextCancellationStopsRetries(t *testing.T) {
	cases := []struct {
		name string
		rule faults.Rule
		// fired reports that the first attempt reached the point where the client is stuck.
		fired    func(reference.Stats) bool
		wantCode string
		canceled bool
	}{
		{
			name: "while backing off for a long Retry-After",
			rule: faults.Rule{Op: faults.OpSubmit, Kind: faults.RateLimit, RetryAfter: time.Minute, Probability: 1},
			fired: func(s reference.Stats) bool {
				return s.Responses[faults.OpSubmit][http.StatusTooManyRequests] == 1
			},
			wantCode: provider.CodeRateLimited,
		},
		{
			name:     "while an attempt is in flight",
			rule:     faults.Rule{Op: faults.OpSubmit, Kind: faults.Delay, Delay: time.Minute, Count: 1},
			fired:    func(s reference.Stats) bool { return s.InFlight == 1 },
			wantCode: provider.CodeNetwork,
			canceled: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			srv, url := startProvider(t)
			g.Expect(srv.Faults().Add(tc.rule)).To(Succeed())
			c := newClient(t, url)

			// No deadline: a Retry-After is waited out until the caller gives up.
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				req *provider.Request
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				req, err := c.Submit(ctx, submission("toolcall-uid-1"))
				done <- result{req, err, time.Now()}
			}()
			g.Eventually(func() bool { return tc.fired(srv.Stats()) }).Should(BeTrue())
			g.Consistently(done, 100*time.Millisecond).ShouldNot(Receive(), "the client keeps trying until cancelled")

			cancelled := time.Now()
			cancel()
			var r result
			g.Eventually(done, 5*time.Second).Should(Receive(&r))
			g.Expect(r.at.Sub(cancelled)).To(BeNumerically("<", 2*time.Second))
			g.Expect(r.req).To(BeNil())
			pe := providerError(g, r.err)
			g.Expect(pe.Code).To(Equal(tc.wantCode))
			g.Expect(errors.Is(r.err, context.Canceled)).To(Equal(tc.canceled))

			g.Expect(srv.Stats().Submits).To(BeEquivalentTo(1), "no attempt after the cancellation")
			// The abandoned submission is not performed.
			g.Eventually(func() int64 { return srv.Stats().InFlight }).Should(BeZero())
			g.Expect(srv.Stats().Creates).To(BeZero())
			g.Expect(srv.List("")).To(BeEmpty())
		})
	}
}
