package reference

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// call is one provider API call on its way through authentication, faults and its handler.
type call struct {
	s     *Server
	r     *http.Request
	who   principal
	fault *faults.Rule
}

// delay runs a delay fault, if one fired on the call. It returns errAborted if the client goes away or the
// server closes first.
func (c *call) delay() error {
	if c.fault == nil || c.fault.Kind != faults.Delay {
		return nil
	}
	t := time.NewTimer(c.fault.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.r.Context().Done():
	case <-c.s.done:
	}
	return errAborted
}

// body reads the call's body, at most provider.MaxRequestBodyBytes.
func (c *call) body() ([]byte, *fieldError) {
	data, err := io.ReadAll(io.LimitReader(c.r.Body, provider.MaxRequestBodyBytes+1))
	if err != nil {
		return nil, invalid("", "reading the body: %v", err)
	}
	if int64(len(data)) > provider.MaxRequestBodyBytes {
		return nil, invalid("", "the body is larger than this provider accepts (%d bytes)", provider.MaxRequestBodyBytes)
	}
	return data, nil
}

// idempotencyKey reads the required Idempotency-Key header.
// keyedBody reads what every idempotent write carries: its Idempotency-Key and its body.
func (c *call) keyedBody() (string, []byte, *fieldError) {
	key, ferr := c.idempotencyKey()
	if ferr != nil {
		return "", nil, ferr
	}
	data, ferr := c.body()
	if ferr != nil {
		return "", nil, ferr
	}
	return key, data, nil
}

func (c *call) idempotencyKey() (string, *fieldError) {
	key := c.r.Header.Get(provider.HeaderIdempotencyKey)
	switch {
	case key == "":
		return "", invalid(provider.HeaderIdempotencyKey, "the Idempotency-Key header is required: "+
			"send one key per operation attempt, the same key on every retry of it")
	case len(key) > maxIdempotencyKeyLen:
		return "", invalid(provider.HeaderIdempotencyKey, "the Idempotency-Key is longer than %d bytes", maxIdempotencyKeyLen)
	}
	return key, nil
}

const maxIdempotencyKeyLen = 255

// api wraps a provider API handler: it counts the call, authenticates it, checks the caller's role,
// fires faults and writes (or withholds) the reply. The outcome is counted before the client can
// see it.
func (s *Server) api(op faults.Op, need role, h func(*call) reply) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.stats.call(op)
		respond := func(rp reply) {
			s.stats.response(op, rp.status)
			write(w, s.shape(rp))
		}
		who, ok := s.authenticate(r)
		switch {
		case !ok:
			respond(unauthenticated("a valid bearer credential is required"))
			return
		case who.provisioner != (need == roleProvisioner):
			respond(wrongRole(need))
			return
		}
		c := &call{s: s, r: r, who: who}
		if rule, fired := s.faults.Fire(op); fired {
			s.stats.fault(rule.Kind)
			c.fault = &rule
			if rule.Kind == faults.Reset {
				s.stats.response(op, 0)
				closeConn(w, true)
				return
			}
			if rp, preempted := preempt(rule); preempted {
				respond(rp)
				return
			}
		}
		rp := h(c)
		if c.fault != nil && c.fault.Kind == faults.DropAfterCommit {
			s.stats.response(op, 0)
			closeConn(w, false)
			return
		}
		respond(rp)
	})
}

// preempt returns the reply of a fault that answers instead of the operation. A 500 or 503 is an
// ErrorResponse; any other 5xx is plain text, as an intermediary in front of a provider sends it.
func preempt(rule faults.Rule) (reply, bool) {
	var rp reply
	switch rule.Kind {
	case faults.RateLimit:
		return fail(provider.CodeRateLimited, "injected rate limit: retry after the Retry-After delay").
			with("Retry-After", retryAfter(rule.RetryAfter)), true
	case faults.Error5xx:
		switch rule.Status {
		case http.StatusInternalServerError:
			rp = fail(provider.CodeInternal, "injected internal error")
		case http.StatusServiceUnavailable:
			rp = fail(provider.CodeUnavailable, "injected unavailability")
		default:
			rp = reply{status: rule.Status, body: plainText(strconv.Itoa(rule.Status) + " " + http.StatusText(rule.Status))}
		}
	default:
		return reply{}, false
	}
	if rule.RetryAfter > 0 {
		rp = rp.with("Retry-After", retryAfter(rule.RetryAfter))
	}
	return rp, true
}

// retryAfter renders a duration as Retry-After seconds, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// closeConn takes the connection from the HTTP server and closes it without a response: with a reset
// (RST from the TCP connection itself, no TLS close_notify, no lingering) or an orderly close (the client
// reads EOF).
func closeConn(w http.ResponseWriter, reset bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // the server cannot hand the connection over: abort the response instead
	}
	if reset {
		if tlsConn, ok := conn.(interface{ NetConn() net.Conn }); ok {
			conn = tlsConn.NetConn()
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
	}
	_ = conn.Close()
}
