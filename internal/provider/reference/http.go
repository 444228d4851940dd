package reference

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"toolgate.dev/toolgate/internal/provider"
)

const maxIdempotencyKeyLen = 255

// reply is what a handler answers. A zero status writes nothing (the client went away).
type reply struct {
	status int
	header http.Header
	body   any // provider.Request, []provider.Request, provider.Problem, ...
}

func success(status int, body any) reply { return reply{status: status, body: body} }

func problem(status int, code, detail string) reply {
	return reply{status: status, body: provider.Problem{
		Title: http.StatusText(status), Status: status, Detail: detail, Code: code,
	}}
}

func (rp reply) with(key, value string) reply {
	if rp.header == nil {
		rp.header = http.Header{}
	}
	rp.header.Set(key, value)
	return rp
}

// call is one provider API call on its way through faults and its handler.
type call struct {
	s     *Server
	r     *http.Request
	fault *FaultRule
}

// delay runs a delay fault, if one fired on the call. It returns errAborted if the client goes away or the
// server closes first.
func (c *call) delay() error {
	if c.fault == nil || c.fault.Kind != FaultDelay {
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

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		write(w, success(http.StatusOK, map[string]string{"status": "ok"}))
	})
	mux.Handle("POST /v1/requests", s.api(OpSubmit, s.handleSubmit))
	mux.Handle("GET /v1/requests/{id}", s.api(OpGet, s.handleGet))
	apiPaths := []string{"/v1/requests", "/v1/requests/{id}"}
	if s.opts.Profile != ProfileSeed {
		mux.Handle("POST /v1/requests/{id}/cancel", s.api(OpCancel, s.handleCancel))
		apiPaths = append(apiPaths, "/v1/requests/{id}/cancel")
	}
	mux.Handle("POST /admin/v1/requests/{id}/decide", s.approverAPI(s.handleDecide))
	mux.Handle("GET /admin/v1/requests", s.approverAPI(func(r *http.Request, _ string) reply { return s.handleList(r) }))
	mux.Handle("GET /admin/v1/faults", s.adminAPI(s.handleFaultsGet))
	mux.Handle("POST /admin/v1/faults", s.adminAPI(s.handleFaultsAdd))
	mux.Handle("PUT /admin/v1/faults", s.adminAPI(s.handleFaultsSet))
	mux.Handle("DELETE /admin/v1/faults", s.adminAPI(s.handleFaultsClear))
	mux.Handle("GET /admin/v1/stats", s.adminAPI(s.handleStats))
	for _, path := range append(apiPaths, "/admin/v1/requests", "/admin/v1/requests/{id}/decide", "/admin/v1/faults", "/admin/v1/stats", "/healthz") {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			write(w, s.shape(problem(http.StatusMethodNotAllowed, provider.CodeInvalidRequest, r.Method+" is not allowed here")))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		write(w, s.shape(problem(http.StatusNotFound, provider.CodeNotFound, "no such endpoint: "+r.URL.Path)))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(provider.HeaderRequestID, uuid.NewString())
		mux.ServeHTTP(w, r)
	})
}

// api wraps a provider API handler: it counts the call, authenticates it, fires faults and writes (or
// withholds) the reply. The outcome is counted before the client can see it.
func (s *Server) api(op Operation, h func(*call) reply) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.stats.call(op)
		respond := func(rp reply) {
			s.stats.response(op, rp.status)
			write(w, s.shape(rp))
		}
		if !authorised(r, s.credential) {
			respond(unauthenticated())
			return
		}
		c := &call{s: s, r: r}
		if rule, fired := s.faults.fire(op); fired {
			s.stats.fault(rule.Kind)
			c.fault = &rule
			if rule.Kind == FaultReset {
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
		if c.fault != nil && c.fault.Kind == FaultDropAfterCommit {
			s.stats.response(op, 0)
			closeConn(w, false)
			return
		}
		respond(rp)
	})
}

// preempt returns the reply of a fault that answers instead of the operation.
func preempt(rule FaultRule) (reply, bool) {
	switch rule.Kind {
	case FaultRateLimit:
		return problem(http.StatusTooManyRequests, provider.CodeRateLimited, "injected rate limit").
			with("Retry-After", retryAfter(rule.RetryAfter)), true
	case FaultError5xx:
		rp := problem(rule.Status, provider.CodeInternal, "injected server error")
		if rule.RetryAfter > 0 {
			rp = rp.with("Retry-After", retryAfter(rule.RetryAfter))
		}
		return rp, true
	}
	return reply{}, false
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

// adminAPI wraps an admin handler: it authenticates with the admin credential and writes the reply.
func (s *Server) adminAPI(h func(*http.Request) reply) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorised(r, s.admin) {
			write(w, unauthenticated())
			return
		}
		write(w, h(r))
	})
}

func authorised(r *http.Request, want [sha256.Size]byte) bool {
	scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func unauthenticated() reply {
	return problem(http.StatusUnauthorized, provider.CodeUnauthenticated, "a valid bearer credential is required").
		with("WWW-Authenticate", "Bearer")
}

// plainText is an error body of the seed profile: text, not problem+json.
type plainText string

// shape renders a provider API reply in the server's profile. The seed profile sends the seed's
// fields only, and errors as plain text.
func (s *Server) shape(rp reply) reply {
	if s.opts.Profile != ProfileSeed {
		return rp
	}
	switch b := rp.body.(type) {
	case provider.Request:
		b.ArgumentsSHA256 = ""
		b.Requester = ""
		rp.body = b
	case provider.Problem:
		rp.body = plainText(b.Detail)
	}
	return rp
}

// write sends a reply; a zero status sends nothing.
func write(w http.ResponseWriter, rp reply) {
	if rp.status == 0 {
		return
	}
	for k, v := range rp.header {
		w.Header()[k] = v
	}
	if text, isText := rp.body.(plainText); isText {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, string(text)+"\n")
		return
	}
	contentType := provider.ContentTypeJSON
	if _, isProblem := rp.body.(provider.Problem); isProblem {
		contentType = provider.ContentTypeProblemJSON
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(rp.status)
	_ = json.NewEncoder(w).Encode(rp.body) // a failed write means the client went away
}

func (s *Server) handleSubmit(c *call) reply {
	key := c.r.Header.Get(provider.HeaderIdempotencyKey)
	if key == "" {
		return problem(http.StatusBadRequest, provider.CodeIdempotencyKeyMissing, "the Idempotency-Key header is required")
	}
	if len(key) > maxIdempotencyKeyLen {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest,
			fmt.Sprintf("the Idempotency-Key is longer than %d bytes", maxIdempotencyKeyLen))
	}
	sub, rp, valid := s.parseSubmission(c.r)
	if !valid {
		return rp
	}
	sub.key = key
	if s.opts.Profile != ProfileSeed { // a provider written from the seed alone does not know the header
		sub.requester = requester(c.r.Header.Get(provider.HeaderRequester))
	}
	req, replayed, err := s.submit(sub, c.delay)
	switch {
	case errors.Is(err, errInFlight):
		return problem(http.StatusConflict, provider.CodeIdempotencyInFlight,
			"a submission with this Idempotency-Key is still being processed").with("Retry-After", "1")
	case errors.Is(err, errAborted):
		return reply{}
	case errors.Is(err, errKeyReused):
		return problem(http.StatusUnprocessableEntity, provider.CodeIdempotencyKeyReused,
			"this Idempotency-Key was used with a different tool, arguments or timeout")
	case err != nil:
		return s.failure(err)
	case replayed && s.opts.Profile == ProfileSeed:
		return success(http.StatusCreated, req) // answered as the creation was
	case replayed:
		return success(http.StatusOK, req).with(provider.HeaderIdempotentReplayed, "true")
	}
	return success(http.StatusCreated, req)
}

// maxRequesterLen bounds the requester a submission records.
const maxRequesterLen = 256

// requester decodes the optional Toolgate-Requester header (percent-encoded; a value that does not
// decode is kept as sent) and bounds its length. The page escapes it like every submitted text.
func requester(header string) string {
	v, err := url.PathUnescape(header)
	if err != nil || !utf8.ValidString(v) {
		v = header
	}
	if len(v) > maxRequesterLen {
		v = strings.ToValidUTF8(v[:maxRequesterLen], "") + "…"
	}
	return v
}

// parseSubmission reads and validates a submission body; on failure it returns the problem reply.
func (s *Server) parseSubmission(r *http.Request) (submission, reply, bool) {
	data, err := io.ReadAll(io.LimitReader(r.Body, provider.MaxRequestBodyBytes+1))
	if err != nil {
		return submission{}, problem(http.StatusBadRequest, provider.CodeInvalidRequest, "reading the body: "+err.Error()), false
	}
	if int64(len(data)) > provider.MaxRequestBodyBytes {
		return submission{}, problem(http.StatusRequestEntityTooLarge, provider.CodeInvalidRequest,
			fmt.Sprintf("the body exceeds %d bytes", provider.MaxRequestBodyBytes)), false
	}
	sub, err := s.validate(data)
	if errors.Is(err, errInvalidTimeout) {
		return submission{}, problem(http.StatusBadRequest, provider.CodeInvalidTimeout, err.Error()), false
	}
	if err != nil {
		return submission{}, problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error()), false
	}
	return sub, reply{}, true
}

var errInvalidTimeout = errors.New("invalid timeout")

func (s *Server) validate(data []byte) (submission, error) {
	var body provider.SubmitBody
	if err := json.Unmarshal(data, &body); err != nil {
		return submission{}, fmt.Errorf("the body is not a valid submission: %w", err)
	}
	if body.Tool == "" {
		return submission{}, errors.New("tool is required")
	}
	var args bytes.Buffer
	if err := json.Compact(&args, body.Arguments); err != nil || !bytes.HasPrefix(args.Bytes(), []byte("{")) {
		return submission{}, errors.New("arguments must be a JSON object")
	}
	sum, err := provider.ArgumentsSHA256(args.Bytes())
	if err != nil {
		return submission{}, err
	}
	timeout, err := time.ParseDuration(body.Timeout)
	if err != nil {
		return submission{}, fmt.Errorf("%w: %q is not a duration", errInvalidTimeout, body.Timeout)
	}
	if timeout < s.opts.MinTimeout || timeout > s.opts.MaxTimeout {
		return submission{}, fmt.Errorf("%w: %v is outside [%v, %v]", errInvalidTimeout, timeout, s.opts.MinTimeout, s.opts.MaxTimeout)
	}
	return submission{
		tool: body.Tool, arguments: args.Bytes(), argumentsSHA256: sum, timeoutText: body.Timeout, timeout: timeout,
	}, nil
}

func (s *Server) handleGet(c *call) reply {
	wait, err := parseWait(c.r.URL.Query().Get("wait"))
	if err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	if err := c.delay(); err != nil {
		return reply{}
	}
	req, err := s.poll(c.r.Context(), c.r.PathValue("id"), wait)
	if c.r.Context().Err() != nil {
		return reply{}
	}
	if err != nil {
		return s.failure(err)
	}
	return success(http.StatusOK, req)
}

// parseWait reads the wait parameter: absent means no wait, and waits are capped at MaxLongPollWait.
func parseWait(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	wait, err := time.ParseDuration(s)
	if err != nil || wait < 0 {
		return 0, fmt.Errorf("wait %q is not a non-negative duration", s)
	}
	return min(wait, provider.MaxLongPollWait), nil
}

func (s *Server) handleCancel(c *call) reply {
	if err := c.delay(); err != nil {
		return reply{}
	}
	req, err := s.Cancel(c.r.PathValue("id"))
	if errors.Is(err, ErrAlreadyDecided) {
		return alreadyDecided(req)
	}
	if err != nil {
		return s.failure(err)
	}
	return success(http.StatusOK, req)
}

// adminDecision is the body of POST /admin/v1/requests/{id}/decide.
type adminDecision struct {
	Status    string     `json:"status"`
	Note      string     `json:"note,omitempty"`
	ValidFor  string     `json:"valid_for,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (s *Server) handleDecide(r *http.Request, approver string) reply {
	var body adminDecision
	if err := decodeJSON(r, &body); err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	validFor, err := parseOptionalDuration("valid_for", body.ValidFor)
	if err != nil || validFor < 0 {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, fmt.Sprintf("valid_for %q is not a positive duration", body.ValidFor))
	}
	req, err := s.decide(r.PathValue("id"), body.Status, decisionNote(body.Note, body.Status, approver), body.ExpiresAt, validFor)
	if errors.Is(err, ErrAlreadyDecided) {
		return alreadyDecided(req)
	}
	if err != nil {
		return s.failure(err)
	}
	s.log.Info("decided through the admin API", "id", req.ID, "status", req.Status, "approver", approver)
	return success(http.StatusOK, req)
}

func (s *Server) handleList(r *http.Request) reply {
	status := r.URL.Query().Get("status")
	if status != "" && status != provider.StatusPending && !provider.IsTerminal(status) {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, fmt.Sprintf("unknown status %q", status))
	}
	reqs, err := s.List(status)
	if err != nil {
		return s.failure(err)
	}
	return success(http.StatusOK, reqs)
}

func (s *Server) handleFaultsGet(*http.Request) reply {
	return success(http.StatusOK, s.faults.Rules())
}

// handleFaultsAdd appends one rule (a JSON object).
func (s *Server) handleFaultsAdd(r *http.Request) reply {
	var rule FaultRule
	if err := decodeJSON(r, &rule); err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	return s.faultsChanged(s.faults.Add(rule))
}

// handleFaultsSet replaces the rules (a JSON array).
func (s *Server) handleFaultsSet(r *http.Request) reply {
	var rules []FaultRule
	if err := decodeJSON(r, &rules); err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	return s.faultsChanged(s.faults.Set(rules...))
}

func (s *Server) handleFaultsClear(*http.Request) reply {
	s.faults.Clear()
	return success(http.StatusOK, s.faults.Rules())
}

func (s *Server) faultsChanged(err error) reply {
	if err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	rules := s.faults.Rules()
	s.log.Info("fault rules changed", "rules", len(rules))
	return success(http.StatusOK, rules)
}

func (s *Server) handleStats(*http.Request) reply {
	return success(http.StatusOK, s.Stats())
}

func decodeJSON(r *http.Request, into any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, provider.MaxRequestBodyBytes+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if int64(len(data)) > provider.MaxRequestBodyBytes {
		return fmt.Errorf("the body exceeds %d bytes", provider.MaxRequestBodyBytes)
	}
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("the body is not valid: %w", err)
	}
	return nil
}

// failure maps an error of the Go API (other than ErrAlreadyDecided) to its problem reply.
func (s *Server) failure(err error) reply {
	switch {
	case errors.Is(err, ErrNotFound):
		return problem(http.StatusNotFound, provider.CodeNotFound, "no request has this id")
	case errors.Is(err, ErrInvalidDecision):
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	s.log.Error(err, "internal error")
	return problem(http.StatusInternalServerError, provider.CodeInternal, "internal error")
}

// alreadyDecided is the 409 for a request that is no longer pending; the body carries the request.
func alreadyDecided(current provider.Request) reply {
	return reply{status: http.StatusConflict, body: provider.Problem{
		Title:   http.StatusText(http.StatusConflict),
		Status:  http.StatusConflict,
		Detail:  "the request is already " + current.Status,
		Code:    provider.CodeAlreadyDecided,
		Request: &current,
	}}
}
