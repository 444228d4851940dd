package toolcall

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// A ToolCall deleted as it is accepted can be removed by the apiserver although the acceptance has
// just added the finalizer: the apiserver checks for finalizers once, when the deletion begins, and
// completes a deletion that began before the acceptance was written. Its request may already be
// submitted (in the same reconcile, or before the status that records it was written). Nobody waits
// for that call, so no human should review it, and nothing else withdraws it: the ToolCall is never
// reconciled again. goneCalls holds such ToolCalls, as last seen, until their requests are withdrawn.
type goneCalls struct {
	mu    sync.Mutex
	calls map[types.NamespacedName]goneCall
	// cursor is the watch position up to which every removal held here was withdrawn (gonereplay.go).
	cursor goneCursor
}

type goneCall struct {
	tc   *tg.ToolCall
	seen time.Time
}

// add records tc, unless a withdrawal of the same ToolCall is already held; before is the watch
// position before its removal (nil: the latest seen).
func (g *goneCalls) add(tc *tg.ToolCall, now time.Time, before *uint64) {
	g.cursor.hold(tc.UID, tc.ResourceVersion, before)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.calls = map[types.NamespacedName]goneCall{}
	}
	key := client.ObjectKeyFromObject(tc)
	if held, ok := g.calls[key]; ok && held.tc.UID == tc.UID && (held.tc.Status.RequestID != "" || tc.Status.RequestID == "") {
		return
	}
	g.calls[key] = goneCall{tc: tc, seen: now}
}

func (g *goneCalls) get(key types.NamespacedName) (goneCall, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.calls[key]
	return c, ok
}

func (g *goneCalls) done(key types.NamespacedName, uid types.UID) {
	g.cursor.release(uid)
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok && c.tc.UID == uid {
		delete(g.calls, key)
	}
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
			r.gone.cursor.observe(e.Object.GetResourceVersion())
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.gone.cursor.observe(e.ObjectNew.GetResourceVersion())
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			tc, ok := e.Object.(*tg.ToolCall)
			if !ok || !removedDespiteFinalizer(tc) {
				if e.Object != nil {
					r.gone.cursor.observe(e.Object.GetResourceVersion())
				}
				return
			}
			r.gone.add(tc, r.Clock.Now(), nil)
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc)})
		},
	}
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
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) || tc.Annotations[tg.AnnotationApprovalRule] != "" {
		return nil // not accepted, or approved by a rule: no request was submitted
	}
	_, err := r.withdrawOwn(ctx, sc)
	return err
}
