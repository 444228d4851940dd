package toolcalls

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Removals despite the finalizer, across restarts. goneCalls holds a ToolCall the apiserver removed
// despite its finalizer until its request is withdrawn, in memory: a manager killed before the
// withdrawal would forget it, and no ToolCall is left to remind the next one. So the position in the
// ToolCall watch up to which every such removal has been withdrawn (goneCalls.position) is kept in a Lease,
// goneCursorLease, beside the leader election's; the leader that starts replays the ToolCall watch
// from there to the present, read once its own watch of removals has synced (removalsWatch), and
// holds each removal it finds, as its own watch would have. The replay reaches as far back as the
// apiserver keeps watch history: a position older than that is replayed from the oldest one it
// serves, and the loss logged. A position past the present was not written by a manager (anyone who
// may update Leases in the namespace can write one): it is not trusted, and the replay starts as far
// back as it can.

const (
	// goneCursorLease names the Lease that keeps the cursor, in the leader election's namespace.
	goneCursorLease = "toolgate-gone-cursor"
	// goneCursorSave is how often the leader saves a cursor that moved.
	goneCursorSave = 2 * time.Second
	// replayWatchTimeout bounds each watch of the replay (watcherOf).
	replayWatchTimeout = 5 * time.Second
)

// goneReplay is the leader's Runnable that replays the removals since the saved position and then
// keeps saving the position.
type goneReplay struct {
	r          *Reconciler
	live       client.WithWatch // the apiserver, for the Lease, the list and the watch
	namespace  string           // of the Lease
	namespaces []string         // whose ToolCalls are replayed; all when empty
	replayed   chan<- event.TypedGenericEvent[*tg.ToolCall]
}

// NeedLeaderElection: only the leader withdraws, so only the leader replays and saves.
func (g *goneReplay) NeedLeaderElection() bool { return true }

func (g *goneReplay) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("gone-replay")
	lease, err := g.read(ctx)
	if err != nil {
		return nil // the manager is stopping
	}
	var saved uint64
	if lease != nil {
		saved, _ = strconv.ParseUint(lease.Annotations[tg.AnnotationGoneCursor], 10, 64)
	}
	// The present is read once holdGone sees every removal from there on (removalsWatch, gone.go).
	select {
	case <-ctx.Done():
		return nil
	case <-g.r.gone.watchingNow():
	}
	present, err := g.present(ctx)
	if err != nil {
		return nil // the manager is stopping
	}
	from, floor := saved, saved
	switch {
	case present == 0:
		from = 0 // resourceVersions are not numbers here: no position to compare with
	case saved > present:
		// Not a position this apiserver has reached: written by someone else. Trusting it would
		// skip the replay, and every later one until the present passed it.
		g.untrusted(ctx, lease, saved, present)
		from, floor = 1, 0 // as far back as the apiserver serves (replayNamespace)
	}
	g.r.gone.replaying(floor)
	if from != 0 && from < present && g.replay(ctx, from, present) {
		// Every removal up to the present is held or withdrawn: the position never goes back before it.
		g.r.gone.replaying(present)
	}
	g.r.gone.replayDone()
	if ctx.Err() != nil {
		return nil
	}
	log.V(1).Info("removals despite the finalizer replayed", "from", from, "to", present)

	last := saved
	ticker := time.NewTicker(goneCursorSave)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		pos, ok := g.r.gone.position()
		if !ok || pos == last {
			continue
		}
		if err := g.save(ctx, &lease, strconv.FormatUint(pos, 10)); err != nil {
			log.Error(err, "saving the position of withdrawn removals", "lease", goneCursorLease)
			continue
		}
		last = pos
	}
}

// present reads the apiserver's current position in the ToolCall watch from a fresh list (of the
// first namespace served), retrying what fails; it fails only when ctx ends.
func (g *goneReplay) present(ctx context.Context) (uint64, error) {
	ns := metav1.NamespaceAll
	if len(g.namespaces) > 0 {
		ns = g.namespaces[0]
	}
	for {
		list := &tg.ToolCallList{}
		err := g.live.List(ctx, list, client.InNamespace(ns), client.Limit(1))
		if err == nil {
			v, perr := strconv.ParseUint(list.ResourceVersion, 10, 64)
			if perr != nil {
				return 0, nil // resourceVersions are not numbers here: no position to compare with
			}
			return v, nil
		}
		logf.FromContext(ctx).Error(err, "listing ToolCalls for the present position of their watch; retrying")
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(goneCursorSave):
		}
	}
}

// untrusted reports a saved position past the present: logged, counted, and an event on the Lease.
func (g *goneReplay) untrusted(ctx context.Context, lease *coordinationv1.Lease, saved, present uint64) {
	logf.FromContext(ctx).Error(nil, "the saved position of withdrawn removals is past the present: not written by a manager of this cluster, it is not trusted; "+
		"the removals are replayed from as far back as the apiserver keeps watch history",
		"lease", client.ObjectKeyFromObject(lease), "annotation", tg.AnnotationGoneCursor, "saved", saved, "present", present)
	goneCursorUntrusted.Inc()
	if g.r.Recorder != nil {
		g.r.Recorder.Eventf(lease, nil, corev1.EventTypeWarning, tg.ReasonGoneCursorAhead, "Replay",
			"The annotation %s (%d) is past the apiserver's present position (%d): someone who may update Leases here wrote it. It is not trusted: the removals of ToolCalls despite their finalizer are replayed from as far back as the apiserver keeps watch history.",
			tg.AnnotationGoneCursor, saved, present)
	}
}

// read reads the Lease (nil if there is none), retrying what fails, since the position cannot be
// saved before the removals since the last one are replayed; it fails only when ctx ends.
func (g *goneReplay) read(ctx context.Context) (*coordinationv1.Lease, error) {
	key := types.NamespacedName{Namespace: g.namespace, Name: goneCursorLease}
	for {
		lease := &coordinationv1.Lease{}
		err := g.live.Get(ctx, key, lease)
		switch {
		case err == nil:
			return lease, nil
		case apierrors.IsNotFound(err):
			return nil, nil
		}
		logf.FromContext(ctx).Error(err, "reading the saved position of withdrawn removals; retrying", "lease", key)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(goneCursorSave):
		}
	}
}

// save writes pos into the Lease, creating it if need be.
func (g *goneReplay) save(ctx context.Context, lease **coordinationv1.Lease, pos string) error {
	if *lease == nil {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: goneCursorLease,
			Annotations: map[string]string{tg.AnnotationGoneCursor: pos}}}
		if err := g.live.Create(ctx, l); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return g.live.Get(ctx, client.ObjectKeyFromObject(l), l) // saved at the next tick
			}
			return err
		}
		*lease = l
		return nil
	}
	l := (*lease).DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[tg.AnnotationGoneCursor] = pos
	if err := g.live.Update(ctx, l); err != nil {
		if apierrors.IsConflict(err) {
			_ = g.live.Get(ctx, client.ObjectKeyFromObject(l), *lease)
		}
		return err
	}
	*lease = l
	return nil
}

// replay watches the ToolCalls of each namespace from start to present and holds every removal
// despite the finalizer it sees; it reports whether every namespace was replayed.
func (g *goneReplay) replay(ctx context.Context, start, present uint64) bool {
	namespaces := g.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	all := true
	for _, ns := range namespaces {
		if err := g.replayNamespace(ctx, ns, start, present); err != nil {
			all = false
			if ctx.Err() == nil {
				logf.FromContext(ctx).Error(err, "the removals of ToolCalls despite their finalizer since the saved position could not all be replayed: "+
					"a request submitted for such a ToolCall while no manager led may stay pending until its provider deadline", "namespace", ns, "from", start)
			}
		}
	}
	return all
}

// replayNamespace watches the ToolCalls of ns from `from` to present. The watch is the apiserver's
// own (not client-go's RetryWatcher, which keeps bookmarks to itself): a bookmark past present ends
// a namespace with no ToolCall event since. A position older than the apiserver's watch history
// (410 Gone, "too old resource version: N (oldest)") is replayed from the oldest it serves, once;
// what came before is lost, and logged.
func (g *goneReplay) replayNamespace(ctx context.Context, ns string, from, present uint64) error {
	pos, moved := from, false
	for {
		next, done := pos, false
		w, err := watcherOf(g.live, ns)(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatUint(pos, 10)})
		if err == nil {
			next, done, err = g.replayWatch(ctx, w, pos, present)
			w.Stop()
		}
		switch oldest, expired := oldestServed(err); {
		case done:
			return nil
		case expired && !moved && oldest > pos:
			logf.FromContext(ctx).Error(nil, "the apiserver no longer keeps the watch history since the saved position: the removals of ToolCalls despite their finalizer before the oldest position it serves are not replayed, "+
				"and a request submitted for such a ToolCall while no manager led may stay pending until its provider deadline", "namespace", ns, "from", pos, "oldest", oldest)
			pos, moved = oldest, true
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && (expired || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)):
			return fmt.Errorf("watching ToolCalls from %d: %w", pos, err)
		case err != nil || next == pos:
			// Failed, or closed with nothing delivered: wait before watching again.
			if err != nil {
				logf.FromContext(ctx).Error(err, "replaying the removals of ToolCalls despite their finalizer; retrying", "namespace", ns, "from", pos)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(goneCursorSave):
			}
		}
		pos = next
	}
}

// replayWatch reads w until it passes present (done), fails, or ends; it returns the position reached.
func (g *goneReplay) replayWatch(ctx context.Context, w apiwatch.Interface, pos, present uint64) (uint64, bool, error) {
	for {
		var ev apiwatch.Event
		select {
		case <-ctx.Done():
			return pos, false, ctx.Err()
		case e, ok := <-w.ResultChan():
			if !ok {
				return pos, false, nil
			}
			ev = e
		}
		if ev.Type == apiwatch.Error {
			return pos, false, apierrors.FromObject(ev.Object)
		}
		tc, ok := ev.Object.(*tg.ToolCall)
		if !ok {
			continue
		}
		if ev.Type == apiwatch.Deleted && removedDespiteFinalizer(tc) {
			g.r.gone.add(tc, g.r.Clock.Now(), &pos)
			select {
			case g.replayed <- event.TypedGenericEvent[*tg.ToolCall]{Object: tc}:
			case <-ctx.Done():
				return pos, false, ctx.Err()
			}
		}
		if v, err := strconv.ParseUint(tc.ResourceVersion, 10, 64); err == nil {
			pos = max(pos, v)
			if v >= present {
				return pos, true, nil
			}
		}
	}
}

// oldestServed reads the oldest position the apiserver's watch cache serves from its answer to a
// watch from an older one (410 Gone: "too old resource version: N (oldest)").
func oldestServed(err error) (uint64, bool) {
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		return 0, false
	}
	var asked, oldest uint64
	msg := err.Error()
	if i := strings.Index(msg, "too old resource version:"); i >= 0 {
		if n, _ := fmt.Sscanf(msg[i:], "too old resource version: %d (%d)", &asked, &oldest); n == 2 {
			return oldest, true
		}
	}
	return 0, true
}

// watcherOf watches ToolCalls in ns through c for replayWatch, with bookmarks: the apiserver sends
// one two seconds before a watch's timeout, so that a namespace with no ToolCall event since present
// still reaches it within replayWatchTimeout; the replay then watches again from where it got to.
func watcherOf(c client.WithWatch, ns string) func(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error) {
	return func(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error) {
		options.AllowWatchBookmarks = true
		timeout := int64(replayWatchTimeout / time.Second)
		options.TimeoutSeconds = &timeout
		return c.Watch(ctx, &tg.ToolCallList{}, client.InNamespace(ns), &client.ListOptions{Raw: &options})
	}
}

// addGoneReplay adds the leader's replay of removals despite the finalizer to mgr; it sends what it
// finds on replayed.
func (r *Reconciler) addGoneReplay(mgr ctrl.Manager, replayed chan<- event.TypedGenericEvent[*tg.ToolCall]) error {
	live, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("a client for the replay of removed ToolCalls: %w", err)
	}
	return mgr.Add(&goneReplay{r: r, live: live, namespace: r.GoneNamespace, namespaces: r.Namespaces, replayed: replayed})
}
