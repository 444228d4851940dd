package toolcalls

import (
	"context"
	"time"

	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/provider"
)

// boundedCalls is the provider client as reconciles use it: every call (a submission, a
// cancellation, an immediate read) is bounded by timeout, so no worker waits on the provider longer
// than that. The waiter's long polls use the client itself; each carries its own wait.
type boundedCalls struct {
	client  provider.Client
	timeout time.Duration
}

var _ provider.Client = boundedCalls{}

func (b boundedCalls) Submit(ctx context.Context, s provider.Submission) (*provider.Request, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.client.Submit(ctx, s)
}

func (b boundedCalls) Wait(ctx context.Context, ref provider.Ref, wait time.Duration) (*provider.Request, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout+wait)
	defer cancel()
	return b.client.Wait(ctx, ref, wait)
}

func (b boundedCalls) Cancel(ctx context.Context, ref provider.Ref) (*provider.Request, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.client.Cancel(ctx, ref)
}

// callProvider is the client of one call's accepted provider (the acceptance record's), resolved
// once per reconcile (the scope keeps it), every call bounded by timeout. A provider that cannot be
// resolved (its object is gone and no client of it is left, or its record is unreadable) fails the
// call with a retryable unavailable error, as an unreachable provider would.
type callProvider struct {
	providers *providercache.Registry
	sc        *scope
	timeout   time.Duration
}

var _ provider.Client = callProvider{}

// raw is the client itself, unbounded (the waiter's long polls carry their own waits).
func (p callProvider) raw(ctx context.Context, op string) (provider.Client, error) {
	if p.sc.client != nil {
		return p.sc.client, nil
	}
	rec := p.sc.rec()
	k, err := providercache.Recorded(p.sc.tc, rec)
	if err != nil {
		return nil, &provider.Error{Op: op, Code: provider.CodeInvalidRequest, Detail: err.Error()}
	}
	c, _, err := p.providers.Client(ctx, k, false, rec.Instance)
	if u, ok := readiness.ErrorOf(err); ok {
		return nil, &provider.Error{Op: op, Code: provider.CodeUnavailable, Retryable: true, Detail: u.Message}
	}
	if err != nil {
		return nil, &provider.Error{Op: op, Code: provider.CodeUnavailable, Retryable: true, Err: err}
	}
	p.sc.client = c
	return c, nil
}

func (p callProvider) bounded(ctx context.Context, op string) (provider.Client, error) {
	c, err := p.raw(ctx, op)
	if err != nil {
		return nil, err
	}
	return boundedCalls{client: c, timeout: p.timeout}, nil
}

func (p callProvider) Submit(ctx context.Context, s provider.Submission) (*provider.Request, error) {
	c, err := p.bounded(ctx, "submit")
	if err != nil {
		return nil, err
	}
	return c.Submit(ctx, s)
}

func (p callProvider) Wait(ctx context.Context, ref provider.Ref, wait time.Duration) (*provider.Request, error) {
	c, err := p.bounded(ctx, "wait")
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, ref, wait)
}

func (p callProvider) Cancel(ctx context.Context, ref provider.Ref) (*provider.Request, error) {
	c, err := p.bounded(ctx, "cancel")
	if err != nil {
		return nil, err
	}
	return c.Cancel(ctx, ref)
}

// providerOf is the client of the accepted provider of the reconcile's call.
func (r *Reconciler) providerOf(sc *scope) callProvider {
	return callProvider{providers: r.Providers, sc: sc, timeout: r.CallTimeout}
}
