package toolcall

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	toolswatch "k8s.io/client-go/tools/watch"
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
// from there to the present (client-go's RetryWatcher) and holds each removal it finds, as its own
// watch would have. The replay reaches as far back as the apiserver keeps history (etcd compaction,
// every five minutes by default): after a longer absence it logs that the removals of that time
// could not be replayed.

const (
	// goneCursorLease names the Lease that keeps the cursor, in the leader election's namespace.
	goneCursorLease = "toolgate-gone-cursor"
	// goneCursorSave is how often the leader saves a cursor that moved.
	goneCursorSave = 2 * time.Second
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
	var start uint64
	if lease != nil {
		start, _ = strconv.ParseUint(lease.Annotations[tg.AnnotationGoneCursor], 10, 64)
	}
	g.r.gone.replaying(start)
	if start != 0 {
		g.replay(ctx, start)
	}
	g.r.gone.replayDone()
	if ctx.Err() != nil {
		return nil
	}
	log.V(1).Info("removals despite the finalizer replayed", "from", start)

	last := start
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

// replay watches the ToolCalls of each namespace from start to the present and holds every removal
// despite the finalizer it sees.
func (g *goneReplay) replay(ctx context.Context, start uint64) {
	namespaces := g.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		if err := g.replayNamespace(ctx, ns, start); err != nil && ctx.Err() == nil {
			logf.FromContext(ctx).Error(err, "the removals of ToolCalls despite their finalizer since the saved position could not all be replayed: "+
				"a request submitted for such a ToolCall while no manager led may stay pending until its provider deadline", "namespace", ns, "from", start)
		}
	}
}

func (g *goneReplay) replayNamespace(ctx context.Context, ns string, start uint64) error {
	saved := strconv.FormatUint(start, 10)
	list := &tg.ToolCallList{}
	if err := g.live.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil {
		return fmt.Errorf("listing ToolCalls: %w", err)
	}
	present, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil || present <= start {
		return nil // nothing since the saved position (or no position to compare with)
	}
	rw, err := toolswatch.NewRetryWatcherWithContext(ctx, saved, watcherOf(g.live, ns))
	if err != nil {
		return err
	}
	defer rw.Stop()
	for {
		var ev apiwatch.Event
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-rw.ResultChan():
			if !ok {
				return fmt.Errorf("the watch from %s ended", saved)
			}
			ev = e
		}
		if ev.Type == apiwatch.Error {
			return apierrors.FromObject(ev.Object)
		}
		tc, ok := ev.Object.(*tg.ToolCall)
		if !ok {
			continue
		}
		if ev.Type == apiwatch.Deleted && removedDespiteFinalizer(tc) {
			g.r.gone.add(tc, g.r.Clock.Now(), &start)
			select {
			case g.replayed <- event.TypedGenericEvent[*tg.ToolCall]{Object: tc}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if v, err := strconv.ParseUint(tc.ResourceVersion, 10, 64); err == nil && v >= present {
			return nil
		}
	}
}

// watcherOf watches ToolCalls in ns through c, as RetryWatcher asks, with bookmarks, so that a quiet
// namespace still reaches the present.
func watcherOf(c client.WithWatch, ns string) watchFunc {
	return func(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error) {
		options.AllowWatchBookmarks = true
		return c.Watch(ctx, &tg.ToolCallList{}, client.InNamespace(ns), &client.ListOptions{Raw: &options})
	}
}

type watchFunc func(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error)

func (f watchFunc) WatchWithContext(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error) {
	return f(ctx, options)
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
