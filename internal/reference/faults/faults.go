// Package faults is the reference provider's fault injection, a test hook apart from the provider
// itself: rules that make calls of its API (and its notification deliveries) fail in the ways a real
// provider and network fail. A Server without an Injector injects nothing; `reference-provider serve`
// runs without one. Tests give one (reference.Options.Faults) and change its rules at runtime, in Go
// or through the admin API.
package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Op names a call of the provider API, as fault rules and the provider's counters refer to it.
type Op string

// Operations.
const (
	OpSubmit    Op = "submit"    // POST /v1/requests
	OpGet       Op = "get"       // GET /v1/requests/{id}
	OpCancel    Op = "cancel"    // DELETE /v1/requests/{id}
	OpInstances Op = "instances" // POST /v1/instances, GET, PATCH and DELETE /v1/instances/{id}
	OpAny       Op = "any"       // matches every operation of the provider API (not deliver)
	// OpDeliver is a notification delivery attempt (asynchronous mode): the provider calling a
	// receiver, not a call of its API. Only its own rules match it (not any), with the kinds drop,
	// duplicate and delay.
	OpDeliver Op = "deliver"
)

// Kind is what a fault rule does to a call it fires on.
type Kind string

// Fault kinds.
const (
	// Error5xx answers with a 5xx (Rule.Status, default 503) without doing the operation: an
	// ErrorResponse for 500 (internal) and 503 (unavailable), plain text for any other status, as an
	// intermediary in front of a provider answers.
	Error5xx Kind = "error5xx"
	// DropAfterCommit performs the operation and commits it, then closes the connection without a response.
	DropAfterCommit Kind = "drop_after_commit"
	// Delay waits Rule.Delay before performing the operation. If the client goes away first, the
	// operation is not performed. A delayed submission holds its Idempotency-Key meanwhile, so a concurrent
	// submission with the same key waits for it, then replays it. On op deliver the attempt waits (its
	// event stays in flight) while other events are delivered: later notifications overtake it.
	Delay Kind = "delay"
	// Reset resets the TCP connection (RST) without doing the operation.
	Reset Kind = "reset"
	// RateLimit answers 429 rate_limited with Retry-After (Rule.RetryAfter, in whole seconds, rounded up).
	RateLimit Kind = "rate_limit"
	// DecideBeforeCancel (op cancel only) decides a pending request (Rule.Decision: approved, the
	// default, or denied) just before the cancellation is applied, so that the DELETE answers 409
	// already_terminal: a human deciding while the cancellation is on its way.
	DecideBeforeCancel Kind = "decide_before_cancel"
	// DropDelivery (op deliver only) fails a delivery attempt without sending it, as if the
	// receiver were unreachable: the attempt counts as failed and the event is retried on the
	// delivery schedule. The notification is not lost for good.
	DropDelivery Kind = "drop"
	// Duplicate (op deliver only) sends the event twice at once (same webhook-id and body), as a
	// provider retrying an attempt whose answer it did not wait for does; the first's answer counts.
	Duplicate Kind = "duplicate"
)

// Rule injects a fault into matching calls. A rule fires on a matching call with probability
// Probability (drawn from the seeded source of the Injector), or on every matching call if Probability is 0;
// Count, if positive, is how many more times it fires before it is removed. At least one of Probability
// and Count must be set. Rules are tried in order and at most one fires per call.
//
// In JSON, Delay and RetryAfter are Go duration strings: {"op":"submit","kind":"delay","delay":"2s","count":1}.
type Rule struct {
	Op          Op            // submit, get, cancel, instances, deliver or any (the default; cancel for decide_before_cancel, deliver for drop and duplicate)
	Kind        Kind          // what the fault does
	Probability float64       // in [0, 1]; 0 means every matching call
	Count       int           // fires this many more times, then the rule is removed; 0 means unlimited
	Status      int           // error5xx: the HTTP status, 500-599 (default 503)
	Delay       time.Duration // delay: how long to wait before the operation
	RetryAfter  time.Duration // rate_limit: the Retry-After value; error5xx: sent if positive
	Decision    string        // decide_before_cancel: approved (the default) or denied
}

type faultRuleJSON struct {
	Op          Op      `json:"op,omitempty"`
	Kind        Kind    `json:"kind"`
	Probability float64 `json:"probability,omitempty"`
	Count       int     `json:"count,omitempty"`
	Status      int     `json:"status,omitempty"`
	Delay       string  `json:"delay,omitempty"`
	RetryAfter  string  `json:"retry_after,omitempty"`
	Decision    string  `json:"decision,omitempty"`
}

// MarshalJSON renders the rule with durations as Go duration strings.
func (r Rule) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultRuleJSON{
		Op: r.Op, Kind: r.Kind, Probability: r.Probability, Count: r.Count, Status: r.Status,
		Delay: formatDuration(r.Delay), RetryAfter: formatDuration(r.RetryAfter), Decision: r.Decision,
	})
}

// UnmarshalJSON reads a rule whose durations are Go duration strings.
func (r *Rule) UnmarshalJSON(data []byte) error {
	var j faultRuleJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	delay, err := optionalDuration("delay", j.Delay)
	if err != nil {
		return err
	}
	retryAfter, err := optionalDuration("retry_after", j.RetryAfter)
	if err != nil {
		return err
	}
	*r = Rule{
		Op: j.Op, Kind: j.Kind, Probability: j.Probability, Count: j.Count, Status: j.Status,
		Delay: delay, RetryAfter: retryAfter, Decision: j.Decision,
	}
	return nil
}

func formatDuration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func optionalDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return d, nil
}

// normalised validates the rule and fills in its defaults.
func (r Rule) normalised() (Rule, error) {
	if r.Op == "" {
		switch r.Kind {
		case DecideBeforeCancel:
			r.Op = OpCancel
		case DropDelivery, Duplicate:
			r.Op = OpDeliver
		default:
			r.Op = OpAny
		}
	}
	switch r.Op {
	case OpSubmit, OpGet, OpCancel, OpInstances, OpAny, OpDeliver:
	default:
		return r, fmt.Errorf("unknown fault op %q: use submit, get, cancel, instances, deliver or any", r.Op)
	}
	deliveryKind := r.Kind == DropDelivery || r.Kind == Duplicate
	if deliveryKind && r.Op != OpDeliver {
		return r, fmt.Errorf("a %s fault acts on notification deliveries: its op is deliver, not %q", r.Kind, r.Op)
	}
	if r.Op == OpDeliver && !deliveryKind && r.Kind != Delay {
		return r, fmt.Errorf("a fault of op deliver is drop, duplicate or delay, not %q", r.Kind)
	}
	if r.Probability < 0 || r.Probability > 1 {
		return r, fmt.Errorf("fault probability %v is outside [0, 1]", r.Probability)
	}
	if r.Count < 0 {
		return r, fmt.Errorf("fault count %d is negative", r.Count)
	}
	if r.Probability == 0 && r.Count == 0 {
		return r, fmt.Errorf("a fault rule needs a probability or a count")
	}
	if r.RetryAfter < 0 {
		return r, fmt.Errorf("fault retry_after %v is negative", r.RetryAfter)
	}
	switch r.Kind {
	case Error5xx:
		if r.Status == 0 {
			r.Status = 503
		}
		if r.Status < 500 || r.Status > 599 {
			return r, fmt.Errorf("error5xx status %d is not a 5xx", r.Status)
		}
	case Delay:
		if r.Delay <= 0 {
			return r, fmt.Errorf("a delay fault needs a positive delay")
		}
	case DecideBeforeCancel:
		if r.Op != OpCancel {
			return r, fmt.Errorf("a decide_before_cancel fault acts on cancellations: its op is cancel, not %q", r.Op)
		}
		if r.Decision == "" {
			r.Decision = "approved"
		}
		if r.Decision != "approved" && r.Decision != "denied" {
			return r, fmt.Errorf("a decide_before_cancel fault's decision is approved or denied, not %q", r.Decision)
		}
	case DropAfterCommit, Reset, RateLimit, DropDelivery, Duplicate:
	default:
		return r, fmt.Errorf("unknown fault kind %q", r.Kind)
	}
	if r.Decision != "" && r.Kind != DecideBeforeCancel {
		return r, fmt.Errorf("only a decide_before_cancel fault has a decision")
	}
	return r, nil
}

func (r Rule) matches(op Op) bool {
	return r.Op == op || (r.Op == OpAny && op != OpDeliver)
}

// Injector holds the active fault rules of a Server. It is safe for concurrent use; a nil Injector
// fires nothing.
type Injector struct {
	mu    sync.Mutex
	rules []Rule
	rng   *rand.Rand
}

// New returns an Injector with no rules, whose probabilistic rules draw from a source seeded with seed.
func New(seed uint64) *Injector {
	return &Injector{rng: newRand(seed)}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// errNone is the error of a change to a nil Injector.
var errNone = errors.New("no fault injector: the server was made without one (reference.Options.Faults)")

// Set replaces the active rules. On error the active rules are left unchanged.
func (f *Injector) Set(rules ...Rule) error {
	if f == nil {
		return errNone
	}
	valid, err := normaliseAll(rules)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = valid
	return nil
}

// Add appends rules after the active ones. On error no rule is added.
func (f *Injector) Add(rules ...Rule) error {
	if f == nil {
		return errNone
	}
	valid, err := normaliseAll(rules)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, valid...)
	return nil
}

// Clear removes every rule.
func (f *Injector) Clear() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Rules returns the active rules, with their remaining counts.
func (f *Injector) Rules() []Rule {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.rules)
}

// Seed reseeds the source that probabilistic rules draw from.
func (f *Injector) Seed(seed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rng = newRand(seed)
}

// Fire returns the rule that fires on a call of op, if any, and consumes one of its count.
func (f *Injector) Fire(op Op) (Rule, bool) {
	if f == nil {
		return Rule{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if !r.matches(op) || (r.Probability > 0 && f.rng.Float64() >= r.Probability) {
			continue
		}
		if r.Count > 0 {
			f.rules[i].Count--
			if f.rules[i].Count == 0 {
				f.rules = slices.Delete(f.rules, i, i+1)
			}
		}
		return r, true
	}
	return Rule{}, false
}

func normaliseAll(rules []Rule) ([]Rule, error) {
	valid := make([]Rule, 0, len(rules))
	for _, r := range rules {
		n, err := r.normalised()
		if err != nil {
			return nil, err
		}
		valid = append(valid, n)
	}
	return valid, nil
}
