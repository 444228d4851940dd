package reference

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"k8s.io/utils/clock"

	"toolgate.dev/toolgate/internal/provider"
)

// Errors of the Go API. ErrAlreadyDecided comes with the current request.
var (
	ErrNotFound        = errors.New("request not found")
	ErrAlreadyDecided  = errors.New("request already decided")
	ErrInvalidDecision = errors.New("a decision is approved or denied")
)

var (
	errInFlight  = errors.New("idempotency key in flight")
	errKeyReused = errors.New("idempotency key reused with a different body")
	errAborted   = errors.New("call abandoned")
)

// watch is the in-memory companion of a pending request.
type watch struct {
	changed chan struct{} // closed when the request leaves pending
	timer   clock.Timer   // expires the request at its deadline
}

// submission is a validated POST /v1/requests.
type submission struct {
	key             string
	tool            string
	arguments       json.RawMessage // compact
	argumentsSHA256 string
	timeoutText     string // as submitted, echoed back
	timeout         time.Duration
	requester       string // the optional Toolgate-Requester header, decoded; not part of the fingerprint
}

// fingerprint identifies the body for idempotency: the same tool, canonical arguments and timeout.
func (sub submission) fingerprint() string {
	b, _ := json.Marshal([]any{sub.tool, sub.argumentsSHA256, int64(sub.timeout)}) // cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Get returns the request with the given id, expiring it first if its deadline has passed.
func (s *Server) Get(id string) (provider.Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadLocked(id)
}

// List returns the requests with the given status (all of them if status is empty), newest first.
func (s *Server) List(status string) ([]provider.Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.store.requests()
	if err != nil {
		return nil, err
	}
	out := make([]provider.Request, 0, len(all))
	for _, req := range all {
		if req, err = s.expireIfDueLocked(req); err != nil {
			return nil, err
		}
		if status == "" || req.Status == status {
			out = append(out, req)
		}
	}
	return out, nil
}

// Decide records a human decision on a pending request: status is provider.StatusApproved or
// provider.StatusDenied. An approval is valid until expiresAt (which may be in the past), or for
// Options.DefaultApprovalValidity if expiresAt is nil; a denial has no expiry. It returns ErrNotFound,
// ErrInvalidDecision, or ErrAlreadyDecided together with the current request.
func (s *Server) Decide(id, status, note string, expiresAt *time.Time) (provider.Request, error) {
	return s.decide(id, status, note, expiresAt, 0)
}

// decide is Decide with an approval validity; validFor <= 0 means the default.
func (s *Server) decide(id, status, note string, expiresAt *time.Time, validFor time.Duration) (provider.Request, error) {
	if status != provider.StatusApproved && status != provider.StatusDenied {
		return provider.Request{}, fmt.Errorf("%w, not %q", ErrInvalidDecision, status)
	}
	if validFor <= 0 {
		validFor = s.opts.DefaultApprovalValidity
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	req, err := s.loadLocked(id)
	if err != nil {
		return req, err
	}
	if req.Status != provider.StatusPending {
		return req, ErrAlreadyDecided
	}
	now := s.now()
	d := provider.Decision{Status: status, Note: note, DecidedAt: &now}
	if status == provider.StatusApproved {
		expiry := now.Add(validFor)
		if expiresAt != nil {
			expiry = expiresAt.UTC()
		}
		d.ExpiresAt = &expiry
	}
	return s.finishLocked(req, d)
}

// Cancel cancels a pending request; cancelling a cancelled request returns it unchanged. It returns
// ErrNotFound, or ErrAlreadyDecided together with the current request if it was approved, denied or expired.
func (s *Server) Cancel(id string) (provider.Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, err := s.loadLocked(id)
	switch {
	case err != nil:
		return req, err
	case req.Status == provider.StatusCancelled:
		return req, nil
	case req.Status != provider.StatusPending:
		return req, ErrAlreadyDecided
	}
	now := s.now()
	return s.finishLocked(req, provider.Decision{Status: provider.StatusCancelled, DecidedAt: &now})
}

// submit creates the request of a submission, or returns the one its Idempotency-Key already created
// (replayed). It holds the key while delay runs and while it commits.
func (s *Server) submit(sub submission, delay func() error) (req provider.Request, replayed bool, err error) {
	if !s.acquire(sub.key) {
		return provider.Request{}, false, errInFlight
	}
	defer s.release(sub.key)
	if err := delay(); err != nil {
		return provider.Request{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, found, err := s.store.idempotency(sub.key)
	switch {
	case err != nil:
		return provider.Request{}, false, err
	case !found:
		req, err = s.createLocked(sub)
		return req, false, err
	case rec.Fingerprint != sub.fingerprint():
		return provider.Request{}, false, errKeyReused
	}
	req, err = s.loadLocked(rec.RequestID)
	if err == nil {
		s.stats.update(func(st *Stats) { st.Replays++ })
	}
	return req, true, err
}

func (s *Server) acquire(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight[key] {
		return false
	}
	s.inflight[key] = true
	s.stats.update(func(st *Stats) { st.InFlight++ })
	return true
}

func (s *Server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, key)
	s.stats.update(func(st *Stats) { st.InFlight-- })
}

func (s *Server) createLocked(sub submission) (provider.Request, error) {
	now := s.now()
	req := provider.Request{
		ID:              uuid.NewString(),
		Tool:            sub.tool,
		Arguments:       sub.arguments,
		ArgumentsSHA256: sub.argumentsSHA256,
		Timeout:         sub.timeoutText,
		Status:          provider.StatusPending,
		CreatedAt:       now,
		DeadlineAt:      now.Add(sub.timeout),
		Requester:       sub.requester,
	}
	rec := idempotencyRecord{Fingerprint: sub.fingerprint(), RequestID: req.ID, CreatedAt: now}
	if err := s.store.create(sub.key, rec, req); err != nil {
		return provider.Request{}, err
	}
	s.trackLocked(req)
	s.stats.update(func(st *Stats) { st.Creates++ })
	s.log.Info("request created", "id", req.ID, "tool", req.Tool, "deadline", req.DeadlineAt)
	return req, nil
}

// poll returns the request once it is terminal, once it changes, or after wait, whichever comes first.
// It returns ctx.Err() if the caller goes away first.
func (s *Server) poll(ctx context.Context, id string, wait time.Duration) (provider.Request, error) {
	req, changed, err := s.snapshot(id)
	if err != nil || changed == nil || wait <= 0 {
		return req, err
	}
	s.stats.update(func(st *Stats) { st.Waiting++ })
	defer s.stats.update(func(st *Stats) { st.Waiting-- })
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-changed:
	case <-timer.C:
	case <-s.done:
	case <-ctx.Done():
		return req, ctx.Err()
	}
	return s.Get(id)
}

// snapshot returns the request and, if it is pending, the channel closed when it leaves pending.
func (s *Server) snapshot(id string) (provider.Request, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, err := s.loadLocked(id)
	if err != nil || req.Status != provider.StatusPending {
		return req, nil, err
	}
	if w := s.pending[id]; w != nil {
		return req, w.changed, nil
	}
	return req, nil, nil
}

// resume tracks the pending requests of a reopened store and expires those whose deadline has passed.
func (s *Server) resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.store.requests()
	if err != nil {
		return err
	}
	for _, req := range all {
		if req.Status != provider.StatusPending {
			continue
		}
		s.trackLocked(req)
		if _, err := s.expireIfDueLocked(req); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) loadLocked(id string) (provider.Request, error) {
	req, found, err := s.store.request(id)
	if err != nil {
		return provider.Request{}, err
	}
	if !found {
		return provider.Request{}, ErrNotFound
	}
	return s.expireIfDueLocked(req)
}

// expireIfDueLocked expires a pending request whose deadline has passed.
func (s *Server) expireIfDueLocked(req provider.Request) (provider.Request, error) {
	if req.Status != provider.StatusPending || s.clock.Now().Before(req.DeadlineAt) {
		return req, nil
	}
	deadline := req.DeadlineAt
	return s.finishLocked(req, provider.Decision{Status: provider.StatusExpired, DecidedAt: &deadline})
}

// finishLocked moves a pending request to the decision's status, persists it and wakes its long polls.
func (s *Server) finishLocked(req provider.Request, d provider.Decision) (provider.Request, error) {
	req.Status = d.Status
	req.Decision = &d
	if err := s.store.putRequest(req); err != nil {
		return provider.Request{}, err
	}
	if w := s.pending[req.ID]; w != nil {
		w.timer.Stop()
		close(w.changed)
		delete(s.pending, req.ID)
	}
	s.stats.update(func(st *Stats) {
		switch d.Status {
		case provider.StatusApproved, provider.StatusDenied:
			st.Decisions++
		case provider.StatusCancelled:
			st.Cancellations++
		case provider.StatusExpired:
			st.Expiries++
		}
	})
	s.log.Info("request "+d.Status, "id", req.ID, "tool", req.Tool)
	return req, nil
}

// trackLocked registers a pending request and arms its deadline.
func (s *Server) trackLocked(req provider.Request) {
	w := &watch{changed: make(chan struct{})}
	w.timer = s.afterLocked(req)
	s.pending[req.ID] = w
}

func (s *Server) afterLocked(req provider.Request) clock.Timer {
	id := req.ID
	// The fake clock runs callbacks while holding its own lock, so expiry (which reads the clock) runs apart.
	return s.clock.AfterFunc(req.DeadlineAt.Sub(s.clock.Now()), func() { go s.expireDue(id) })
}

// expireDue is the deadline timer's callback.
func (s *Server) expireDue(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	req, err := s.loadLocked(id)
	if err != nil {
		s.log.Error(err, "expiring request", "id", id)
		return
	}
	if w := s.pending[id]; w != nil && req.Status == provider.StatusPending {
		w.timer = s.afterLocked(req) // the timer ran ahead of the clock's wall time
	}
}

func (s *Server) now() time.Time { return s.clock.Now().UTC() }
