package reference

import (
	"maps"
	"sync"
)

// Stats counts what a Server has done since it was created (or since ResetStats).
type Stats struct {
	// Calls of the provider API, authenticated or not.
	Submits int64 `json:"submits"`
	Gets    int64 `json:"gets"`
	Cancels int64 `json:"cancels"`

	// What the calls did.
	Creates       int64 `json:"creates"`       // requests created
	Replays       int64 `json:"replays"`       // submissions answered with an existing request
	Cancellations int64 `json:"cancellations"` // pending requests cancelled
	Decisions     int64 `json:"decisions"`     // pending requests approved or denied
	Expiries      int64 `json:"expiries"`      // pending requests whose deadline passed

	// FaultsFired counts fired fault rules; Faults splits them by kind.
	FaultsFired int64               `json:"faults_fired"`
	Faults      map[FaultKind]int64 `json:"faults"`

	// Responses counts calls by operation and HTTP status. Status 0 means no response was written: the
	// connection was dropped or reset, or the client went away first.
	Responses map[Operation]map[int]int64 `json:"responses"`

	// Connections counts connections accepted (TLS or not), so a client's connection reuse shows.
	Connections int64 `json:"connections"`

	// Gauges: long polls blocked now, and submissions holding their Idempotency-Key now.
	Waiting  int64 `json:"waiting"`
	InFlight int64 `json:"in_flight"`
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
	s.Responses = make(map[Operation]map[int]int64, len(r.s.Responses))
	for op, byStatus := range r.s.Responses {
		s.Responses[op] = maps.Clone(byStatus)
	}
	return s
}

// reset zeroes the counters but keeps the gauges.
func (r *statsRecorder) reset() {
	r.update(func(s *Stats) { *s = Stats{Waiting: s.Waiting, InFlight: s.InFlight} })
}

func (r *statsRecorder) call(op Operation) {
	r.update(func(s *Stats) {
		switch op {
		case OpSubmit:
			s.Submits++
		case OpGet:
			s.Gets++
		case OpCancel:
			s.Cancels++
		}
	})
}

func (r *statsRecorder) response(op Operation, status int) {
	r.update(func(s *Stats) {
		if s.Responses == nil {
			s.Responses = map[Operation]map[int]int64{}
		}
		if s.Responses[op] == nil {
			s.Responses[op] = map[int]int64{}
		}
		s.Responses[op][status]++
	})
}

func (r *statsRecorder) fault(kind FaultKind) {
	r.update(func(s *Stats) {
		if s.Faults == nil {
			s.Faults = map[FaultKind]int64{}
		}
		s.Faults[kind]++
		s.FaultsFired++
	})
}
