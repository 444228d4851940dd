// Package reference is a complete approvals provider that speaks Toolgate's provider HTTP API. It stores
// requests and idempotency keys in bbolt, decides requests through an admin API (or Go methods), and
// injects faults on demand, so that it serves both as a local provider and as the test double against
// which the client's behaviour under failures is checked.
package reference

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// DBPath is the bbolt file holding requests and idempotency keys. Empty means a temporary file that
	// Close removes.
	DBPath string
	// Credential is the bearer token every provider API call must present. Required.
	Credential string
	// AdminCredential is the bearer token of the admin API and of the approval page (/ui/). Empty means
	// Credential.
	AdminCredential string
	// Clock stamps created_at, deadlines and decisions, and fires deadline expiry. Default: the real clock.
	// Long-poll waits and fault delays are always measured in real time.
	Clock clock.WithDelayedExecution
	// MinTimeout and MaxTimeout bound a submission's timeout. Defaults: 1s and 24h.
	MinTimeout time.Duration
	MaxTimeout time.Duration
	// DefaultApprovalValidity is how long an approval stays valid when the decision does not say.
	// Default: 5m.
	DefaultApprovalValidity time.Duration
	// FaultSeed seeds the source that probabilistic fault rules draw from.
	FaultSeed uint64
	// HTTP2 offers HTTP/2 on TLS (StartTLS), as most HTTPS providers do: many long polls then share a
	// few connections. Connection faults (reset, drop after commit) then act on every stream of the
	// connection, so fault tests leave it off.
	HTTP2 bool
	// Logger receives one line per state change. The credentials are never logged. Default: discard.
	Logger logr.Logger
	// Profile is the wire format of the provider API: ProfileFull (the default) or ProfileSeed.
	Profile Profile
	// Approvers maps an approver's name to their own credential, with which they sign in to the approval
	// page and decide through the admin API (list and decide only). Every decision records who made it:
	// the approver's name, or AdminApprover for the admin credential. Optional.
	Approvers map[string]string
}

// Profile is the wire format the provider API speaks.
type Profile string

const (
	// ProfileFull is everything Toolgate's provider contract describes: responses carry
	// arguments_sha256, errors are application/problem+json with a code, replays are answered 200 with
	// Idempotent-Replayed: true, and POST /v1/requests/{id}/cancel cancels a pending request.
	ProfileFull Profile = "full"
	// ProfileSeed is exactly the seed's HTTP example and nothing more, as a provider written only from
	// it would answer: responses carry the seed's fields only (no arguments_sha256), errors are plain
	// text, a replay is answered as the creation was (201, no Idempotent-Replayed), and there is no
	// cancel endpoint (POST /v1/requests/{id}/cancel answers 404). The admin API and the approval page
	// are the same in both profiles.
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
		o.AdminCredential = o.Credential
	}
	if o.Profile == "" {
		o.Profile = ProfileFull
	}
	return o
}

// Server is the reference approvals provider. Its methods are safe for concurrent use.
type Server struct {
	opts       Options
	clock      clock.WithDelayedExecution
	log        logr.Logger
	store      *store
	tempDir    string
	credential [sha256.Size]byte
	admin      [sha256.Size]byte
	approvers  map[[sha256.Size]byte]string // credential hash -> approver name
	faults     *Faults
	stats      statsRecorder
	handler    http.Handler
	done       chan struct{} // closed by Close: long polls and delays return

	mu       sync.Mutex // serialises state changes; guards the fields below
	pending  map[string]*watch
	inflight map[string]bool
	closed   bool

	httpMu  sync.Mutex
	httpSrv *http.Server

	closeOnce sync.Once
	closeErr  error
}

// New opens (or creates) the store and returns a Server that is not yet listening: call Start or StartTLS,
// or mount Handler. Pending requests found in the store resume their deadlines.
func New(opts Options) (*Server, error) {
	if opts.Credential == "" {
		return nil, errors.New("reference provider: a credential is required")
	}
	opts = opts.withDefaults()
	if _, err := ParseProfile(string(opts.Profile)); err != nil {
		return nil, fmt.Errorf("reference provider: %w", err)
	}
	approvers, err := hashApprovers(opts)
	if err != nil {
		return nil, fmt.Errorf("reference provider: %w", err)
	}
	if opts.MinTimeout > opts.MaxTimeout {
		return nil, fmt.Errorf("reference provider: MinTimeout %v exceeds MaxTimeout %v", opts.MinTimeout, opts.MaxTimeout)
	}
	path, tempDir, err := dbPath(opts.DBPath)
	if err != nil {
		return nil, err
	}
	st, err := openStore(path, tempDir != "")
	if err != nil {
		return nil, errors.Join(err, removeAll(tempDir))
	}
	s := &Server{
		opts:       opts,
		clock:      opts.Clock,
		log:        opts.Logger,
		store:      st,
		tempDir:    tempDir,
		credential: sha256.Sum256([]byte(opts.Credential)),
		admin:      sha256.Sum256([]byte(opts.AdminCredential)),
		approvers:  approvers,
		faults:     newFaults(opts.FaultSeed),
		done:       make(chan struct{}),
		pending:    map[string]*watch{},
		inflight:   map[string]bool{},
	}
	if err := s.resume(); err != nil {
		return nil, errors.Join(err, st.close(), removeAll(tempDir))
	}
	s.handler = s.withApprovalPage(s.routes())
	return s, nil
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

// Faults returns the server's fault rules, to change at runtime.
func (s *Server) Faults() *Faults { return s.faults }

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
// and closes the store, removing it if it was temporary. It is safe to call more than once.
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
