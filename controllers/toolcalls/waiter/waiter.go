// Package waiter long-polls pending approval requests for the ToolCall controller, one goroutine per
// request, so that no reconcile worker ever blocks on a poll.
package waiter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// Waiter long-polls pending approval requests, one goroutine per request, so that no reconcile worker
// ever blocks on a poll. It reports a request back to the controller (through Events, a channel
// source) only when the request changed: a decision, a cancellation, an expiry or a final error.
type Waiter struct {
	wait   time.Duration
	log    logr.Logger
	events chan event.TypedGenericEvent[*tg.ToolCall]

	// retryDelay spaces out repeated polls after a non-retryable, non-final error (e.g. 401).
	retryDelay time.Duration

	mu      sync.Mutex
	ctx     context.Context
	stopped bool // Start's context ended: no new poller may join wg, which Start is waiting on
	watches map[types.UID]*watch
	wg      sync.WaitGroup
}

type watch struct {
	cancel context.CancelFunc
	client provider.Client
	ref    provider.Ref
	latest *Observation
}

// pendingWaiters counts the requests being long-polled, on the manager's metrics registry.
var pendingWaiters = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "toolgate_pending_waiters",
	Help: "Approval requests being long-polled right now.",
})

func init() { metrics.Registry.MustRegister(pendingWaiters) }

// Observation is what the Waiter last learnt about a request: its state, or why it stopped.
type Observation struct {
	Request *provider.Request
	// Err is a final error: the request is gone (404) or a response could not be trusted.
	Err error
}

// New returns a Waiter polling with the given long-poll wait.
func New(wait time.Duration, log logr.Logger) *Waiter {
	return &Waiter{
		wait:       wait,
		log:        log,
		events:     make(chan event.TypedGenericEvent[*tg.ToolCall], 1024),
		retryDelay: 5 * time.Second,
		ctx:        context.Background(),
		watches:    map[types.UID]*watch{},
	}
}

// Events is the channel the controller watches.
func (w *Waiter) Events() <-chan event.TypedGenericEvent[*tg.ToolCall] { return w.events }

// Start binds the waiter's goroutines to ctx (the manager's) and stops them all when it ends.
// It implements manager.Runnable.
func (w *Waiter) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	<-ctx.Done()
	w.mu.Lock()
	w.stopped = true
	for uid, wt := range w.watches {
		wt.cancel()
		delete(w.watches, uid)
	}
	w.mu.Unlock()
	pendingWaiters.Set(0)
	w.wg.Wait()
	return nil
}

// Ensure starts polling the request of tc at its provider, client, unless it is already being polled
// there. Polling stops at until, when the reconciler is to look again (Events wakes it for whatever
// happens before).
func (w *Waiter) Ensure(tc *tg.ToolCall, client provider.Client, ref provider.Ref, until time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		// The manager is stopping and a reconcile still in flight asks: nothing is polled any more
		// (the next manager follows the request from the ToolCall's status).
		return until
	}
	if wt, ok := w.watches[tc.UID]; ok && wt.ref == ref && wt.client == client {
		return until
	} else if ok {
		wt.cancel()
	}
	ctx, cancel := context.WithTimeout(w.ctx, until)
	wt := &watch{cancel: cancel, client: client, ref: ref}
	w.watches[tc.UID] = wt
	pendingWaiters.Set(float64(len(w.watches)))
	// The goroutine must not touch tc: the reconciler goes on writing into it.
	p := &poller{w: w, ctx: ctx, uid: tc.UID, key: types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}, wt: wt}
	w.wg.Add(1)
	go p.run()
	return until
}

// Latest returns what the waiter last observed for uid, if it observed anything worth reporting.
func (w *Waiter) Latest(uid types.UID) (Observation, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt, ok := w.watches[uid]; ok && wt.latest != nil {
		return *wt.latest, true
	}
	return Observation{}, false
}

// Stop stops polling for uid and forgets it. Stopping an unknown uid is a no-op.
func (w *Waiter) Stop(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt, ok := w.watches[uid]; ok {
		wt.cancel()
		delete(w.watches, uid)
		pendingWaiters.Set(float64(len(w.watches)))
	}
}

// poller long-polls one request. It is one goroutine at a time, but not the same one throughout:
// each long poll starts on a fresh goroutine and the previous one ends. Reading and checking an answer
// grows a goroutine's stack to twice what waiting needs, and a stack keeps its size while it is in
// use, so a single goroutine would hold the larger stack through every following wait, for each of
// thousands of pending requests.
type poller struct {
	w   *Waiter
	ctx context.Context
	uid types.UID
	key types.NamespacedName
	wt  *watch
}

// run makes one long poll and hands the next to a new goroutine, unless the request is settled.
func (p *poller) run() {
	defer p.w.wg.Done()
	if p.poll() {
		p.w.wg.Add(1)
		go p.run()
	}
}

// minPollInterval spaces out the polls of one request when the provider answers pending at once: a
// provider that does not honour ?wait= is polled once a second, not in a loop.
const minPollInterval = time.Second

// poll makes one long poll and reports whether to poll again.
func (p *poller) poll() bool {
	w, ctx := p.w, p.ctx
	if ctx.Err() != nil {
		return false
	}
	start := time.Now()
	req, err := p.wt.client.Wait(ctx, p.wt.ref, w.wait)
	if ctx.Err() != nil {
		// Stopped, or our limit reached: the reconciler acts on the limit with its own clock.
		return false
	}
	if err != nil {
		// The logger is built only when there is something to log: a logger with values holds an
		// encoded copy of them, which thousands of waiting requests would each keep for nothing.
		log := w.log.WithValues("toolcall", p.key, "requestID", p.wt.ref.ID)
		if isFinalWaitError(err) {
			log.Info("stopped polling on a final provider error", "code", provider.CodeOf(err))
			w.report(ctx, p.uid, p.key, p.wt, &Observation{Err: err})
			return false
		}
		// Not retryable by the client, but not final for the ToolCall either (e.g. a rejected
		// credential an operator can fix): try again later until the limit.
		log.Info("provider poll failed; will poll again", "code", provider.CodeOf(err))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(w.retryDelay):
			return true
		}
	}
	if provider.IsTerminal(req.Status) {
		w.report(ctx, p.uid, p.key, p.wt, &Observation{Request: req})
		return false
	}
	// Still pending: nothing changed that the controller needs to hear about.
	if rest := minPollInterval - time.Since(start); rest > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(rest):
		}
	}
	return true
}

// report records an observation and wakes the controller for the ToolCall.
func (w *Waiter) report(ctx context.Context, uid types.UID, key types.NamespacedName, wt *watch, obs *Observation) {
	w.mu.Lock()
	if cur, ok := w.watches[uid]; !ok || cur != wt {
		w.mu.Unlock()
		return
	}
	wt.latest = obs
	w.mu.Unlock()
	tc := &tg.ToolCall{}
	tc.Namespace, tc.Name, tc.UID = key.Namespace, key.Name, uid
	select {
	case w.events <- event.TypedGenericEvent[*tg.ToolCall]{Object: tc}:
	case <-ctx.Done():
	}
}

// isFinalWaitError: the request is unknown to the provider, or a response could not be trusted.
func isFinalWaitError(err error) bool {
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == provider.CodeNotFound || provider.IsUntrusted(err)
}
