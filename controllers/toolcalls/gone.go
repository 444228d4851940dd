package toolcalls

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// A ToolCall deleted as it is accepted can be removed by the apiserver although the acceptance has
// just added the finalizer: the apiserver checks for finalizers once, when the deletion begins, and
// completes a deletion that began before the acceptance was written. Its request may already be
// submitted (in the same reconcile, or before the status that records it was written). Nobody waits
// for that call, so no human should review it, and nothing else withdraws it: the ToolCall is never
// reconciled again. goneCalls holds such ToolCalls, as last seen, until their requests are withdrawn,
// and the position in the ToolCall watch up to which every removal was withdrawn (gonereplay.go),
// which follows from what it holds.
type goneCalls struct {
	mu    sync.Mutex
	calls map[types.NamespacedName]goneCall
	// seen is the latest resourceVersion of a ToolCall event holdGone handled.
	seen uint64
	// start is the position saved when this leader started, kept until the replay from it is done
	// (replayed).
	start    uint64
	replayed bool
	// opaque: resourceVersions are not numbers here, and no position is kept.
	opaque bool
	// watching is closed once holdGone's watch has synced (removalsWatch): from then on, every removal
	// the informer sees reaches holdGone, and the replay may take the present as its end.
	watchingOnce sync.Once
	watching     chan struct{}
}

// watchingNow returns the channel closed once holdGone's watch has synced.
func (g *goneCalls) watchingNow() chan struct{} {
	g.watchingOnce.Do(func() { g.watching = make(chan struct{}) })
	return g.watching
}

type goneCall struct {
	tc   *tg.ToolCall
	seen time.Time
	// before is the watch position before its removal.
	before uint64
}

// add records tc, unless a withdrawal of the same ToolCall is already held; before is the watch
// position before its removal (nil: the latest seen).
func (g *goneCalls) add(tc *tg.ToolCall, now time.Time, before *uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.calls = map[types.NamespacedName]goneCall{}
	}
	b := g.seen
	if before != nil {
		b = *before
	}
	g.observeLocked(tc.ResourceVersion)
	key := client.ObjectKeyFromObject(tc)
	held, ok := g.calls[key]
	if ok && held.tc.UID == tc.UID {
		if held.tc.Status.RequestID != "" || tc.Status.RequestID == "" {
			return
		}
		b = held.before // the same removal, seen again with its request id
	}
	g.calls[key] = goneCall{tc: tc, seen: now, before: b}
}

func (g *goneCalls) get(key types.NamespacedName) (goneCall, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.calls[key]
	return c, ok
}

func (g *goneCalls) done(key types.NamespacedName, uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok && c.tc.UID == uid {
		delete(g.calls, key)
	}
}

// observe moves the position to rv, the resourceVersion of a ToolCall event, if it is later.
func (g *goneCalls) observe(rv string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observeLocked(rv)
}

func (g *goneCalls) observeLocked(rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		g.opaque = true
		return
	}
	g.seen = max(g.seen, v)
}

// position returns the watch position to save: the latest seen (never before the position this
// leader started from, up to which every removal was withdrawn or is held), held back to just before
// the oldest removal held; ok is false while there is none to save.
func (g *goneCalls) position() (pos uint64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.opaque:
		return 0, false
	case !g.replayed:
		return g.start, g.start != 0
	}
	pos = max(g.seen, g.start)
	for _, c := range g.calls {
		pos = min(pos, c.before)
	}
	return pos, pos != 0
}

// replaying records the saved position the replay starts from; replayDone, that it has ended.
func (g *goneCalls) replaying(start uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.start = start
}

func (g *goneCalls) replayDone() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.replayed = true
}

// removedDespiteFinalizer reports whether a ToolCall the watch saw deleted still carried the
// finalizer: only the apiserver's check-once can remove such a ToolCall, since Toolgate removes the
// finalizer itself before a deletion it handled completes.
func removedDespiteFinalizer(tc *tg.ToolCall) bool {
	return controllerutil.ContainsFinalizer(tc, tg.Finalizer)
}

// holdGone is the watch handler that holds every ToolCall removed despite the finalizer for
// withdrawGone, and enqueues it (after holding it: the For watch's own enqueue may come first). It
// follows the watch's position for the saved cursor (gonereplay.go).
func (r *Reconciler) holdGone() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.gone.observe(e.Object.GetResourceVersion())
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.gone.observe(e.ObjectNew.GetResourceVersion())
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			tc, ok := e.Object.(*tg.ToolCall)
			if !ok || !removedDespiteFinalizer(tc) {
				if e.Object != nil {
					r.gone.observe(e.Object.GetResourceVersion())
				}
				return
			}
			r.gone.add(tc, r.Clock.Now(), nil)
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc)})
		},
	}
}

// removalsWatch is the controller's watch of ToolCalls for holdGone. It tells the replay when it has
// synced: the informer behind it is the cache's, started with the manager, so it may have run (and
// seen removals) long before this replica was elected and holdGone was added to it. Such removals
// reach holdGone neither as they happened nor later (a handler added to a running informer is
// given only the objects it holds), so the replay must reach past them: it takes the present
// once holdGone is added and synced (goneReplay.Start), never before.
func (r *Reconciler) removalsWatch(c cache.Cache) source.Source {
	return &syncedSignal{SyncingSource: source.Kind[client.Object](c, &tg.ToolCall{}, r.holdGone()), synced: r.gone.watchingNow()}
}

// syncedSignal closes synced once its source has synced.
type syncedSignal struct {
	source.SyncingSource
	once   sync.Once
	synced chan struct{}
}

func (s *syncedSignal) WaitForSync(ctx context.Context) error {
	if err := s.SyncingSource.WaitForSync(ctx); err != nil {
		return err
	}
	s.once.Do(func() { close(s.synced) })
	return nil
}

// withdrawGone withdraws the request of the gone ToolCall held under key, if any. It returns an
// error, so that the key is retried with backoff, while the provider cannot be reached and
// CancelGiveUp has not passed since the ToolCall was seen gone.
func (r *Reconciler) withdrawGone(ctx context.Context, key types.NamespacedName) error {
	c, ok := r.gone.get(key)
	if !ok {
		return nil
	}
	sc := newScope(c.tc)
	// The request is found again by its own body, which carries the preview the manager recorded.
	if err := r.checkPreview(ctx, sc); err != nil {
		return err
	}
	err := r.withdrawGoneCall(ctx, sc)
	if err == nil {
		r.gone.done(key, c.tc.UID)
		return nil
	}
	if r.Clock.Now().Before(c.seen.Add(r.CancelGiveUp)) {
		return fmt.Errorf("withdrawing the approval request of ToolCall %s, removed despite its finalizer: %w", key, err)
	}
	r.gone.done(key, c.tc.UID)
	logf.FromContext(ctx).Info("gave up withdrawing the approval request of a ToolCall removed despite its finalizer; it ends at its provider deadline", "uid", c.tc.UID, "code", provider.CodeOf(err))
	return nil
}

// withdrawGoneCall cancels the request a ToolCall that is gone may have left at the provider: the one
// a reconcile has just submitted, or was waiting on.
func (r *Reconciler) withdrawGoneCall(ctx context.Context, sc *scope) error {
	tc := sc.tc
	r.stopWaiting(tc.UID)
	r.written.forget(tc.UID)
	if phase := tc.Status.Phase.OrPending(); phase != tg.PhasePending && phase != tg.PhaseAwaitingApproval {
		return nil
	}
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) || sc.rec().RuleApproved {
		return nil // not accepted, or approved by a rule: no request was submitted
	}
	_, err := r.withdrawOwn(ctx, sc)
	return err
}
