// This file replaces controllers/toolcalls/waiter/waiter.go in the benchmarks' baseline (see overlay.json and
// managerBinary in bench_test.go): the manager with the design most Kubernetes approval controllers
// use instead of Toolgate's long polls. Each reconcile of a pending ToolCall reads its request once
// without waiting, and the ToolCall is reconciled again after the interval, which the baseline reads
// from --poll-wait. No goroutine and no open request is held for a pending ToolCall.

package waiter

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// readTimeout bounds one read, as the reconciler bounds its own provider calls.
const readTimeout = 15 * time.Second

// Waiter is the baseline's: it remembers each pending request, and reads it when asked.
type Waiter struct {
	interval time.Duration
	never    chan event.TypedGenericEvent[*tg.ToolCall]

	mu   sync.Mutex
	refs map[types.UID]followed
}

// followed is a pending request and the client of its provider.
type followed struct {
	client provider.Client
	ref    provider.Ref
}

// Observation is what the Waiter last learnt about a request, as the product's.
type Observation struct {
	Request *provider.Request
	Err     error
}

// New returns the baseline's Waiter, which has ToolCalls reconciled again every interval.
func New(interval time.Duration, _ logr.Logger) *Waiter {
	return &Waiter{interval: interval, refs: map[types.UID]followed{},
		never: make(chan event.TypedGenericEvent[*tg.ToolCall])}
}

// Start waits for the manager to stop: the baseline runs nothing in the background.
func (w *Waiter) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Events never fires: the baseline learns of a decision only when it reads the request.
func (w *Waiter) Events() <-chan event.TypedGenericEvent[*tg.ToolCall] { return w.never }

// Ensure remembers the request of tc and its provider, and has the ToolCall reconciled again after the interval.
func (w *Waiter) Ensure(tc *tg.ToolCall, client provider.Client, ref provider.Ref, left time.Duration) time.Duration {
	w.mu.Lock()
	w.refs[tc.UID] = followed{client: client, ref: ref}
	w.mu.Unlock()
	return min(w.interval, left)
}

// Latest reads the request once without waiting, inside the reconcile, and returns what the
// reconciler acts on: a final state, or a final error (the request is unknown, or the answer could
// not be trusted).
func (w *Waiter) Latest(uid types.UID) (Observation, bool) {
	w.mu.Lock()
	f, ok := w.refs[uid]
	w.mu.Unlock()
	if !ok {
		return Observation{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	req, err := f.client.Wait(ctx, f.ref, 0)
	switch {
	case err == nil && provider.IsTerminal(req.Status):
		return Observation{Request: req}, true
	case err != nil && (provider.CodeOf(err) == provider.CodeNotFound || provider.IsUntrusted(err)):
		return Observation{Err: err}, true
	}
	return Observation{}, false
}

// Stop forgets the request of uid.
func (w *Waiter) Stop(uid types.UID) {
	w.mu.Lock()
	delete(w.refs, uid)
	w.mu.Unlock()
}
