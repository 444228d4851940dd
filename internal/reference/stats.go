package reference

import (
	"maps"
	"sync"

	"toolgate.dev/toolgate/internal/reference/faults"
)

// Stats counts what a Server has done since it was created (or since ResetStats).
type Stats struct {
	// Calls of the provider API, authenticated or not: POST /v1/requests, GET /v1/requests/{id},
	// DELETE /v1/requests/{id}, and the instance operations.
	Submits   int64 `json:"submits"`
	Gets      int64 `json:"gets"`
	Cancels   int64 `json:"cancels"`
	Instances int64 `json:"instances"`

	// What the calls did.
	Creates       int64 `json:"creates"`       // requests created
	Replays       int64 `json:"replays"`       // submissions answered with an existing request
	Cancellations int64 `json:"cancellations"` // pending requests cancelled
	Decisions     int64 `json:"decisions"`     // pending requests approved or denied
	// RacedDecisions counts the pending requests a decide_before_cancel fault decided (included in
	// Decisions): the cancellations that met a racing decision.
	RacedDecisions int64 `json:"raced_decisions"`
	Expiries       int64 `json:"expiries"` // pending requests whose deadline passed

	// FaultsFired counts fired fault rules; Faults splits them by kind.
	FaultsFired int64                 `json:"faults_fired"`
	Faults      map[faults.Kind]int64 `json:"faults"`

	// Purged counts the terminal requests removed once their retention ended.
	Purged int64 `json:"purged"`

	// Responses counts calls by operation and HTTP status. Status 0 means no response was written: the
	// connection was dropped or reset, or the client went away first.
	Responses map[faults.Op]map[int]int64 `json:"responses"`

	// Webhooks: receiver verifications sent, notification delivery attempts made, and their outcomes:
	// acknowledged (Delivered), failed (DeliveryFailures: an error, a timeout or a status other than
	// 2xx), and notifications whose retries ran out (DeliveriesAbandoned).
	WebhookVerifications int64 `json:"webhook_verifications"`
	DeliveryAttempts     int64 `json:"delivery_attempts"`
	Delivered            int64 `json:"delivered"`
	DeliveryFailures     int64 `json:"delivery_failures"`
	DeliveriesAbandoned  int64 `json:"deliveries_abandoned"`

	// Connections counts connections accepted (TLS or not), so a client's connection reuse shows.
	Connections int64 `json:"connections"`

	// Gauges: long polls blocked now, operations holding their Idempotency-Key now, and operations
	// waiting for another with the same key to finish (they then replay it).
	Waiting  int64 `json:"waiting"`
	InFlight int64 `json:"in_flight"`
	KeyWaits int64 `json:"key_waits"`
}

type statsRecorder struct {
	mu sync.Mutex
	s  Stats
}

func (r *statsRecorder) update(f func(*Stats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.s)
}

func (r *statsRecorder) snapshot() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.s
	s.Faults = maps.Clone(r.s.Faults)
	s.Responses = make(map[faults.Op]map[int]int64, len(r.s.Responses))
	for op, byStatus := range r.s.Responses {
		s.Responses[op] = maps.Clone(byStatus)
	}
	return s
}

// reset zeroes the counters but keeps the gauges.
func (r *statsRecorder) reset() {
	r.update(func(s *Stats) { *s = Stats{Waiting: s.Waiting, InFlight: s.InFlight, KeyWaits: s.KeyWaits} })
}

func (r *statsRecorder) call(op faults.Op) {
	r.update(func(s *Stats) {
		switch op {
		case faults.OpSubmit:
			s.Submits++
		case faults.OpGet:
			s.Gets++
		case faults.OpCancel:
			s.Cancels++
		case faults.OpInstances:
			s.Instances++
		}
	})
}

func (r *statsRecorder) response(op faults.Op, status int) {
	r.update(func(s *Stats) {
		if s.Responses == nil {
			s.Responses = map[faults.Op]map[int]int64{}
		}
		if s.Responses[op] == nil {
			s.Responses[op] = map[int]int64{}
		}
		s.Responses[op][status]++
	})
}

func (r *statsRecorder) fault(kind faults.Kind) {
	r.update(func(s *Stats) {
		if s.Faults == nil {
			s.Faults = map[faults.Kind]int64{}
		}
		s.Faults[kind]++
		s.FaultsFired++
	})
}
