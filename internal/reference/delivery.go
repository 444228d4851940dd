package reference

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"toolgate.dev/toolgate/internal/aapwebhook"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// Notification delivery. When a request of an instance with a receiver becomes terminal (a decision,
// expiry at its deadline, cancellation by DELETE), the transaction that records the outcome also
// records one request.resolved event. Deleting the instance cancels its pending requests without
// notifications and ends its outstanding deliveries; removing delivery (PATCH delivery: null) ends
// them too. A replaced receiver gets the queued events at once (after the attempt in flight, if
// any), signed with its own secret; their ids, bodies and retry deadlines stay.
//
// Each event is attempted promptly, then retried with exponential backoff and jitter (from
// Options.WebhookRetryDelay, by default firstRetryDelay, doubling, up to Options.WebhookMaxRetryDelay,
// by default maxRetryDelay, plus up to 20%) until a 2xx acknowledges it or
// deliveryWindow has passed since its created_at (its decision's decided_at). At most one attempt per
// event is in flight; each has at most Options.WebhookTimeout and ends by the retry deadline. A
// connection failure, a timeout, a redirect (never followed) or any other status is a failed attempt;
// on 429 and 503 the next attempt waits at least what Retry-After says, within the window. The
// server's clock schedules attempts, so that tests can step through the window.
//
// Fault rules of op deliver act on attempts (faults/faults.go): drop (the attempt fails unsent, as if the
// receiver were unreachable, and is retried), duplicate (the event is sent twice at once, same id and
// body) and delay (the attempt waits first, in real time, while other events go ahead of it).

const (
	deliveryWindow  = 168 * time.Hour
	deliveryGrace   = 24 * time.Hour
	firstRetryDelay = 10 * time.Second
	maxRetryDelay   = time.Hour
)

// deliveries is the in-memory side of delivery: a timer per scheduled event and the events with an
// attempt in flight.
type deliveries struct {
	mu       sync.Mutex
	timers   map[string]clock.Timer
	inflight map[string]bool
	rerun    map[string]bool // events asked for at once while an attempt was in flight
	ctx      context.Context // cancelled by Close: attempts in flight end
	cancel   context.CancelFunc
}

func newDeliveries() *deliveries {
	ctx, cancel := context.WithCancel(context.Background())
	return &deliveries{timers: map[string]clock.Timer{}, inflight: map[string]bool{}, rerun: map[string]bool{}, ctx: ctx, cancel: cancel}
}

// stop ends every timer and attempt (Close).
func (d *deliveries) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancel()
	for id, t := range d.timers {
		t.Stop()
		delete(d.timers, id)
	}
}

// forget stops the timers of events whose delivery has ended.
func (d *deliveries) forget(ids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		if t := d.timers[id]; t != nil {
			t.Stop()
			delete(d.timers, id)
		}
	}
}

// newEventLocked is the notification of a request that has just become terminal, or nil if its
// instance has no receiver.
func (s *Server) newEventLocked(rec record) (*eventRecord, error) {
	ir, ok := s.instances[rec.Instance]
	if !ok || ir.deleted() || ir.Delivery == nil || rec.Decision == nil || rec.Decision.DecidedAt == nil {
		return nil, nil
	}
	at := rec.Decision.DecidedAt.UTC()
	ev := eventRecord{ID: uuid.NewString(), Instance: rec.Instance, RequestID: rec.ID, CreatedAt: at, NextAt: s.clock.Now()}
	body, err := json.Marshal(aapwebhook.Message{ID: ev.ID, Type: aapwebhook.TypeResolved, InstanceID: ev.Instance, RequestID: ev.RequestID,
		CreatedAt: at})
	if err != nil {
		return nil, err
	}
	ev.Body = string(body)
	return &ev, nil
}

// resumeDeliveries schedules the undelivered events of a reopened store.
func (s *Server) resumeDeliveries() error {
	all, err := s.store.events()
	if err != nil {
		return err
	}
	for _, ev := range all {
		if !ev.ended() {
			s.scheduleDelivery(ev.ID, ev.NextAt)
		}
	}
	return nil
}

// scheduleDelivery arranges an attempt at an event at (by the server's clock), replacing any
// attempt scheduled before; one due now starts at once.
func (s *Server) scheduleDelivery(id string, at time.Time) {
	d := s.deliveries
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx.Err() != nil {
		return
	}
	if t := d.timers[id]; t != nil {
		t.Stop()
		delete(d.timers, id)
	}
	wait := at.Sub(s.clock.Now())
	if wait <= 0 {
		go s.attemptDelivery(id)
		return
	}
	// The fake clock runs callbacks while holding its own lock, so the attempt runs apart.
	d.timers[id] = s.clock.AfterFunc(wait, func() { go s.attemptDelivery(id) })
}

// redeliverLocked schedules the undelivered events of an instance now, after its receiver changed.
func (s *Server) redeliverLocked(instance string) error {
	all, err := s.store.events()
	if err != nil {
		return err
	}
	now := s.clock.Now()
	for _, ev := range all {
		if ev.Instance == instance && !ev.ended() {
			s.scheduleDelivery(ev.ID, now)
		}
	}
	return nil
}

// attemptDelivery makes one attempt at an event, unless one is already in flight, and records its
// outcome: delivered, or the next attempt scheduled, or retries ended.
func (s *Server) attemptDelivery(id string) {
	d := s.deliveries
	d.mu.Lock()
	if d.ctx.Err() != nil {
		d.mu.Unlock()
		return
	}
	if d.inflight[id] { // never two at once: the attempt in flight schedules the next one at once
		d.rerun[id] = true
		d.mu.Unlock()
		return
	}
	d.inflight[id] = true
	delete(d.timers, id)
	d.mu.Unlock()
	rerun := false
	done := func() {
		d.mu.Lock()
		delete(d.inflight, id)
		rerun = d.rerun[id]
		delete(d.rerun, id)
		d.mu.Unlock()
	}

	s.mu.Lock()
	ev, cfg, ok := s.deliverableLocked(id)
	if !ok {
		s.mu.Unlock()
		done()
		return
	}
	deadline := ev.CreatedAt.Add(deliveryWindow)
	if !s.clock.Now().Before(deadline) {
		s.endEventLocked(ev, "expired")
		s.mu.Unlock()
		done()
		s.stats.update(func(st *Stats) { st.DeliveriesAbandoned++ })
		return
	}
	s.mu.Unlock()

	resp, ended, err := s.sendAttempt(&cfg, ev, deadline)
	if ended {
		done()
		return
	}
	delivered := err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300

	s.mu.Lock()
	ev, _, ok = s.deliverableLocked(id)
	if !ok { // delivery ended while the attempt was in flight
		s.mu.Unlock()
		done()
		s.stats.update(func(st *Stats) { st.DeliveryAttempts++; countAttempt(st, delivered) })
		return
	}
	now := s.clock.Now()
	ev.Attempts++
	if delivered {
		s.endEventLocked(ev, "delivered")
		s.mu.Unlock()
		done()
		s.log.Info("notification delivered", "event", ev.ID, "request", ev.RequestID, "attempts", ev.Attempts)
		s.stats.update(func(st *Stats) { st.DeliveryAttempts++; st.Delivered++ })
		return
	}
	next := now.Add(retryDelay(s.opts.WebhookRetryDelay, s.opts.WebhookMaxRetryDelay, ev.Attempts, resp))
	if !next.Before(deadline) {
		s.endEventLocked(ev, "expired")
		s.mu.Unlock()
		done()
		s.log.Info("notification retries ended", "event", ev.ID, "request", ev.RequestID, "attempts", ev.Attempts)
		s.stats.update(func(st *Stats) { st.DeliveryAttempts++; st.DeliveryFailures++; st.DeliveriesAbandoned++ })
		return
	}
	ev.NextAt = next
	if err := s.store.putEvent(ev); err != nil {
		s.log.Error(err, "recording a delivery attempt", "event", ev.ID)
	}
	s.mu.Unlock()
	done()
	if rerun { // the receiver was replaced during the attempt: try the new one now
		next = now
	}
	s.scheduleDelivery(id, next)
	s.stats.update(func(st *Stats) { st.DeliveryAttempts++; st.DeliveryFailures++ })
}

func countAttempt(st *Stats, delivered bool) {
	if delivered {
		st.Delivered++
	} else {
		st.DeliveryFailures++
	}
}

// deliverableLocked loads an event still to deliver and its instance's receiver.
func (s *Server) deliverableLocked(id string) (eventRecord, deliveryConfig, bool) {
	if s.closed {
		return eventRecord{}, deliveryConfig{}, false
	}
	ev, found, err := s.store.event(id)
	if err != nil {
		s.log.Error(err, "loading an event", "event", id)
	}
	if !found || ev.ended() {
		return eventRecord{}, deliveryConfig{}, false
	}
	ir, ok := s.instances[ev.Instance]
	if !ok || ir.deleted() || ir.Delivery == nil {
		return eventRecord{}, deliveryConfig{}, false
	}
	return ev, *ir.Delivery, true
}

// endEventLocked records that an event's delivery ended.
func (s *Server) endEventLocked(ev eventRecord, outcome string) {
	now := s.clock.Now()
	ev.EndedAt, ev.Outcome = &now, outcome
	if err := s.store.putEvent(ev); err != nil {
		s.log.Error(err, "recording the end of a delivery", "event", ev.ID)
	}
}

// errDroppedAttempt is the error of an attempt a drop fault failed unsent.
var errDroppedAttempt = errors.New("injected fault: delivery attempt dropped")

// sendAttempt sends an event once to its receiver, under the fault rules of op deliver; ended is true
// when the server closed during a delay fault (nothing was sent or recorded).
func (s *Server) sendAttempt(cfg *deliveryConfig, ev eventRecord, deadline time.Time) (resp *http.Response, ended bool, err error) {
	d := s.deliveries
	rule, fired := s.faults.Fire(faults.OpDeliver)
	if fired {
		s.stats.fault(rule.Kind)
		switch rule.Kind {
		case faults.DropDelivery:
			return nil, false, errDroppedAttempt
		case faults.Delay:
			t := time.NewTimer(rule.Delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-d.ctx.Done():
				return nil, true, nil
			}
		}
	}
	timeout := min(s.opts.WebhookTimeout, deadline.Sub(s.clock.Now()))
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	var twin sync.WaitGroup
	if fired && rule.Kind == faults.Duplicate {
		// The same event (id and body) sent a second time, racing the first; only the first's answer counts.
		twin.Add(1)
		go func() {
			defer twin.Done()
			_, _, _ = s.send(ctx, cfg, ev.ID, []byte(ev.Body))
		}()
	}
	resp, _, err = s.send(ctx, cfg, ev.ID, []byte(ev.Body))
	twin.Wait()
	return resp, false, err
}

// retryDelay is the wait before the attempt after attempts failed ones: exponential backoff with
// jitter from first up to limit, and at least what Retry-After says on a 429 or 503.
func retryDelay(first, limit time.Duration, attempts int, resp *http.Response) time.Duration {
	next := wait.Backoff{Duration: first, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: limit}.DelayFunc()
	var delay time.Duration
	for range min(attempts, 32) {
		delay = next()
	}
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if ra, ok := parseRetryAfter(resp.Header.Get("Retry-After")); ok && ra > delay {
			delay = ra
		}
	}
	return delay
}

// parseRetryAfter reads Retry-After: seconds, or an HTTP date.
func parseRetryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, int64(deliveryWindow/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}
