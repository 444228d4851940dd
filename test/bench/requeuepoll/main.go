// Command requeuepoll is the manager with the design most Kubernetes approval controllers use instead
// of Toolgate's long polls, the baseline the benchmarks measure Toolgate against: each reconcile of a
// pending ToolCall reads its request once without waiting, and the ToolCall is reconciled again after
// --requeue-poll. It takes the manager's flags, and runs everything else as the manager does.
package main

import (
	"context"
	"flag"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/managercmd"
	"toolgate.dev/toolgate/internal/provider"
)

// callTimeout bounds one read, as the reconciler bounds its own provider calls (its CallTimeout).
const callTimeout = 15 * time.Second

func main() {
	interval := flag.Duration("requeue-poll", 5*time.Second, "Read each pending request without waiting and reconcile its ToolCall again after this interval.")
	managercmd.Main(func(o *controllers.Options) {
		o.Waiter = &requeuePoller{client: o.Provider, interval: *interval, refs: map[types.UID]provider.Ref{},
			never: make(chan event.TypedGenericEvent[*tg.ToolCall])}
	})
}

// requeuePoller is the baseline's controllers.DecisionWaiter: no goroutine and no open request per
// pending ToolCall. Latest reads the request, inside the reconcile, without waiting; Ensure has the
// ToolCall reconciled again (a requeue) after the interval.
type requeuePoller struct {
	client   provider.Client
	interval time.Duration
	never    chan event.TypedGenericEvent[*tg.ToolCall]

	mu   sync.Mutex
	refs map[types.UID]provider.Ref
}

func (p *requeuePoller) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Events never fires: the baseline learns of a decision only when it reads the request.
func (p *requeuePoller) Events() <-chan event.TypedGenericEvent[*tg.ToolCall] {
	return p.never
}

func (p *requeuePoller) Ensure(tc *tg.ToolCall, ref provider.Ref, left time.Duration) time.Duration {
	p.mu.Lock()
	p.refs[tc.UID] = ref
	p.mu.Unlock()
	return min(p.interval, left)
}

// Latest reads the request once without waiting, and returns what the reconciler acts on: a final
// state, or a final error (the request is unknown, or the answer could not be trusted).
func (p *requeuePoller) Latest(uid types.UID) (controllers.Observation, bool) {
	p.mu.Lock()
	ref, ok := p.refs[uid]
	p.mu.Unlock()
	if !ok {
		return controllers.Observation{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := p.client.Wait(ctx, ref, 0)
	switch {
	case err == nil && provider.IsTerminal(req.Status):
		return controllers.Observation{Request: req}, true
	case err != nil && (provider.CodeOf(err) == provider.CodeNotFound || provider.IsUntrusted(err)):
		return controllers.Observation{Err: err}, true
	}
	return controllers.Observation{}, false
}

func (p *requeuePoller) Stop(uid types.UID) {
	p.mu.Lock()
	delete(p.refs, uid)
	p.mu.Unlock()
}
