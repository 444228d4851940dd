// Package aapstrict is a small, strict Agent Approval Protocol v1 provider for tests, written from the
// published contract alone (openapi.yaml and the specification's requests, HTTP, synchronous-mode and
// security sections) and sharing no code or types with Toolgate. It serves the request operations
// (create, retrieve with long polling, cancel) for one instance credential, under a base URL with a
// path, on a real loopback socket, and refuses everything the contract does not allow: unknown fields,
// malformed durations, a missing Idempotency-Key, a reused key with other fields.
//
// A test drives the humans' side through Go methods (Approve, Deny, Cancel, SetRule), reads the
// provider's state (Get, List, ByKey) and its exchange log (Log), and injects faults (FailNext,
// DropNextResponse). Instance management and asynchronous delivery are not served.
package aapstrict

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"k8s.io/utils/clock"
)

// Options configure a Server.
type Options struct {
	// Credential is the one instance credential (bearer token) the provider accepts. Required.
	Credential string
	// BasePath is the path of the base URL the API is mounted under (default "/api/aap"). It starts
	// with "/", does not end with one, and is not "/" alone.
	BasePath string
	// Clock gives created_at, deadline_at, decided_at and expires_at, and fires expiry at the deadline
	// (default: real time). Long-poll waits are real time whatever the clock.
	Clock clock.WithDelayedExecution
	// MaxWindow, when positive, shortens every approval window to at most this: deadline_at is then
	// earlier than created_at + timeout.
	MaxWindow time.Duration
}

// maxBodyBytes bounds a request body.
const maxBodyBytes = 1 << 20

// Exchange is one HTTP exchange as the provider saw it.
type Exchange struct {
	Method string
	// Path is the URL path as received (with the base path); Query is the raw query.
	Path, Query string
	// IdempotencyKey is the Idempotency-Key header as received ("" when absent).
	IdempotencyKey string
	// Status is the status answered (or, when Dropped, the status that was not sent).
	Status int
	// Code is the error code of an error answer, "" for a success.
	Code string
	// Dropped: the request was applied and the connection closed without an answer.
	Dropped bool
	// At is when the request arrived and Answered when its answer was ready (real time).
	At, Answered time.Time
}

// Server is the strict provider.
type Server struct {
	opts Options
	clk  clock.WithDelayedExecution

	mu    sync.Mutex
	byID  map[string]*record
	byKey map[string]*record
	order []*record
	rule  Rule
	log   []Exchange
	// fault state: the next failN API requests get failStatus; the next dropN are dropped.
	failN, failStatus int
	failRetryAfter    time.Duration
	dropN             int

	srv    *http.Server
	base   string
	closed chan struct{}
	once   sync.Once
}

// New returns a provider, not yet listening.
func New(opts Options) (*Server, error) {
	if opts.Credential == "" {
		return nil, fmt.Errorf("aapstrict: Options.Credential is required: give the instance credential the provider accepts")
	}
	if opts.BasePath == "" {
		opts.BasePath = "/api/aap"
	}
	if !strings.HasPrefix(opts.BasePath, "/") || strings.HasSuffix(opts.BasePath, "/") {
		return nil, fmt.Errorf("aapstrict: Options.BasePath %q must start with / and not end with one, e.g. /api/aap", opts.BasePath)
	}
	if opts.MaxWindow < 0 {
		return nil, fmt.Errorf("aapstrict: Options.MaxWindow %s must not be negative (0: no limit)", opts.MaxWindow)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Server{opts: opts, clk: clk, byID: map[string]*record{}, byKey: map[string]*record{}, closed: make(chan struct{})}, nil
}

// Start listens on a loopback port and returns the base URL, e.g. http://127.0.0.1:41234/api/aap.
// Like httptest.Server, it panics if it cannot listen.
func (s *Server) Start() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("aapstrict: listening on a loopback port: %v", err))
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.base = "http://" + ln.Addr().String() + s.opts.BasePath
	go func() { _ = s.srv.Serve(ln) }()
	return s.base
}

// URL is the base URL Start returned.
func (s *Server) URL() string { return s.base }

// Close stops listening, ends the long polls and closes every connection.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closed)
		if s.srv != nil {
			_ = s.srv.Close()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, rec := range s.order {
			if rec.timer != nil {
				rec.timer.Stop()
			}
		}
	})
}

// Log returns every exchange so far, in the order they were answered.
func (s *Server) Log() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Exchange(nil), s.log...)
}

// FailNext answers the next n authenticated API requests with status (an ErrorResponse of its type)
// and, when retryAfter is positive, a Retry-After header of that many seconds (rounded up). n = 0
// clears a FailNext still in effect.
func (s *Server) FailNext(n, status int, retryAfter time.Duration) {
	if n > 0 && (status < 400 || status > 599) {
		panic(fmt.Sprintf("aapstrict: FailNext needs an error status (4xx or 5xx), not %d", status))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN, s.failStatus, s.failRetryAfter = n, status, retryAfter
}

// DropNextResponse applies the next n authenticated API requests and closes each one's connection
// without answering: lost responses. n = 0 clears a DropNextResponse still in effect.
func (s *Server) DropNextResponse(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropN = n
}

// ServeHTTP serves the API under the base path.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := Exchange{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, IdempotencyKey: r.Header.Get("Idempotency-Key"), At: time.Now()}
	rid := uuid.NewString()
	rec := httptest.NewRecorder()
	ex.Dropped = s.serve(rec, r, rid)
	ex.Status = rec.Code
	ex.Answered = time.Now()
	if ex.Status >= 400 {
		var e wireError
		if json.Unmarshal(rec.Body.Bytes(), &e) == nil {
			ex.Code = e.Error.Code
		}
	}
	s.mu.Lock()
	s.log = append(s.log, ex)
	s.mu.Unlock()
	if ex.Dropped {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without an answer
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// serve answers one request into w and reports whether its answer is to be dropped.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, rid string) (drop bool) {
	w.Header().Set("X-Request-ID", rid)
	rel, ok := strings.CutPrefix(r.URL.Path, s.opts.BasePath)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		writeError(w, rid, &apiError{status: 404, code: "not_found", message: "no such resource: the API is served under " + s.opts.BasePath})
		return false
	}
	if !s.authenticated(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="aap"`)
		writeError(w, rid, &apiError{status: 401, code: "unauthenticated", message: "the instance credential is missing or invalid: send Authorization: Bearer <instance credential>"})
		return false
	}
	s.mu.Lock()
	if s.failN > 0 {
		s.failN--
		status, ra := s.failStatus, s.failRetryAfter
		s.mu.Unlock()
		if ra > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10))
		}
		writeError(w, rid, &apiError{status: status, code: defaultCode(status), message: "the provider is temporarily unable to serve the operation; retry later"})
		return false
	}
	if s.dropN > 0 {
		s.dropN--
		drop = true
	}
	s.mu.Unlock()

	switch id, isItem := strings.CutPrefix(rel, "/v1/requests/"); {
	case rel == "/v1/requests" && r.Method == http.MethodPost:
		s.handleCreate(w, r, rid)
	case isItem && id != "" && !strings.Contains(id, "/") && r.Method == http.MethodGet:
		s.handleGet(w, r, rid, id)
	case isItem && id != "" && !strings.Contains(id, "/") && r.Method == http.MethodDelete:
		s.handleCancel(w, rid, id)
	default:
		writeError(w, rid, &apiError{status: 404, code: "not_found", message: fmt.Sprintf("no such operation: %s %s", r.Method, rel)})
	}
	return drop
}

func (s *Server) authenticated(r *http.Request) bool {
	values := r.Header.Values("Authorization")
	if len(values) != 1 {
		return false
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.Credential)) == 1
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request, rid string) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, rid, badRequest("", "the body must be sent as Content-Type: application/json"))
		return
	}
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) != 1 || keys[0] == "" {
		writeError(w, rid, badRequest("Idempotency-Key", "one Idempotency-Key header is required: generate a key for the execution attempt before the first submission and send it on every retry"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		writeError(w, rid, badRequest("", "the body could not be read: %v", err))
		return
	}
	if len(body) > maxBodyBytes {
		writeError(w, rid, badRequest("", "the body exceeds %d bytes", maxBodyBytes))
		return
	}
	in, aerr := parseCreate(body)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	s.mu.Lock()
	req, status, aerr := s.create(keys[0], in)
	s.mu.Unlock()
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	writeJSON(w, status, req.wire())
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, rid, id string) {
	wait, aerr := parseWait(r.URL.Query()["wait"])
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	s.mu.Lock()
	rec, ok := s.byID[id]
	if !ok {
		s.mu.Unlock()
		writeError(w, rid, &apiError{status: 404, code: "not_found", message: "no approval request with id " + id})
		return
	}
	s.expireIfDue(rec)
	if rec.req.Status == StatusPending && wait > 0 {
		rec.waiting++
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-rec.done:
		case <-t.C:
		case <-r.Context().Done():
		case <-s.closed:
		}
		t.Stop()
		s.mu.Lock()
		rec.waiting--
		s.expireIfDue(rec)
	}
	req := rec.copy()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, req.wire())
}

func (s *Server) handleCancel(w http.ResponseWriter, rid, id string) {
	s.mu.Lock()
	rec, ok := s.byID[id]
	if !ok {
		s.mu.Unlock()
		writeError(w, rid, &apiError{status: 404, code: "not_found", message: "no approval request with id " + id})
		return
	}
	aerr := s.cancel(rec)
	req := rec.copy()
	s.mu.Unlock()
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	writeJSON(w, http.StatusOK, req.wire())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own wire types always marshal
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func writeError(w http.ResponseWriter, rid string, e *apiError) {
	writeJSON(w, e.status, wireError{Error: wireErrorBody{Type: errorType(e.status), Code: e.code, Message: e.message, Param: e.param, RequestID: rid}})
}
