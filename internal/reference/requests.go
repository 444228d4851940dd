package reference

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"k8s.io/utils/clock"

	"toolgate.dev/toolgate/internal/provider"
)

// Errors of the Go API. ErrAlreadyTerminal comes with the current request.
var (
	ErrNotFound        = errors.New("request not found")
	ErrAlreadyTerminal = errors.New("request already terminal")
	ErrInvalidDecision = errors.New("invalid decision")
)

var (
	errKeyConflict = errors.New("idempotency key used with other fields")
	errAborted     = errors.New("call abandoned")
	errRevoked     = errors.New("credential revoked")
)

// watch is the in-memory companion of a pending request.
type watch struct {
	changed chan struct{} // closed when the request leaves pending
	timer   clock.Timer   // expires the request at its deadline
}

// Get returns the request with the given id, expiring it first if its deadline has passed.
func (s *Server) Get(id string) (provider.Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.loadLocked(id)
	return s.view(rec), err
}

// List returns the requests with the given status (all of them if status is empty), newest first.
func (s *Server) List(status string) ([]provider.Request, error) {
	recs, err := s.listRecords(status)
	out := make([]provider.Request, 0, len(recs))
	for _, rec := range recs {
		out = append(out, s.view(rec))
	}
	return out, err
}

func (s *Server) listRecords(status string) ([]record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.store.requests()
	if err != nil {
		return nil, err
	}
	out := make([]record, 0, len(all))
	for _, rec := range all {
		if rec, err = s.expireIfDueLocked(rec); err != nil {
			return nil, err
		}
		if status == "" || rec.Status == status {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Decide records a human decision on a pending request: status is provider.StatusApproved or
// provider.StatusDenied. An approval is valid until expiresAt, or for Options.DefaultApprovalValidity if
// expiresAt is nil; a denial has no expiry. An approval's expires_at is always later than its
// decided_at: for an expiresAt that is not later than now (an approval that arrives already expired,
// as tests want it), decided_at is one second before expiresAt, but not before the request's
// created_at; an expiresAt not later than created_at is refused. It returns ErrNotFound,
// ErrInvalidDecision, or ErrAlreadyTerminal together with the current request.
func (s *Server) Decide(id, status, note string, expiresAt *time.Time) (provider.Request, error) {
	return s.decide(id, status, note, expiresAt, 0)
}

// decide is Decide with an approval validity; validFor <= 0 means the default.
func (s *Server) decide(id, status, note string, expiresAt *time.Time, validFor time.Duration) (provider.Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.decideLocked(id, status, note, expiresAt, validFor)
	return s.view(rec), err
}

func (s *Server) decideLocked(id, status, note string, expiresAt *time.Time, validFor time.Duration) (record, error) {
	if status != provider.StatusApproved && status != provider.StatusDenied {
		return record{}, fmt.Errorf("%w: a decision is approved or denied, not %q", ErrInvalidDecision, status)
	}
	rec, err := s.loadLocked(id)
	if err != nil {
		return rec, err
	}
	if rec.Status != provider.StatusPending {
		return rec, ErrAlreadyTerminal
	}
	return s.decideRecordLocked(rec, status, note, expiresAt, validFor)
}

// decideRecordLocked decides a pending request that the caller loaded.
func (s *Server) decideRecordLocked(rec record, status, note string, expiresAt *time.Time, validFor time.Duration) (record, error) {
	if validFor <= 0 {
		validFor = s.opts.DefaultApprovalValidity
	}
	now := s.now()
	d := provider.Decision{Status: status, Note: note, DecidedAt: &now}
	if status == provider.StatusApproved {
		expiry := now.Add(validFor)
		if expiresAt != nil {
			expiry = expiresAt.UTC()
		}
		if !expiry.After(now) {
			if !expiry.After(rec.CreatedAt) {
				return rec, fmt.Errorf("%w: expires_at %s is not later than the request's created_at %s",
					ErrInvalidDecision, expiry.Format(time.RFC3339Nano), rec.CreatedAt.Format(time.RFC3339Nano))
			}
			decided := expiry.Add(-time.Second)
			if decided.Before(rec.CreatedAt) {
				decided = rec.CreatedAt
			}
			d.DecidedAt = &decided
		}
		d.ExpiresAt = &expiry
	}
	return s.finishLocked(rec, d)
}

// Cancel cancels a pending request, whichever instance it belongs to; cancelling a cancelled request
// returns it unchanged. It returns ErrNotFound, or ErrAlreadyTerminal together with the current
// request if it was approved, denied or expired.
func (s *Server) Cancel(id string) (provider.Request, error) {
	rec, err := s.cancelAs("", id)
	return s.view(rec), err
}

// cancelAs cancels a request of an instance ("" for any instance): another instance's request is
// not found.
func (s *Server) cancelAs(instance, id string) (record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.loadAsLocked(instance, id)
	switch {
	case err != nil:
		return rec, err
	case rec.Status == provider.StatusCancelled:
		return rec, nil
	case rec.Status != provider.StatusPending:
		return rec, ErrAlreadyTerminal
	}
	now := s.now()
	return s.finishLocked(rec, provider.Decision{Status: provider.StatusCancelled, DecidedAt: &now})
}

// submit creates the request of a submission, or returns the one its Idempotency-Key already created
// (replayed). Submissions with the same key are serialised: a second one waits for the first, then
// replays it. The key is held while delay runs and while the submission commits.
func (s *Server) submit(ctx context.Context, sub submission, delay func() error) (rec record, replayed bool, err error) {
	lock := "request\x00" + requestKey(sub.instance, sub.key)
	if !s.acquire(ctx, lock) {
		return record{}, false, errAborted
	}
	defer s.release(lock)
	if err := delay(); err != nil {
		return record{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.liveLocked(sub.instance) {
		return record{}, false, errRevoked
	}
	kr, found, err := s.store.requestKey(sub.instance, sub.key)
	switch {
	case err != nil:
		return record{}, false, err
	case !found:
		rec, err = s.createLocked(sub)
		return rec, false, err
	case kr.Fingerprint != sub.fingerprint:
		return record{}, false, errKeyConflict
	}
	rec, err = s.loadLocked(kr.RequestID)
	if err == nil {
		s.stats.update(func(st *Stats) { st.Replays++ })
	}
	return rec, true, err
}

// acquire takes an idempotency key for one operation, waiting while another holds it. It returns
// false if ctx ends or the server closes first.
func (s *Server) acquire(ctx context.Context, key string) bool {
	for {
		s.keysMu.Lock()
		busy, held := s.inflight[key]
		if !held {
			s.inflight[key] = make(chan struct{})
			s.keysMu.Unlock()
			s.stats.update(func(st *Stats) { st.InFlight++ })
			return true
		}
		s.keysMu.Unlock()
		s.stats.update(func(st *Stats) { st.KeyWaits++ })
		select {
		case <-busy:
		case <-ctx.Done():
		case <-s.done:
		}
		s.stats.update(func(st *Stats) { st.KeyWaits-- })
		if ctx.Err() != nil || s.isClosed() {
			return false
		}
	}
}

func (s *Server) release(key string) {
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	close(s.inflight[key])
	delete(s.inflight, key)
	s.stats.update(func(st *Stats) { st.InFlight-- })
}

func (s *Server) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Server) createLocked(sub submission) (record, error) {
	now := s.now()
	deadline := now.Add(sub.timeout)
	if w := s.opts.MaxWindow; w > 0 && sub.timeout > w {
		deadline = now.Add(w) // a shorter window than asked for, never a longer one
	}
	rec := record{
		ID:             uuid.NewString(),
		Instance:       sub.instance,
		Key:            sub.key,
		Tool:           sub.tool,
		Arguments:      sub.arguments,
		AgentReasoning: sub.reasoning,
		Context:        sub.context,
		Timeout:        sub.timeoutText,
		Status:         provider.StatusPending,
		CreatedAt:      now,
		DeadlineAt:     deadline,
		Quorum:         s.quorumLocked(sub.instance),
	}
	if err := s.store.create(keyRecord{Fingerprint: sub.fingerprint, RequestID: rec.ID, CreatedAt: now}, rec); err != nil {
		return record{}, err
	}
	s.trackLocked(rec)
	s.stats.update(func(st *Stats) { st.Creates++ })
	s.log.Info("request created", "id", rec.ID, "instance", rec.Instance, "tool", rec.Tool, "deadline", rec.DeadlineAt)
	return rec, nil
}

// poll returns an instance's request once it is terminal, or after wait, whichever comes first. It
// returns ctx.Err() if the caller goes away first.
func (s *Server) poll(ctx context.Context, instance, id string, wait time.Duration) (record, error) {
	rec, changed, err := s.snapshot(instance, id)
	if err != nil || changed == nil || wait <= 0 {
		return rec, err
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
		return rec, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadAsLocked(instance, id)
}

// snapshot returns the request and, if it is pending, the channel closed when it leaves pending.
func (s *Server) snapshot(instance, id string) (record, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.loadAsLocked(instance, id)
	if err != nil || rec.Status != provider.StatusPending {
		return rec, nil, err
	}
	if w := s.pending[id]; w != nil {
		return rec, w.changed, nil
	}
	return rec, nil, nil
}

// resume tracks the pending requests of a reopened store and expires those whose deadline has passed.
func (s *Server) resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.store.requests()
	if err != nil {
		return err
	}
	for _, rec := range all {
		if rec.Status != provider.StatusPending {
			continue
		}
		s.trackLocked(rec)
		if _, err := s.expireIfDueLocked(rec); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) loadLocked(id string) (record, error) {
	return s.loadAsLocked("", id)
}

// loadAsLocked loads a request of an instance ("" for any instance): another instance's request is
// not found, so that no instance learns of another's requests.
func (s *Server) loadAsLocked(instance, id string) (record, error) {
	rec, found, err := s.store.request(id)
	if err != nil {
		return record{}, err
	}
	if !found || (instance != "" && rec.Instance != instance) {
		return record{}, ErrNotFound
	}
	return s.expireIfDueLocked(rec)
}

// expireIfDueLocked expires a pending request whose deadline has passed.
func (s *Server) expireIfDueLocked(rec record) (record, error) {
	if rec.Status != provider.StatusPending || s.clock.Now().Before(rec.DeadlineAt) {
		return rec, nil
	}
	deadline := rec.DeadlineAt
	return s.finishLocked(rec, provider.Decision{Status: provider.StatusExpired, DecidedAt: &deadline})
}

// finishLocked moves a pending request to the decision's status, persists it together with its
// notification if its instance has a receiver, wakes its long polls and schedules the notification.
func (s *Server) finishLocked(rec record, d provider.Decision) (record, error) {
	rec = terminal(rec, d)
	ev, err := s.newEventLocked(rec)
	if err != nil {
		return record{}, err
	}
	if err := s.store.finishRequest(rec, ev); err != nil {
		return record{}, err
	}
	s.finishedLocked(rec)
	if ev != nil {
		s.scheduleDelivery(ev.ID, ev.NextAt)
	}
	return rec, nil
}

// terminal is rec with the decision d.
func terminal(rec record, d provider.Decision) record {
	rec.Status = d.Status
	rec.Decision = &d
	return rec
}

// finishedLocked wakes the long polls of a request that has left pending and counts its outcome.
func (s *Server) finishedLocked(rec record) {
	if w := s.pending[rec.ID]; w != nil {
		w.timer.Stop()
		close(w.changed)
		delete(s.pending, rec.ID)
	}
	s.stats.update(func(st *Stats) {
		switch rec.Status {
		case provider.StatusApproved, provider.StatusDenied:
			st.Decisions++
		case provider.StatusCancelled:
			st.Cancellations++
		case provider.StatusExpired:
			st.Expiries++
		}
	})
	s.log.Info("request "+rec.Status, "id", rec.ID, "instance", rec.Instance, "tool", rec.Tool)
}

// trackLocked registers a pending request and arms its deadline.
func (s *Server) trackLocked(rec record) {
	w := &watch{changed: make(chan struct{})}
	w.timer = s.afterLocked(rec)
	s.pending[rec.ID] = w
}

func (s *Server) afterLocked(rec record) clock.Timer {
	id := rec.ID
	// The fake clock runs callbacks while holding its own lock, so expiry (which reads the clock) runs apart.
	return s.clock.AfterFunc(rec.DeadlineAt.Sub(s.clock.Now()), func() { go s.expireDue(id) })
}

// expireDue is the deadline timer's callback.
func (s *Server) expireDue(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	rec, err := s.loadLocked(id)
	if errors.Is(err, ErrNotFound) {
		return
	}
	if err != nil {
		s.log.Error(err, "expiring request", "id", id)
		return
	}
	if w := s.pending[id]; w != nil && rec.Status == provider.StatusPending {
		w.timer = s.afterLocked(rec) // the timer ran ahead of the clock's wall time
	}
}

// view is a stored request as the Go API returns it: AAP's ApprovalRequest with every field.
func (s *Server) view(rec record) provider.Request {
	if rec.ID == "" {
		return provider.Request{}
	}
	return provider.Request{
		ID: rec.ID, Tool: rec.Tool, Arguments: rec.Arguments, AgentReasoning: rec.AgentReasoning, Context: rec.Context,
		Timeout: rec.Timeout, Status: rec.Status, CreatedAt: rec.CreatedAt, DeadlineAt: rec.DeadlineAt, Decision: rec.Decision,
	}
}

// wire is a stored request as the provider API sends it in the server's profile: the seed profile
// leaves out the optional agent_reasoning and context.
func (s *Server) wire(rec record) provider.Request {
	req := s.view(rec)
	if s.opts.Profile == ProfileSeed {
		req.AgentReasoning, req.Context = "", nil
	}
	return req
}

func (s *Server) now() time.Time { return s.clock.Now().UTC() }
