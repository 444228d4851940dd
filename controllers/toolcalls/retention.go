package toolcalls

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
)

// retire deletes a finished ToolCall once its time to live has passed (lifecycle.DeleteAt), or
// requeues it for that moment. A call decided with a Tool whose toolName no Tool carries any more
// is kept: its Tool's TTL is not known, and the manager's may be far shorter. It is reached only for a call in a terminal phase whose finalizer was
// just removed (or whose removal met a newer write, which makes the delete below conflict too): no
// request of it can be pending, so its deletion withdraws nothing at the provider (reconcileDelete
// has nothing to do for it), and its Job, owned by it, goes with it through the garbage collector. A restart cannot run the tool again: the ToolCall is gone, and a ToolCall created
// again under its name is a new call (new UID, new Job name, new approval).
//
// The delete is conditional on the ToolCall as read (UID and resourceVersion): a label added since
// (toolgate.dev/keep), or any other change, makes it fail with a conflict, and the watch event of
// that change decides again.
func (r *Reconciler) retire(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	if _, finished := lifecycle.FinishedAt(tc); !finished || lifecycle.Kept(tc) || r.awaitsReceipt(tc) {
		return ctrl.Result{}, nil
	}
	tools := &tg.ToolList{}
	if err := r.List(ctx, tools, client.InNamespace(tc.Namespace), client.MatchingFields{ToolNameField: tc.Spec.Tool}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the Tools of namespace %s from the cache: %w", tc.Namespace, err)
	}
	if !anyLiveTool(tools.Items) && foundItsTool(tc) {
		// No Tool carries its toolName any more (deleted, renamed, or removed by its MCPServer): the
		// call keeps its record rather than fall back to the manager's TTL, which may be far shorter
		// than its Tool's (0, forever). A Tool that carries the toolName again brings its TTL back
		// (toolRetentionChanged reconciles the call then). A call that never found its Tool has no
		// Tool's retention to keep: the manager's TTL applies.
		logf.FromContext(ctx).V(1).Info("a finished ToolCall whose Tool is gone is kept", "tool", tc.Spec.Tool)
		return ctrl.Result{}, nil
	}
	ttl := lifecycle.FinishedCallTTL(tools.Items, tc.Spec.Tool, r.FinishedCallTTL)
	at, ok := lifecycle.DeleteAt(tc, ttl)
	if !ok {
		return ctrl.Result{}, nil
	}
	if wait := at.Sub(r.Clock.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	// Whatever the status says, a call whose Job still runs is not deleted: that would delete the Job
	// as it runs. The manager ends a call with a Job only once the Job has finished, so this holds
	// only a status someone else wrote; the Job's end reconciles the call again.
	if running, err := r.jobRunning(ctx, tc); err != nil || running {
		return ctrl.Result{}, err
	}
	uid, rv := tc.UID, tc.ResourceVersion
	err := r.Delete(ctx, tc, client.Preconditions{UID: &uid, ResourceVersion: &rv}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Deleted by someone else, or changed since it was read: its watch event reconciles again.
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("deleting the finished ToolCall after its time to live (%s): %w", ttl, err)
	}
	r.written.forget(tc.UID)
	finishedCallsDeleted.WithLabelValues(string(tc.Status.Phase)).Inc()
	logf.FromContext(ctx).Info("deleted a finished ToolCall whose time to live had passed", "phase", tc.Status.Phase, "ttl", ttl, "expiredAt", at)
	return ctrl.Result{}, nil
}

// anyLiveTool reports whether one of tools (those carrying a call's toolName) is not being deleted.
func anyLiveTool(tools []tg.Tool) bool {
	for i := range tools {
		if tools[i].DeletionTimestamp.IsZero() {
			return true
		}
	}
	return false
}

// foundItsTool reports whether the finished call was decided with a Tool: it did not end rejected
// for want of one single Tool with its toolName.
func foundItsTool(tc *tg.ToolCall) bool {
	return tc.Status.Phase != tg.PhaseRejected ||
		(tc.Status.Reason != tg.ReasonUnknownTool && tc.Status.Reason != tg.ReasonAmbiguousTool)
}

// jobRunning reports whether the call's Job (by the name derived from its UID, not by its status)
// exists in the cache and has not finished.
func (r *Reconciler) jobRunning(ctx context.Context, tc *tg.ToolCall) (bool, error) {
	job := &batchv1.Job{}
	err := r.Get(ctx, types.NamespacedName{Namespace: tc.Namespace, Name: JobName(tc)}, job)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the Job of a finished ToolCall from the cache: %w", err)
	}
	if !jobEndOf(job).finished {
		logf.FromContext(ctx).Info("a finished ToolCall whose Job still runs is kept past its time to live", "job", job.Name)
		return true, nil
	}
	return false, nil
}

// toolRetentionChanged is the watch handler that brings the finished calls of a Tool's toolName back
// to retire when their time to live may have changed: a Tool created or deleted, its
// spec.finishedCallTTL or its toolName changed. Their requeue was set for the time to live before.
func toolRetentionChanged(c client.Reader) handler.TypedEventHandler[*tg.Tool, reconcile.Request] {
	return handler.TypedFuncs[*tg.Tool, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*tg.Tool], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueueFinished(ctx, c, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*tg.Tool], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			was, is := e.ObjectOld.Spec, e.ObjectNew.Spec
			if was.ToolName == is.ToolName && sameTTL(was.FinishedCallTTL, is.FinishedCallTTL) {
				return
			}
			enqueueFinished(ctx, c, q, e.ObjectOld)
			if was.ToolName != is.ToolName {
				enqueueFinished(ctx, c, q, e.ObjectNew)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*tg.Tool], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueueFinished(ctx, c, q, e.Object)
		},
	}
}

// sameTTL reports whether two spec.finishedCallTTL say the same: both unset, or the same duration.
func sameTTL(a, b *metav1.Duration) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Duration == b.Duration
}

// enqueueFinished adds the finished ToolCalls that name tool's toolName in its namespace.
func enqueueFinished(ctx context.Context, c client.Reader, q workqueue.TypedRateLimitingInterface[reconcile.Request], tool *tg.Tool) {
	calls := &tg.ToolCallList{}
	if err := c.List(ctx, calls, client.InNamespace(tool.Namespace), client.MatchingFields{ToolCallToolField: tool.Spec.ToolName}); err != nil {
		logf.FromContext(ctx).Error(err, "listing the finished ToolCalls of a changed Tool", "tool", tool.Name)
		return
	}
	for i := range calls.Items {
		if calls.Items[i].Status.Phase.IsTerminal() {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&calls.Items[i])})
		}
	}
}
