package toolcalls

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/internal/provider"
)

// Asynchronous mode. A call whose request lives in an instance the provider delivers notifications
// for holds no long poll and no goroutine: the receiver hands a notification to the controller
// (HandOver), which reads the request then and records the notification in the same status write
// (or the receiver records it, and its watch event brings the call here). Two safety reads cover
// a notification that never comes: the give-up at the provider's deadline plus the final-state margin
// (withdrawAtLimit, whose cancellation answers with the decision if there is one), and one read every
// safetyReadInterval.
const (
	// safetyReadInterval: the provider retries a notification for 7 days, so a read covers only a
	// notification lost for good (a receiver down longer than the retries, a deleted registration)
	// or one the provider never sent. At one read an hour a waiting call costs the provider 0.017
	// requests a minute, under the 0.02 asynchronous mode is for; an approval whose notification was
	// lost is found within the hour, and most approvals expire sooner: a lost notification ends
	// such a call as the deadline read finds it, never with a run on a stale approval.
	safetyReadInterval = time.Hour
	// notifiedReread is how soon a call reads its request again after a notification found it still
	// pending (a provider that shows the decision a moment after it notified), for notifiedWindow.
	notifiedReread = 2 * time.Second
	notifiedWindow = time.Minute
)

// asyncReads remembers, per waiting call of an asynchronous provider, when the manager last read its
// request and which notification it read it for. It is memory only: after a restart a call is read
// again only for a notification recorded on it, or at its next safety read.
type asyncReads struct {
	mu   sync.Mutex
	last map[types.UID]lastRead
}

type lastRead struct {
	at           time.Time
	notification string
}

func newAsyncReads() *asyncReads { return &asyncReads{last: map[types.UID]lastRead{}} }

// due reports whether tc's request is to be read now: for a notification not read yet, or at its
// safety read. A call seen for the first time is read only for a notification.
func (a *asyncReads) due(tc *tg.ToolCall, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, seen := a.last[tc.UID]
	if !seen {
		l = lastRead{at: now}
		a.last[tc.UID] = l
	}
	if n := tc.Status.Notification; n != nil && n.ID != l.notification {
		return true
	}
	return !now.Before(l.at.Add(safetyReadInterval))
}

// read records a read of tc's request at now.
func (a *asyncReads) read(tc *tg.ToolCall, now time.Time) {
	l := lastRead{at: now}
	if n := tc.Status.Notification; n != nil {
		l.notification = n.ID
	}
	a.mu.Lock()
	a.last[tc.UID] = l
	a.mu.Unlock()
}

// retry makes tc's request due for a read at its next reconcile.
func (a *asyncReads) retry(uid types.UID) {
	a.mu.Lock()
	a.last[uid] = lastRead{}
	a.mu.Unlock()
}

// next is when tc's next safety read is due.
func (a *asyncReads) next(tc *tg.ToolCall) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last[tc.UID].at.Add(safetyReadInterval)
}

// forget drops tc's record once it no longer waits.
func (a *asyncReads) forget(uid types.UID) {
	a.mu.Lock()
	delete(a.last, uid)
	a.mu.Unlock()
}

// notifiedBuffer is how many woken calls wait for the work queue before wake drops one; a dropped
// wake costs only time, as the receiver then records the notification itself, and the watch of
// that record queues the call.
const notifiedBuffer = 1024

// wake queues tc, a call whose notification the receiver is recording, to read its request now,
// without waiting for the watch to show the record. The event carries tc's key alone.
func (r *Reconciler) wake(tc *tg.ToolCall) {
	r.asyncReads.retry(tc.UID)
	key := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: tc.Name, UID: tc.UID}}
	select {
	case r.notified <- event.TypedGenericEvent[*tg.ToolCall]{Object: key}:
	default:
	}
}

// HandOver gives notification n of tc to the read it wakes, to be written in that reconcile's status
// write. written is closed once that write landed; release withdraws n when the receiver stops
// waiting. On a replica that is not the leader no reconcile runs here: written is nil, and the
// receiver writes the notification itself (whose watch event reaches the leader).
func (r *Reconciler) HandOver(tc *tg.ToolCall, n tg.Notification) (written <-chan struct{}, release func()) {
	select {
	case <-r.Elected:
	default:
		r.wake(tc)
		return nil, func() {}
	}
	h := r.handed.add(tc.UID, n)
	r.wake(tc)
	return h.done, func() { r.handed.remove(tc.UID, h) }
}

// handedNotes are the notifications the receiver handed to the reads they woke, by ToolCall.
type handedNotes struct {
	mu sync.Mutex
	by map[types.UID]*handedNote
}

type handedNote struct {
	n    tg.Notification
	once sync.Once
	done chan struct{}
}

func newHandedNotes() *handedNotes { return &handedNotes{by: map[types.UID]*handedNote{}} }

// add hands over n for the call uid; a notification with the same id already handed over is shared
// (a provider's duplicate delivery in flight).
func (hn *handedNotes) add(uid types.UID, n tg.Notification) *handedNote {
	hn.mu.Lock()
	defer hn.mu.Unlock()
	if h, ok := hn.by[uid]; ok && h.n.ID == n.ID {
		return h
	}
	h := &handedNote{n: n, done: make(chan struct{})}
	hn.by[uid] = h
	return h
}

// remove withdraws h, unless another notification replaced it.
func (hn *handedNotes) remove(uid types.UID, h *handedNote) {
	hn.mu.Lock()
	defer hn.mu.Unlock()
	if hn.by[uid] == h {
		delete(hn.by, uid)
	}
}

// take puts the notification handed over for tc, if any, into its status, for this reconcile's status
// write to write; landed is to be called once that write landed (or was not needed, the status
// showing it already).
func (hn *handedNotes) take(tc *tg.ToolCall) (landed func()) {
	hn.mu.Lock()
	h, ok := hn.by[tc.UID]
	hn.mu.Unlock()
	if !ok {
		return func() {}
	}
	if cur := tc.Status.Notification; cur == nil || cur.ID != h.n.ID {
		n := h.n
		tc.Status.Notification = &n
	}
	return func() {
		hn.remove(tc.UID, h)
		h.once.Do(func() { close(h.done) })
	}
}

// awaitNotification keeps an asynchronous call waiting until a notification or a safety read finds
// its request decided, then applies the decision as a long poll's would be.
func (r *Reconciler) awaitNotification(ctx context.Context, sc *scope, ref provider.Ref, until time.Time) (ctrl.Result, error) {
	tc := sc.tc
	now := r.Clock.Now()
	if r.asyncReads.due(tc, now) {
		req, err := r.providerOf(sc).Wait(ctx, ref, 0)
		switch {
		case err != nil && (provider.CodeOf(err) == provider.CodeNotFound || provider.IsUntrusted(err)):
			return r.failClosed(ctx, sc, err)
		case err != nil:
			// Read again at the next reconcile: a notification is not lost to a failed read.
			r.asyncReads.retry(tc.UID)
			return ctrl.Result{}, err
		case provider.IsTerminal(req.Status):
			r.asyncReads.forget(tc.UID)
			return r.applyDecision(ctx, sc, req)
		}
		recordRequest(tc, req)
		if n := tc.Status.Notification; n != nil && now.Sub(n.ReceivedAt.Time) < notifiedWindow {
			// Notified, yet still pending: a provider may show the decision a moment after it
			// notified.
			r.asyncReads.retry(tc.UID)
			return ctrl.Result{RequeueAfter: notifiedReread}, nil
		}
		r.asyncReads.read(tc, now)
	}
	wake := r.asyncReads.next(tc)
	if until.Before(wake) {
		wake = until
	}
	return ctrl.Result{RequeueAfter: max(wake.Sub(now), time.Second)}, nil
}

// deliveryChanged lets through a provider object whose active delivery registration changed: its
// waiting calls switch between long polls and notifications.
func deliveryChanged() predicate.Funcs {
	active := func(o client.Object) string {
		d := o.(tg.GenericProvider).GetStatus().Delivery
		if d == nil || d.Active == nil {
			return ""
		}
		return d.Active.RegistrationID + "/" + d.Active.InstanceID
	}
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return active(e.ObjectOld) != active(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// waitingCallsOf maps a provider object to its calls that have not ended.
func waitingCallsOf(c client.Reader, kind string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		k := providercache.Key{Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName()}
		calls := &tg.ToolCallList{}
		if err := c.List(ctx, calls, client.MatchingFields{providercache.ToolCallsField: providercache.Index(k)}); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, tc := range calls.Items {
			if tc.Status.Phase == tg.PhaseAwaitingApproval {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&tc)})
			}
		}
		return out
	}
}
