package aapstrict

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"k8s.io/utils/clock"
)

// Request is an approval request as the provider holds it.
type Request struct {
	ID string
	// Key is the Idempotency-Key it was created with.
	Key       string
	Tool      string
	Arguments json.RawMessage
	Timeout   string
	// AgentReasoning is nil when the submission had none.
	AgentReasoning *string
	// Context is nil when the submission had none.
	Context    json.RawMessage
	Status     string
	CreatedAt  time.Time
	DeadlineAt time.Time
	// Decision is set exactly when Status is terminal.
	Decision *Decision
}

// Decision is a terminal request's outcome.
type Decision struct {
	Status    string
	Note      string
	DecidedAt time.Time
	// ExpiresAt is set on approvals only.
	ExpiresAt *time.Time
}

// Verdict is an immediate decision a Rule makes as a request is created.
type Verdict struct {
	// Status is StatusApproved or StatusDenied.
	Status string
	Note   string
	// Validity is how long an approval may be used (Approve's validity).
	Validity time.Duration
}

// Rule decides a new request as it is created, or returns nil to leave it pending. It runs while the
// provider holds its lock: it must not call the Server.
type Rule func(Request) *Verdict

// ErrUnknownRequest is returned by the control API for an id the provider does not hold.
var ErrUnknownRequest = errors.New("no such approval request")

// record is one request and what waits on it.
type record struct {
	req    Request
	fields map[string]any
	// done is closed when the request becomes terminal: it ends long polls.
	done  chan struct{}
	timer clock.Timer
	// waiting counts the long polls holding an answer about this request.
	waiting int
}

func (rec *record) copy() Request {
	r := rec.req
	if d := r.Decision; d != nil {
		dc := *d
		r.Decision = &dc
	}
	return r
}

// now is the provider's clock in whole seconds.
func (s *Server) now() time.Time { return s.clk.Now().UTC().Truncate(time.Second) }

// create stores a new request for key, or answers a replay of it. s.mu is held.
func (s *Server) create(key string, in *createInput) (Request, int, *apiError) {
	if rec, ok := s.byKey[key]; ok {
		if !sameFields(rec.fields, in.fields) {
			return Request{}, 0, &apiError{status: 409, code: "idempotency_conflict",
				message: "the Idempotency-Key was already used for a different request; that request is unchanged (use a new key for a new execution attempt)"}
		}
		s.expireIfDue(rec)
		return rec.copy(), 200, nil
	}
	created := s.now()
	window := in.window
	if s.opts.MaxWindow > 0 && window > s.opts.MaxWindow {
		window = s.opts.MaxWindow
	}
	deadline := created.Add(window)
	if deadline.Before(created) { // an overflowing window: the largest time there is
		deadline = time.Unix(1<<62, 0)
	}
	rec := &record{
		req: Request{
			ID: uuid.NewString(), Key: key, Tool: in.tool, Arguments: in.arguments, Timeout: in.timeout,
			AgentReasoning: in.agentReasoning, Context: in.context, Status: StatusPending,
			CreatedAt: created, DeadlineAt: deadline,
		},
		fields: in.fields,
		done:   make(chan struct{}),
	}
	s.byKey[key] = rec
	s.byID[rec.req.ID] = rec
	s.order = append(s.order, rec)
	if s.rule != nil {
		if v := s.rule(rec.copy()); v != nil {
			if err := s.decide(rec, v.Status, v.Note, v.Validity); err != nil {
				return Request{}, 0, &apiError{status: 500, code: "internal", message: "the provider's rule could not decide the request"}
			}
			return rec.copy(), 201, nil
		}
	}
	id := rec.req.ID
	// A fake clock runs the function while it holds its own lock, which reading the clock takes
	// again: the expiry runs on a goroutine of its own.
	rec.timer = s.clk.AfterFunc(deadline.Sub(s.clk.Now()), func() {
		go func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if r, ok := s.byID[id]; ok {
				s.expireIfDue(r)
			}
		}()
	})
	return rec.copy(), 201, nil
}

// expireIfDue records expiry for a request still pending at its deadline. s.mu is held.
func (s *Server) expireIfDue(rec *record) {
	if rec.req.Status == StatusPending && !s.clk.Now().Before(rec.req.DeadlineAt) {
		s.finish(rec, &Decision{Status: StatusExpired, DecidedAt: rec.req.DeadlineAt})
	}
}

// finish records a request's one terminal outcome. s.mu is held and the request is pending.
func (s *Server) finish(rec *record, d *Decision) {
	rec.req.Status = d.Status
	rec.req.Decision = d
	if rec.timer != nil {
		rec.timer.Stop()
	}
	close(rec.done)
}

// decide approves or denies a pending request. s.mu is held.
func (s *Server) decide(rec *record, status, note string, validity time.Duration) error {
	s.expireIfDue(rec)
	if rec.req.Status != StatusPending {
		return fmt.Errorf("request %s is already %s: a request has one terminal outcome", rec.req.ID, rec.req.Status)
	}
	d := &Decision{Status: status, Note: note, DecidedAt: s.now()}
	switch status {
	case StatusApproved:
		if validity <= 0 {
			return fmt.Errorf("an approval needs a positive validity (the time until expires_at), not %s", validity)
		}
		// Whole seconds, rounded up: expires_at is always later than decided_at.
		exp := d.DecidedAt.Add((validity + time.Second - 1).Truncate(time.Second))
		d.ExpiresAt = &exp
	case StatusDenied:
	default:
		return fmt.Errorf("a verdict is %q or %q, not %q", StatusApproved, StatusDenied, status)
	}
	s.finish(rec, d)
	return nil
}

// cancel withdraws a pending request; a cancelled one is returned as it is. s.mu is held.
func (s *Server) cancel(rec *record) *apiError {
	s.expireIfDue(rec)
	switch rec.req.Status {
	case StatusPending:
		s.finish(rec, &Decision{Status: StatusCancelled, DecidedAt: s.now()})
	case StatusCancelled:
	default:
		return &apiError{status: 409, code: "already_terminal",
			message: fmt.Sprintf("the request is already %s; its outcome is unchanged", rec.req.Status)}
	}
	return nil
}

func (s *Server) control(id string, f func(*record) error) (Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.byID[id]
	if !ok {
		return Request{}, fmt.Errorf("%w: %s", ErrUnknownRequest, id)
	}
	if err := f(rec); err != nil {
		return Request{}, err
	}
	return rec.copy(), nil
}

// Approve approves a pending request: decided now, usable for validity (rounded up to whole seconds).
func (s *Server) Approve(id string, validity time.Duration, note string) (Request, error) {
	return s.control(id, func(rec *record) error { return s.decide(rec, StatusApproved, note, validity) })
}

// Deny denies a pending request.
func (s *Server) Deny(id, note string) (Request, error) {
	return s.control(id, func(rec *record) error { return s.decide(rec, StatusDenied, note, 0) })
}

// Cancel withdraws a pending request on the provider's side (as an instance deletion would).
func (s *Server) Cancel(id string) (Request, error) {
	return s.control(id, func(rec *record) error {
		if e := s.cancel(rec); e != nil {
			return errors.New(e.message)
		}
		return nil
	})
}

// Get returns a request by id.
func (s *Server) Get(id string) (Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.byID[id]
	if !ok {
		return Request{}, false
	}
	s.expireIfDue(rec)
	return rec.copy(), true
}

// ByKey returns the request created with an Idempotency-Key.
func (s *Server) ByKey(key string) (Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.byKey[key]
	if !ok {
		return Request{}, false
	}
	s.expireIfDue(rec)
	return rec.copy(), true
}

// List returns every request, in the order they were created.
func (s *Server) List() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, 0, len(s.order))
	for _, rec := range s.order {
		s.expireIfDue(rec)
		out = append(out, rec.copy())
	}
	return out
}

// SetRule makes every later creation go through rule (nil: requests stay pending).
func (s *Server) SetRule(rule Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rule = rule
}

// Waiting reports how many long polls are holding their answer about a request.
func (s *Server) Waiting(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.byID[id]; ok {
		return rec.waiting
	}
	return 0
}
