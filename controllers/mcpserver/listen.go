package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/go-logr/logr"
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

// listeners holds the open sessions, by MCPServer. It runs as a manager Runnable on the leader: the
// sessions live as long as it leads.
type listeners struct {
	events chan event.GenericEvent // a listing to do now, read by the controller

	mu   sync.Mutex
	base context.Context // the Runnable's, while it runs
	open map[types.NamespacedName]*listener
	log  logr.Logger
}

type listener struct {
	settings string // what the session was opened with: a change opens another
	cancel   context.CancelFunc
	done     chan struct{}
}

func newListeners(log logr.Logger) *listeners {
	return &listeners{events: make(chan event.GenericEvent, 64), open: map[types.NamespacedName]*listener{}, log: log}
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
// none, the last one ended, or cfg changed.
func (l *listeners) ensure(key types.NamespacedName, cfg mcpclient.Config) {
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
		default:
			if cur.settings == settings {
				return
			}
			cur.cancel()
		}
	}
	ctx, cancel := context.WithCancel(l.base)
	ln := &listener{settings: settings, cancel: cancel, done: make(chan struct{})}
	l.open[key] = ln
	go l.listen(ctx, key, cfg, ln)
}

func (l *listeners) listen(ctx context.Context, key types.NamespacedName, cfg mcpclient.Config, ln *listener) {
	defer close(ln.done)
	changed := func() {
		select {
		case l.events <- event.GenericEvent{Object: &tg.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
		case <-ctx.Done():
		}
	}
	s, err := mcpclient.Listen(ctx, cfg, changed)
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

// stop closes the session of key, if any: the MCPServer is gone.
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
