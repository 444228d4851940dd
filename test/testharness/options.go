package testharness

import (
	"crypto/tls"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
)

// Option changes a harness before its manager starts.
type Option func(*Harness)

func WithClock(c clock.PassiveClock) Option { return func(h *Harness) { h.Opts.Clock = c } }
func WithPollWait(d time.Duration) Option   { return func(h *Harness) { h.Opts.PollWait = d } }
func WithWorkers(n int) Option              { return func(h *Harness) { h.Opts.MaxConcurrentReconciles = n } }
func WithCancelGiveUp(d time.Duration) Option {
	return func(h *Harness) { h.Opts.CancelGiveUp = d }
}

// WithFinishedCallTTL sets the manager's --finished-toolcall-ttl.
func WithFinishedCallTTL(d time.Duration) Option {
	return func(h *Harness) { h.Opts.FinishedCallTTL = d }
}

// WithProvider changes the reference provider's options before it starts.
func WithProvider(f func(*reference.Options)) Option {
	return func(h *Harness) { f(&h.providerOpts) }
}

// WithProviderClient changes the provider client's options before it is built.
func WithProviderClient(f func(*provider.Options)) Option {
	return func(h *Harness) { f(&h.clientOpts) }
}

// WithProviderTLS serves the reference provider over TLS with cert (StartTLS) instead of plain HTTP.
// The provider client trusts the system pool unless WithProviderClient sets a CAFile.
func WithProviderTLS(cert tls.Certificate) Option {
	return func(h *Harness) { h.providerTLS = &cert }
}

// WithProfile serves the reference provider in profile p, whatever ProfileEnv says.
func WithProfile(p reference.Profile) Option {
	return func(h *Harness) { h.providerOpts.Profile = p }
}

// WithExternalProvider points the manager's provider client at baseURL, authenticating with
// credential, instead of at the harness's reference provider (which still starts, unused by the manager).
func WithExternalProvider(baseURL, credential string) Option {
	return func(h *Harness) { h.externalURL, h.externalCredential = baseURL, credential }
}

// WithoutManager leaves the manager stopped: the test starts it (Start) or runs its own.
func WithoutManager() Option { return func(h *Harness) { h.noManager = true } }

// WithLogger gives the harness's managers the logger l (controller-runtime's Logger option), e.g. one
// that writes the JSON log the manager's binary writes, for a test that reads that log.
func WithLogger(l logr.Logger) Option { return func(h *Harness) { h.logger = &l } }
