package mcpservers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// Following a server: between the periodic listings (spec.refreshInterval), the leader keeps one
// session open with each MCPServer it listed, to hear notifications/tools/list_changed, and lists
// the tools again as soon as the server sends it. A session that ends (the server restarted, the
// network broke) is opened again at the next listing; the periodic listing covers the gap.
//
// However often a server sends the notification, it costs at most one listing per
// Options.ListingInterval: notifications that arrive while a listing waits for its turn are one
// (coalesced), and a message by itself reads no Secret and writes no Tool. The session closes when the
// MCPServer goes, and when its settings no longer hold (a Secret that stopped consenting, say): the
// listing that reads them stops it.

// listeners holds the open sessions, by MCPServer. It runs as a manager Runnable on the leader: the
// sessions live as long as it leads.
type listeners struct {
	events chan event.GenericEvent // a listing to do now, read by the controller

	mu   sync.Mutex
	base context.Context // the Runnable's, while it runs
	open map[types.NamespacedName]*listener
	log  logr.Logger
	opts Options
}

type listener struct {
	settings   string // what the session was opened with: a change opens another
	generation int64  // the MCPServer's, when it was opened
	cancel     context.CancelFunc
	done       chan struct{}
	over       atomic.Pointer[mcpclient.LimitError] // the limit the server went over, which ended it
}

func newListeners(log logr.Logger, opts Options) *listeners {
	return &listeners{events: make(chan event.GenericEvent, 64), open: map[types.NamespacedName]*listener{}, log: log, opts: opts.WithDefaults()}
}

// Start makes the listeners usable until ctx ends, then closes every session.
func (l *listeners) Start(ctx context.Context) error {
	l.mu.Lock()
	l.base = ctx
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, ln := range l.open {
		ln.cancel()
		delete(l.open, key)
	}
	l.base = nil
	return nil
}

// NeedLeaderElection: only the leader lists tools, so only it listens.
func (l *listeners) NeedLeaderElection() bool { return true }

// ensure keeps a session open with the server of key, as cfg reaches it: it opens one when there is
// none, the last one ended, or cfg changed; but not again, for the same settings and generation,
// after a session the server ended by going over a limit (it would only go over it again).
func (l *listeners) ensure(key types.NamespacedName, cfg mcpclient.Config, generation int64) {
	if l == nil {
		return
	}
	settings := fingerprint(cfg)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.base == nil {
		return
	}
	if cur := l.open[key]; cur != nil {
		select {
		case <-cur.done:
			if cur.over.Load() != nil && cur.settings == settings && cur.generation == generation {
				return
			}
		default:
			if cur.settings == settings {
				return
			}
			cur.cancel()
		}
	}
	ctx, cancel := context.WithCancel(l.base)
	ln := &listener{settings: settings, generation: generation, cancel: cancel, done: make(chan struct{})}
	l.open[key] = ln
	go l.listen(ctx, key, cfg, ln)
}

func (l *listeners) listen(ctx context.Context, key types.NamespacedName, cfg mcpclient.Config, ln *listener) {
	defer close(ln.done)
	pending := make(chan struct{}, 1)
	changed := func() {
		select {
		case pending <- struct{}{}:
		default: // a listing is already due: this notification is part of it
		}
	}
	go l.pace(ctx, key, pending)
	overLimit := func(e *mcpclient.LimitError) {
		ln.over.Store(e)
		changed() // the listing that follows reports it
	}
	s, err := mcpclient.Listen(ctx, cfg, changed, overLimit)
	if err != nil {
		l.log.V(1).Info("following the server's tools failed; the periodic listing goes on", "mcpserver", key, "error", err.Error())
		return
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Close()
		case <-stopped:
		}
	}()
	_ = s.Wait()
	close(stopped)
}

// pace asks for a listing of key for each notification pending, at most one per ListingInterval
// (the first at once), until ctx ends.
func (l *listeners) pace(ctx context.Context, key types.NamespacedName, pending <-chan struct{}) {
	clk := l.opts.Clock
	limiter := rate.NewLimiter(rate.Every(l.opts.ListingInterval), 1)
	for {
		select {
		case <-pending:
		case <-ctx.Done():
			return
		}
		if d := limiter.ReserveN(clk.Now(), 1).DelayFrom(clk.Now()); d > 0 {
			t := clk.NewTimer(d)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		select {
		case l.events <- event.GenericEvent{Object: &tg.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
		case <-ctx.Done():
			return
		}
	}
}

// overLimit is the limit the server of key went over on the session that followed it, nil when none
// did.
func (l *listeners) overLimit(key types.NamespacedName) *mcpclient.LimitError {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.open[key]; cur != nil {
		return cur.over.Load()
	}
	return nil
}

// stop closes the session of key, if any: the MCPServer is gone, or its settings no longer hold.
func (l *listeners) stop(key types.NamespacedName) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.open[key]; cur != nil {
		cur.cancel()
		delete(l.open, key)
	}
}

// fingerprint is what a session depends on: the URL, headers, CA and transport settings.
func fingerprint(cfg mcpclient.Config) string {
	b, _ := json.Marshal(cfg)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
