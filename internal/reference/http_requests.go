package reference

import (
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// maxWait caps a long poll, as AAP does (Options.MaxWait may cap it lower).
const maxWait = 30 * time.Second

// isUUID reports whether id is a UUID in its canonical form, as the provider assigns them.
func isUUID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil && len(id) == 36
}

// POST /v1/requests.
func (s *Server) handleSubmit(c *call) reply {
	key, data, ferr := c.keyedBody()
	if ferr != nil {
		return refused(ferr)
	}
	sub, ferr := parseCreate(data, s.opts.MinTimeout, s.opts.MaxTimeout)
	if ferr != nil {
		return refused(ferr)
	}
	sub.instance, sub.key = c.who.instance, key
	rec, replayed, err := s.submit(c.r.Context(), sub, c.delay)
	switch {
	case errors.Is(err, errAborted):
		return reply{}
	case errors.Is(err, errKeyConflict):
		return fail(provider.CodeIdempotencyConflict, "this Idempotency-Key was already used for a request with other fields "+
			"(tool, arguments, timeout, agent_reasoning or context); that request is unchanged: a new request needs a new key")
	case err != nil:
		return s.failure(err, "no such request")
	case replayed:
		return success(http.StatusOK, s.wire(rec))
	}
	return success(http.StatusCreated, s.wire(rec))
}

// GET /v1/requests/{id}[?wait=30s].
func (s *Server) handleGet(c *call) reply {
	id := c.r.PathValue("id")
	if !isUUID(id) {
		return failParam(provider.CodeInvalidRequest, "id", "request ids are UUIDs, and "+quote(id)+" is not one")
	}
	wait, ferr := parseWait(c.r.URL.Query(), s.opts.MaxWait)
	if ferr != nil {
		return refused(ferr)
	}
	if err := c.delay(); err != nil {
		return reply{}
	}
	rec, err := s.poll(c.r.Context(), c.who.instance, id, wait)
	if c.r.Context().Err() != nil {
		return reply{}
	}
	if err != nil {
		return s.failure(err, "no request "+id+" of this instance")
	}
	return success(http.StatusOK, s.wire(rec))
}

// parseWait reads the wait parameter: absent means no wait; an AAP duration, capped at limit.
func parseWait(query map[string][]string, limit time.Duration) (time.Duration, *fieldError) {
	values, present := query["wait"]
	if !present {
		return 0, nil
	}
	if len(values) != 1 {
		return 0, invalid("wait", "wait is given %d times: give it once", len(values))
	}
	wait, ferr := parseDuration("wait", values[0])
	if ferr != nil {
		ferr.message += "; omit wait to get the request at once"
		return 0, ferr
	}
	return min(wait, limit), nil
}

// DELETE /v1/requests/{id}: cancel.
func (s *Server) handleCancel(c *call) reply {
	id := c.r.PathValue("id")
	if !isUUID(id) {
		return fail(provider.CodeNotFound, "no request "+quote(id)+": request ids are UUIDs")
	}
	if err := c.delay(); err != nil {
		return reply{}
	}
	if c.fault != nil && c.fault.Kind == faults.DecideBeforeCancel {
		if !s.decideBeforeCancel(c.who.instance, id, c.fault.Decision) && c.fault.Count > 0 {
			// A counted race that met no pending request is kept for the next cancellation, so
			// that it races a decision as it is meant to.
			_ = s.faults.Add(faults.Rule{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Count: 1, Decision: c.fault.Decision})
		}
	}
	rec, err := s.cancelAs(c.who.instance, id)
	if errors.Is(err, ErrAlreadyTerminal) {
		return fail(provider.CodeAlreadyTerminal, "the request is already "+rec.Status+": its outcome is unchanged")
	}
	if err != nil {
		return s.failure(err, "no request "+id+" of this instance")
	}
	return success(http.StatusOK, s.wire(rec))
}

// decideBeforeCancel is the decide_before_cancel fault: it decides an instance's pending request just
// before its cancellation is applied, as a human deciding at the same moment would. It reports whether
// it decided one.
func (s *Server) decideBeforeCancel(instance, id, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.loadAsLocked(instance, id)
	if err != nil || rec.Status != provider.StatusPending {
		return false
	}
	if _, err := s.decideLocked(id, status, status+" while the cancellation was on its way (injected race)", nil, 0); err != nil {
		s.log.Error(err, "deciding before a cancellation", "id", id)
		return false
	}
	s.stats.update(func(st *Stats) { st.RacedDecisions++ })
	return true
}

// quote renders untrusted text for a message: quoted, escaped, and at most 80 characters of it.
func quote(s string) string {
	if r := []rune(s); len(r) > 80 {
		s = string(r[:80]) + "…"
	}
	return `"` + visibleText(s) + `"`
}
