// Package reference is a complete approvals provider that speaks the Agent Approval Protocol v1
// (AAP): requests, long polls, cancellation and instances. It stores requests, instances and
// idempotency keys in bbolt, and decides requests through an admin API, an approval page (or Go
// methods). Given a fault injector (Options.Faults, package faults), it also fails on demand, so that
// it serves as the test double against which the client's behaviour under failures is checked;
// `reference-provider serve` runs without one.
package reference

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"toolgate.dev/toolgate/internal/reference/faults"
)

// MinRetention is the shortest retention AAP allows: a terminal request and its idempotency key are
// kept for at least seven days after decided_at.
const MinRetention = 168 * time.Hour

// maxWebhookTimeout is the longest a receiver may take to answer, as AAP says.
const maxWebhookTimeout = 10 * time.Second

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// DBPath is the bbolt file holding requests, instances and idempotency keys. Empty means a temporary
	// file that Close removes. It holds provisioned instances' credentials (for provisioning replays)
	// until the instances are deleted, and their webhook signing secrets: keep it private (it is
	// created 0600).
	DBPath string
	// Credential is a static instance credential, bound to the built-in default instance
	// (DefaultInstance). Required unless ProvisionerToken is set.
	Credential string
	// ProvisionerToken is the bearer token that manages instances (POST /v1/instances, GET, PATCH and
	// DELETE /v1/instances/{id}); it cannot make approval requests, and an instance credential cannot
	// manage instances. Empty means no instance can be provisioned.
	ProvisionerToken string
	// CredentialLifetime is how long an instance credential issued by provisioning is valid; its
	// expires_at is given with it, and the provider refuses it (401) from then on. Zero means issued
	// credentials do not expire.
	CredentialLifetime time.Duration
	// AdminCredential is the bearer token of the admin API and of the approval page (/ui/): it decides
	// every request, so it is never an instance credential (New refuses one equal to Credential, the
	// provisioner token or an approver's). Empty means one drawn at random when the server is made,
	// which Server.AdminCredential returns.
	AdminCredential string
	// Clock stamps created_at, deadlines and decisions, fires deadline expiry and the retention purge.
	// Default: the real clock. Long-poll waits and fault delays are always measured in real time.
	Clock clock.WithDelayedExecution
	// MinTimeout and MaxTimeout bound a submission's timeout; one outside them is refused with 400.
	// Defaults: 1s and 24h.
	MinTimeout time.Duration
	MaxTimeout time.Duration
	// MaxWindow, if positive, is the longest approval window the provider grants: a request whose
	// timeout is longer gets deadline_at = created_at + MaxWindow, as AAP lets a provider shorten
	// (never lengthen) the requested window. Its timeout still says what was asked.
	MaxWindow time.Duration
	// Retention is how long a terminal request and its idempotency key are kept after decided_at, and a
	// deleted instance's record after its deletion; then they are purged. At least (and by default)
	// MinRetention.
	Retention time.Duration
	// MaxWait caps a long poll's wait: at most, and by default, 30s, as AAP says.
	MaxWait time.Duration
	// DefaultApprovalValidity is how long an approval stays valid when the decision does not say.
	// Default: 5m.
	DefaultApprovalValidity time.Duration
	// Faults injects the faults of its rules into calls of the provider API and notification
	// deliveries, for tests; nil (the default, and `reference-provider serve`) injects none, and the
	// admin API's /admin/v1/faults then answers 404.
	Faults *faults.Injector
	// HTTP2 offers HTTP/2 on TLS (StartTLS), as most HTTPS providers do: many long polls then share a
	// few connections. Connection faults (reset, drop after commit) then act on every stream of the
	// connection, so fault tests leave it off.
	HTTP2 bool
	// Logger receives one line per state change. The credentials are never logged. Default: discard.
	Logger logr.Logger
	// Profile is how the provider API answers: ProfileFull (the default) or ProfileSeed.
	Profile Profile
	// Approvers maps an approver's name to their own credential, with which they sign in to the approval
	// page and decide through the admin API (list and decide only). Every decision records who made it:
	// the approver's name, or AdminApprover for the admin credential. Optional.
	Approvers map[string]string
	// ApproverInstances limits an approver of Approvers to the requests of the instances given here by
	// id, and of those the admin grants them later through the admin API (PUT
	// /admin/v1/approvers/{name}/instances/{id}): the approval page and the admin API show them no
	// other request, and they can decide no other. An empty list scopes an approver to no instance
	// until one is granted. An approver without an entry sees every instance's requests, as the admin
	// credential does. Optional.
	ApproverInstances map[string][]string
	// Quorum is how many distinct approvers must approve a request through the admin API or the
	// approval page before it is approved (quorum.go), unless its instance has its own (PUT
	// /admin/v1/instances/{id}/quorum); any deny decides at once. 0 and 1 mean one approval, as
	// without a quorum. At most 32.
	Quorum int
	// AllowedWebhookNetworks are address ranges a webhook receiver may be at although they are not
	// public (loopback, private, link-local, metadata and the like are otherwise refused), for local
	// clusters and tests, e.g. 10.0.0.0/8 or 127.0.0.0/8. An address in one of them is allowed even if
	// it is a cloud metadata address: leave 169.254.0.0/16 and fd00::/8 out. Optional.
	AllowedWebhookNetworks []netip.Prefix
	// WebhookRootCAs are the roots that webhook receivers' certificates must chain to. Default: the
	// system roots.
	WebhookRootCAs *x509.CertPool
	// WebhookTimeout bounds a receiver verification and every delivery attempt: at most, and by
	// default, 10s, as AAP says.
	WebhookTimeout time.Duration
	// WebhookRetryDelay is the wait before a notification's first retry; each failed attempt doubles
	// it (plus up to 20% jitter), up to WebhookMaxRetryDelay. Defaults: 10s and 1h. Tests that
	// compress time (the chaos run) shorten both; the delivery window stays 7 days.
	WebhookRetryDelay    time.Duration
	WebhookMaxRetryDelay time.Duration
}

// Profile is how the provider API answers. Both profiles are conforming AAP v1 providers with the
// same operations (requests, long polls, DELETE to cancel, instances); they differ where AAP leaves a
// provider a choice.
type Profile string

const (
	// ProfileFull answers everything AAP defines: errors are ErrorResponse bodies (type, code, message,
	// param where a field is refused, request_id), and requests echo agent_reasoning and context when
	// they were sent.
	ProfileFull Profile = "full"
	// ProfileSeed is the fewest fields and features AAP allows, as a liberal peer: errors are plain
	// text (the status code says what happened, as an adapter must cope with), and requests carry only
	// the required fields and the decision (no agent_reasoning or context echoed, although they are
	// accepted, stored and shown to approvers). Replays are answered 200 and cancellation is DELETE, as
	// AAP requires. The admin API and the approval page are the same in both profiles.
	ProfileSeed Profile = "seed"
)

// ParseProfile returns the profile a name designates ("" is ProfileFull).
func ParseProfile(name string) (Profile, error) {
	switch Profile(name) {
	case "", ProfileFull:
		return ProfileFull, nil
	case ProfileSeed:
		return ProfileSeed, nil
	}
	return "", fmt.Errorf("unknown provider profile %q: use %q or %q", name, ProfileFull, ProfileSeed)
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.MinTimeout <= 0 {
		o.MinTimeout = time.Second
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = 24 * time.Hour
	}
	if o.DefaultApprovalValidity <= 0 {
		o.DefaultApprovalValidity = 5 * time.Minute
	}
	if o.AdminCredential == "" {
		o.AdminCredential = newSecretToken("rpa_")
	}
	if o.Profile == "" {
		o.Profile = ProfileFull
	}
	if o.Retention == 0 {
		o.Retention = MinRetention
	}
	if o.WebhookTimeout <= 0 || o.WebhookTimeout > maxWebhookTimeout {
		o.WebhookTimeout = maxWebhookTimeout
	}
	if o.WebhookRetryDelay <= 0 {
		o.WebhookRetryDelay = firstRetryDelay
	}
	if o.WebhookMaxRetryDelay <= 0 {
		o.WebhookMaxRetryDelay = max(maxRetryDelay, o.WebhookRetryDelay)
	}
	if o.MaxWait <= 0 || o.MaxWait > maxWait {
		o.MaxWait = maxWait
	}
	return o
}

// check refuses options that cannot work, saying which and how to fix them.
func (o Options) check() error {
	switch {
	case o.Credential == "" && o.ProvisionerToken == "":
		return errors.New("a credential is required: set Credential (a static instance credential) or ProvisionerToken, or both")
	case o.AdminCredential == o.Credential:
		return errors.New("the admin credential is the static instance credential: the admin API and the approval page decide every request, so give them a credential of their own (AdminCredential)")
	case o.ProvisionerToken != "" && (o.ProvisionerToken == o.Credential || o.ProvisionerToken == o.AdminCredential):
		return errors.New("the provisioner token must differ from the instance and admin credentials: give each role its own")
	case o.MinTimeout > o.MaxTimeout:
		return fmt.Errorf("MinTimeout %v exceeds MaxTimeout %v", o.MinTimeout, o.MaxTimeout)
	case o.CredentialLifetime < 0:
		return fmt.Errorf("CredentialLifetime %v is negative: leave it 0 for credentials that do not expire", o.CredentialLifetime)
	case o.MaxWindow < 0:
		return fmt.Errorf("MaxWindow %v is negative: leave it 0 for windows as long as the timeout asks", o.MaxWindow)
	case o.WebhookMaxRetryDelay < o.WebhookRetryDelay:
		return fmt.Errorf("WebhookMaxRetryDelay %v is shorter than WebhookRetryDelay %v", o.WebhookMaxRetryDelay, o.WebhookRetryDelay)
	case o.Quorum < 0 || o.Quorum > MaxQuorum:
		return fmt.Errorf("Quorum %d is not a number of approvers: give 1 to %d (0 means 1)", o.Quorum, MaxQuorum)
	case o.Retention < MinRetention:
		return fmt.Errorf("Retention %v is shorter than AAP allows: at least %v (seven days)", o.Retention, MinRetention)
	}
	_, err := ParseProfile(string(o.Profile))
	return err
}

// Server is the reference approvals provider. Its methods are safe for concurrent use.
type Server struct {
	opts            Options
	clock           clock.WithDelayedExecution
	log             logr.Logger
	store           *store
	tempDir         string
	credential      *[sha256.Size]byte // the static instance credential's hash, if any
	provisioner     *[sha256.Size]byte // the provisioner token's hash, if any
	admin           [sha256.Size]byte
	approvers       map[[sha256.Size]byte]string // credential hash -> approver name
	defaultInstance instanceRecord
	faults          *faults.Injector
	stats           statsRecorder
	handler         http.Handler
	webhooks        *http.Client // reaches webhook receivers
	webhookLimits   *webhookLimiter
	deliveries      *deliveries
	done            chan struct{} // closed by Close: long polls and delays return

	mu        sync.Mutex // serialises state changes; guards the fields below
	pending   map[string]*watch
	instances map[string]instanceRecord  // provisioned instances, deleted ones included
	grants    map[string]map[string]bool // approver -> instance ids granted through the admin API
	closed    bool

	credMu sync.RWMutex
	creds  map[[sha256.Size]byte]issued // live instance credential hash -> its instance and expiry

	keysMu   sync.Mutex
	inflight map[string]chan struct{} // idempotency keys held by an operation; closed on release

	httpMu  sync.Mutex
	httpSrv *http.Server

	closeOnce sync.Once
	closeErr  error
}

// New opens (or creates) the store and returns a Server that is not yet listening: call Start or StartTLS,
// or mount Handler. Pending requests found in the store resume their deadlines, and undelivered
// notifications their delivery.
func New(opts Options) (*Server, error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("reference provider: %w", err)
	}
	if err := checkScopes(opts); err != nil {
		return nil, fmt.Errorf("reference provider: %w", err)
	}
	approvers, err := hashApprovers(opts)
	if err != nil {
		return nil, fmt.Errorf("reference provider: %w", err)
	}
	path, tempDir, err := dbPath(opts.DBPath)
	if err != nil {
		return nil, err
	}
	st, err := openStore(path, tempDir != "", defaultInstanceID)
	if err != nil {
		return nil, errors.Join(err, removeAll(tempDir))
	}
	s := &Server{
		opts:            opts,
		clock:           opts.Clock,
		log:             opts.Logger,
		store:           st,
		tempDir:         tempDir,
		credential:      hashOf(opts.Credential),
		provisioner:     hashOf(opts.ProvisionerToken),
		admin:           sha256.Sum256([]byte(opts.AdminCredential)),
		approvers:       approvers,
		defaultInstance: instanceRecord{ID: defaultInstanceID, Name: DefaultInstanceName},
		faults:          opts.Faults,
		done:            make(chan struct{}),
		pending:         map[string]*watch{},
		instances:       map[string]instanceRecord{},
		grants:          map[string]map[string]bool{},
		creds:           map[[sha256.Size]byte]issued{},
		inflight:        map[string]chan struct{}{},
		deliveries:      newDeliveries(),
		webhookLimits:   newWebhookLimiter(),
	}
	s.webhooks = s.newWebhookClient()
	if err := errors.Join(s.loadInstances(), s.loadGrants(), s.resumeDeliveries(), s.resume(), s.startPurge()); err != nil {
		s.deliveries.stop()
		return nil, errors.Join(err, st.close(), removeAll(tempDir))
	}
	s.handler = withRequestID(s.withApprovalPage(s.routes()))
	return s, nil
}

// AdminCredential returns the bearer token of the admin API and the approval page: Options.AdminCredential,
// or the one drawn at random when that was empty.
func (s *Server) AdminCredential() string { return s.opts.AdminCredential }

// hashOf is the SHA-256 of a credential; nil for none.
func hashOf(credential string) *[sha256.Size]byte {
	if credential == "" {
		return nil
	}
	h := sha256.Sum256([]byte(credential))
	return &h
}

func dbPath(path string) (file, tempDir string, err error) {
	if path != "" {
		return path, "", nil
	}
	tempDir, err = os.MkdirTemp("", "reference-provider-")
	if err != nil {
		return "", "", fmt.Errorf("reference provider: %w", err)
	}
	return filepath.Join(tempDir, "provider.db"), tempDir, nil
}

func removeAll(dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// Handler returns the HTTP handler of the provider and admin APIs and of the approval page.
func (s *Server) Handler() http.Handler { return s.handler }

// Profile returns the wire format the provider API speaks.
func (s *Server) Profile() Profile { return s.opts.Profile }

// Faults returns the server's fault injector (Options.Faults), to change its rules at runtime; nil
// when it has none.
func (s *Server) Faults() *faults.Injector { return s.faults }

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// ResetStats zeroes the counters (the gauges Waiting and InFlight keep their values).
func (s *Server) ResetStats() { s.stats.reset() }

// Start listens on addr (e.g. "127.0.0.1:0") and serves plain HTTP in the background. It returns the base
// URL, e.g. "http://127.0.0.1:41234".
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("reference provider: %w", err)
	}
	return s.serve(ln, "http")
}

// StartTLS is Start over TLS with the given certificate. It serves HTTP/1.1 only, so that every fault can
// act on the connection, unless Options.HTTP2 is set.
func (s *Server) StartTLS(addr string, cert tls.Certificate) (string, error) {
	protos := []string{"http/1.1"}
	if s.opts.HTTP2 {
		protos = []string{"h2", "http/1.1"}
	}
	ln, err := tls.Listen("tcp", addr, &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   protos,
	})
	if err != nil {
		return "", fmt.Errorf("reference provider: %w", err)
	}
	return s.serve(ln, "https")
}

func (s *Server) serve(ln net.Listener, scheme string) (string, error) {
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	if s.httpSrv != nil {
		return "", errors.Join(errors.New("reference provider: already started"), ln.Close())
	}
	select {
	case <-s.done:
		return "", errors.Join(errors.New("reference provider: closed"), ln.Close())
	default:
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.stats.update(func(st *Stats) { st.Connections++ })
		}
	}}
	s.httpSrv = srv
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error(err, "serving stopped")
		}
	}()
	url := scheme + "://" + ln.Addr().String()
	s.log.Info("serving", "url", url)
	return url, nil
}

// Close stops serving (long polls in progress return their current request), stops the deadline timers
// and the purge, and closes the store, removing it if it was temporary. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		errs := []error{s.shutdownHTTP()}
		s.mu.Lock()
		s.closed = true
		for _, w := range s.pending {
			w.timer.Stop()
		}
		s.mu.Unlock()
		s.deliveries.stop()
		s.webhooks.CloseIdleConnections()
		errs = append(errs, s.store.close(), removeAll(s.tempDir))
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

func (s *Server) shutdownHTTP() error {
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	if s.httpSrv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.httpSrv.Shutdown(ctx); err != nil {
		return errors.Join(err, s.httpSrv.Close())
	}
	return nil
}
