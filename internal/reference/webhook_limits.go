package reference

import (
	"context"
	"net/url"
	"sync"
)

// Limits on outbound webhook traffic (verification and delivery alike), the reference provider's
// policy: at most maxWebhookConcurrency exchanges at once in all, and at most
// maxWebhookHostConcurrency to one receiver host, whatever instance or URL path they are for. An
// exchange waits for a slot within its own timeout. Beyond these, each event has at most one attempt
// in flight and retries follow the backoff schedule; there is no rate limit per provisioner.
const (
	maxWebhookConcurrency     = 32
	maxWebhookHostConcurrency = 4
)

type webhookLimiter struct {
	all   chan struct{}
	mu    sync.Mutex
	hosts map[string]chan struct{}
}

func newWebhookLimiter() *webhookLimiter {
	return &webhookLimiter{all: make(chan struct{}, maxWebhookConcurrency), hosts: map[string]chan struct{}{}}
}

// acquire takes a slot for an exchange with the receiver at rawURL, or returns ctx's error.
func (l *webhookLimiter) acquire(ctx context.Context, rawURL string) (release func(), err error) {
	host := rawURL
	if u, err := url.Parse(rawURL); err == nil {
		host = u.Hostname()
	}
	l.mu.Lock()
	slots := l.hosts[host]
	if slots == nil {
		slots = make(chan struct{}, maxWebhookHostConcurrency)
		l.hosts[host] = slots
	}
	l.mu.Unlock()
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case l.all <- struct{}{}:
	case <-ctx.Done():
		<-slots
		return nil, ctx.Err()
	}
	return func() { <-l.all; <-slots }, nil
}
