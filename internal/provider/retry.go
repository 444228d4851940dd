package provider

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// do runs a call with retries: exponential backoff with jitter and the provider's Retry-After as a
// floor, until the call succeeds, fails with a non-retryable error or ctx ends. A delay (a backoff or
// a Retry-After) that ends past ctx's deadline stops the retries at once: AAP has an adapter respect a
// Retry-After or stop waiting.
//
// A long poll spends its whole wait inside do, attempt and the transport, on a goroutine of its own
// for each waiting request. The frames on that path are kept small (the call travels by pointer;
// building the request, reading the answer and judging a failure are functions of their own, and the
// backoff exists only once an attempt failed) so that the goroutine's stack stays at its smallest
// size while it waits.
func (c *HTTPClient) do(ctx context.Context, cl *call) (*Request, error) {
	var st retryState
	for {
		if ctx.Err() != nil && st.last != nil {
			// The deadline ended the retries: the last failure says why they were needed.
			return nil, st.last
		}
		c.attempted(cl)
		cred := c.credential()
		req, err := c.attempt(ctx, cl, cred)
		if err == nil {
			return req, nil
		}
		delay, pe := c.failed(ctx, cl, err, cred, &st)
		if pe != nil {
			return nil, pe
		}
		if !sleepCtx(ctx, delay) {
			return nil, st.last
		}
	}
}

// retryState is what do carries from one failed attempt to the next.
type retryState struct {
	reloaded bool
	last     *Error
	backoff  *wait.Backoff
}

// attempted tells OnAttempt of an attempt of cl.
func (c *HTTPClient) attempted(cl *call) {
	if c.opts.OnAttempt != nil {
		c.opts.OnAttempt(cl.op)
	}
}

// failed judges a failed attempt: it returns the error to give up with, or the delay before trying again.
func (c *HTTPClient) failed(ctx context.Context, cl *call, err error, cred string, st *retryState) (time.Duration, *Error) {
	var pe *Error
	if !errors.As(err, &pe) {
		pe = &Error{Op: cl.op, Code: CodeNetwork, Retryable: true, Err: err}
	}
	st.last = pe
	if c.opts.OnError != nil {
		c.opts.OnError(cl.op, metricCode(pe.Code))
	}
	if pe.Code == CodeUnauthenticated && !st.reloaded {
		// A rotated Secret: read the credential again and repeat once, if it changed.
		st.reloaded = true
		if rerr := c.reloadCredential(); rerr == nil && c.credential() != cred {
			return 0, nil
		}
	}
	if !pe.Retryable {
		return 0, pe
	}
	if st.backoff == nil {
		st.backoff = &wait.Backoff{Duration: c.opts.BackoffBase, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: c.opts.BackoffCap}
	}
	delay := max(min(st.backoff.Step(), c.opts.BackoffCap), pe.RetryAfter)
	if deadline, ok := ctx.Deadline(); ok && time.Now().Add(delay).After(deadline) {
		// The next attempt would begin too late: AAP has an adapter respect a Retry-After or stop
		// waiting, and sleeping out a backoff only to fail at the deadline tells the caller nothing new.
		return 0, pe
	}
	return delay, nil
}

// sleepCtx waits for d, or less if ctx ends first; it reports whether the whole delay passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date; 0 when absent, unreadable or past.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(math.MaxInt64/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}
