package controllers

import (
	"context"
	"time"

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
