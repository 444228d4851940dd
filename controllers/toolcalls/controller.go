// Package toolcalls is the ToolCall controller: it puts a human approval (or the Tool's rule) in front
// of every ToolCall and runs the Tool's Job only for a valid approval. Reconcile and its phase table
// are in controller.go; each step has a file of its own.
package toolcalls

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/mergepatch"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/toolcache"
	"toolgate.dev/toolgate/controllers/toolcalls/waiter"
)

// Reconciler drives a ToolCall through approval to its Job.
type Reconciler struct {
	client.Client
	// APIReader reads around the cache where a stale read could run a tool twice or mislabel it.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// CallTimeout bounds each provider call a reconcile makes.
	CallTimeout time.Duration
	// Providers is the registry of provider clients the manager shares.
	Providers *providercache.Registry
	Waiter    *waiter.Waiter
	// Tools is what the controllers derive from each Tool generation, shared with the Tool controller.
	Tools *toolcache.Cache
	// Elected is closed once this replica leads, and its reconciles run.
	Elected <-chan struct{}
	// GoneNamespace holds the Lease with the position of withdrawn removals (gonereplay.go);
	// Namespaces are those whose ToolCalls the manager serves (all when empty).
	GoneNamespace string
	Namespaces    []string
	// Clock is read for every expiry and limit decision.
	Clock  clock.PassiveClock
	Timing lifecycle.Timing
	// CancelGiveUp bounds how long deletion keeps trying to cancel an unreachable provider's request.
	CancelGiveUp time.Duration
	// FinishedCallTTL is how long a finished ToolCall is kept when its Tool sets no
	// spec.finishedCallTTL (0: forever); retention.go.
	FinishedCallTTL time.Duration
	// MaxConcurrentReconciles is the number of workers.
	MaxConcurrentReconciles int
	// ExecutionKey signs the Jobs the manager creates and tells them from Jobs others created
	// (execproof.go).
	ExecutionKey *ExecutionKey
	// Receipts signs the receipt of every call that ends (receipts.go); nil signs none. Its writes
	// run beside the reconciles (receiptQueue).
	Receipts     *Receipts
	receiptQueue *receiptQueue

	// asyncReads paces the reads of calls that wait for a notification (asyncwait.go).
	asyncReads *asyncReads
	// notified carries the calls whose notification the receiver is recording (wake), and handed the
	// notifications it leaves to their reads to record (HandOver).
	notified chan event.TypedGenericEvent[*tg.ToolCall]
	handed   *handedNotes
	written  writeLog
	gone     goneCalls
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls/finalizers,verbs=update
// +kubebuilder:rbac:groups=toolgate.dev,resources=tools,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile: get, handle deletion, then one small step per saved phase, one status patch at the end.
// A finished call is only retired (retention.go): deleted once its time to live has passed.
// Each step takes the reconcile's scope (scope.go) and records one row of the outcome table
// (controllers/internal/lifecycle/outcometable.go). A step that returns an error leaves the saved phase,
// and the reconcile is retried with backoff. Before any step, a ToolCall the apiserver removed despite its
// finalizer has its request withdrawn (withdrawGone, gone.go; after a restart, gonereplay.go), and a
// ToolCall whose cached copy is older than this manager's last write waits for the watch
// (writelog.go).
//
//	saved phase       step (file)                                    next phases
//	"", Pending,      previewNotVerified (preview.go) when            ApprovalUnavailable (its Job exists:
//	AwaitingApproval  status.preview is not the manager's record      Running)
//	"", Pending       submit (approval.go):
//	                  - accept a new call, or checkAcceptance of an   Rejected (an accepted call whose Job
//	                    accepted one (acceptance.go)                  exists: Running)
//	                  - a Tool with a preview: runPreview, then its   Pending (PreviewRunning), Rejected
//	                    rules with the preview (preview.go)           (PreviewFailed)
//	                  - an Approve rule: approveByPolicy (policy.go)  Pending (PolicyApproved), then startJob
//	                  - awaitProvider while the accepted provider     Pending (ProviderNotReady),
//	                    is missing or not Ready (approval.go)         ApprovalUnavailable (WaitingLimitReached)
//	                  - POST the request, submitFailed on an error    Pending (SubmitFailed), Rejected,
//	                                                                  ApprovalUnavailable
//	                  - a decision in the POST response               as applyDecision
//	                  - pending                                       AwaitingApproval, then awaitDecision
//	AwaitingApproval  awaitDecision (approval.go):
//	                  - applyDecision of what the waiter saw          Denied, Cancelled, ApprovalUnavailable;
//	                    (controllers/toolcalls/waiter), or, in asynchronous mode,  approved: startJob (an approval read
//	                    of what a notification or a safety read       by request id first confirmOwnRequest)
//	                    found (awaitNotification, asyncwait.go)
//	                  - failClosed on a lost or untrusted request     ApprovalUnavailable
//	                  - withdrawAtLimit at the poll limit             ApprovalUnavailable (its Job exists:
//	                                                                  Running); a decision that raced the
//	                                                                  withdrawal: as applyDecision
//	                  - withdrawForToolChange (toolversion.go)        Cancelled (its Job exists: Running); a
//	                                                                  decision that raced it: as applyDecision
//	                  - otherwise keep waiting                        AwaitingApproval
//	(approved)        startJob (job.go): lifecycle.RunGate, then      Running; Failed, Expired,
//	                  create the Job                                  ApprovalUnavailable (its Job exists:
//	                                                                  Running)
//	Running           observeJob (job.go), observePods (jobpods.go)   Running (ImageUnavailable, back to
//	                                                                  JobCreated), Succeeded, Failed
//	terminal          queueReceipt (receiptqueue.go), removeFinalizer - (once its time to live has
//	                  (deletion.go), then retire (retention.go)       passed: the ToolCall is deleted)
//	(deleted)         reconcileDelete (deletion.go)                   the ToolCall is gone
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.withdrawGone(ctx, req.NamespacedName); err != nil {
		return ctrl.Result{}, err
	}
	tc := &tg.ToolCall{}
	if err := r.Get(ctx, req.NamespacedName, tc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	sc := newScope(tc)
	if !tc.Status.Phase.IsTerminal() {
		if err := r.checkPreview(ctx, sc); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !tc.DeletionTimestamp.IsZero() {
		r.written.forget(tc.UID)
		return r.reconcileDelete(ctx, sc)
	}
	if r.written.behind(tc) {
		// The watch has not delivered our last write yet; its event reconciles again. The requeue
		// is only a backstop.
		return ctrl.Result{RequeueAfter: staleRequeue}, nil
	}
	if tc.Status.Phase.IsTerminal() {
		r.stopWaiting(tc.UID)
		r.queueReceipt(tc)
		if err := r.removeFinalizer(ctx, tc); err != nil {
			return ctrl.Result{}, err
		}
		return r.retire(ctx, tc)
	}

	orig := tc.DeepCopy()
	// A notification the receiver handed over is written by this reconcile's status write.
	noteLanded := r.handed.take(tc)
	var res ctrl.Result
	var err error
	switch tc.Status.Phase {
	case "", tg.PhasePending, tg.PhaseAwaitingApproval:
		if sc.previewProblem != "" {
			// status.preview is not the manager's (preview.go): nothing is asked or run on it.
			res, err = r.previewNotVerified(ctx, sc)
			break
		}
		if tc.Status.Phase == tg.PhaseAwaitingApproval {
			res, err = r.awaitDecision(ctx, sc)
			break
		}
		res, err = r.submit(ctx, sc)
	case tg.PhaseRunning:
		res, err = r.observeJob(ctx, sc)
	}
	if perr := r.patchStatus(ctx, orig, tc); perr != nil {
		if apierrors.IsNotFound(perr) {
			// Removed despite the finalizer (gone.go): hold what this reconcile knows (the request
			// it may have just submitted) and withdraw it.
			r.gone.add(tc, r.Clock.Now(), nil)
			return ctrl.Result{}, r.withdrawGone(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, errors.Join(err, perr)
	}
	noteLanded()
	if tc.ResourceVersion != orig.ResourceVersion {
		r.written.wrote(tc) // this reconcile wrote the ToolCall
	}
	r.reportTransition(orig, tc)
	if tc.Status.Phase == tg.PhaseRunning || tc.Status.Phase.IsTerminal() {
		// Approved (or ended): no request of this ToolCall can be pending any more. An ended call
		// is queued for its receipt (receiptqueue.go), and keeps its finalizer until it holds it.
		r.stopWaiting(tc.UID)
		r.queueReceipt(tc)
		if ferr := r.removeFinalizer(ctx, tc); ferr != nil {
			return ctrl.Result{}, errors.Join(err, ferr)
		}
	}
	return res, err
}

// stopWaiting ends the long poll of a call, or forgets its reads in asynchronous mode.
func (r *Reconciler) stopWaiting(uid types.UID) {
	r.Waiter.Stop(uid)
	r.asyncReads.forget(uid)
}

// patchStatus writes the status once, and only if it changed.
func (r *Reconciler) patchStatus(ctx context.Context, orig, tc *tg.ToolCall) error {
	if equality.Semantic.DeepEqual(orig.Status, tc.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, tc, mergepatch.Status(orig.Status)); err != nil {
		return fmt.Errorf("writing the status (phase %s): %w", tc.Status.Phase, err)
	}
	return nil
}

// reportTransition emits an event and counts outcomes when the phase changed.
func (r *Reconciler) reportTransition(orig, tc *tg.ToolCall) {
	if d := tc.Status.Decision; d != nil && orig.Status.Decision == nil {
		// The decision was recorded: counted once, when it is first written.
		if decidedByPolicy(tc) {
			r.reportPolicyDecision(tc)
		} else {
			approvalWaitSeconds.Observe(r.Clock.Since(tc.CreationTimestamp.Time).Seconds())
		}
	}
	if orig.Status.Phase == tc.Status.Phase && (orig.Status.Reason == tc.Status.Reason || tc.Status.Reason != tg.ReasonImageUnavailable) {
		// Within a phase, only the start of a wait for an image is an event of its own.
		return
	}
	eventType := corev1.EventTypeNormal
	switch tc.Status.Phase {
	case tg.PhaseFailed, tg.PhaseDenied, tg.PhaseExpired, tg.PhaseApprovalUnavailable, tg.PhaseCancelled, tg.PhaseRejected:
		eventType = corev1.EventTypeWarning
	}
	if tc.Status.Reason == tg.ReasonImageUnavailable {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(tc, nil, eventType, tc.Status.Reason, string(tc.Status.Phase), "%s", eventNote(tc))
	if tc.Status.Phase.IsTerminal() {
		toolCallOutcomes.WithLabelValues(tc.Namespace, string(tc.Status.Phase)).Inc()
	}
}

// emit records an event of the event table on tc; related is another object it concerns, or nil.
func (r *Reconciler) emit(tc *tg.ToolCall, related runtime.Object, e lifecycle.Event, args ...any) {
	row := e.Row()
	r.Recorder.Eventf(tc, related, row.Type, row.Reason, row.Action, "%s", e.Note(args...))
}

// eventNote is the status message, followed by who asked when the admission policy recorded it, so
// that each event of a ToolCall says whose call it is.
func eventNote(tc *tg.ToolCall) string {
	if tc.Spec.Requester == nil || tc.Spec.Requester.Username == "" {
		return tc.Status.Message
	}
	return fmt.Sprintf("%s Requested by %s.", tc.Status.Message, tc.Spec.Requester.Username)
}

// SetupWithManager registers the controller (its cache indexes are registered with the others, in
// controllers/indexes.go), the watches of Jobs, of their Pods' waits for images and of Tool versions, and the waiter's channel.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.asyncReads == nil {
		r.asyncReads = newAsyncReads()
	}
	if r.handed == nil {
		r.handed = newHandedNotes()
	}
	if err := mgr.Add(r.Waiter); err != nil {
		return err
	}
	if err := mgr.Add(r.ExecutionKey); err != nil {
		return err
	}
	if r.Receipts != nil {
		r.receiptQueue = newReceiptQueue(r, mgr.GetLogger().WithName("receipts"))
		if err := mgr.Add(r.receiptQueue); err != nil {
			return err
		}
	}
	r.notified = make(chan event.TypedGenericEvent[*tg.ToolCall], notifiedBuffer)
	replayed := make(chan event.TypedGenericEvent[*tg.ToolCall], notifiedBuffer)
	if err := r.addGoneReplay(mgr, replayed); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&tg.ToolCall{}).
		WatchesRawSource(r.removalsWatch(mgr.GetCache())).
		Owns(&batchv1.Job{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToToolCall(mgr.GetClient())), builder.WithPredicates(imageWaitChanged())).
		// A Tool's creation, deletion or new generation (not its status writes) reaches the calls that
		// await a decision for its toolName.
		WatchesRawSource(source.Kind(mgr.GetCache(), &tg.Tool{},
			handler.TypedEnqueueRequestsFromMapFunc(toolToWaitingCalls(mgr.GetClient())),
			predicate.TypedGenerationChangedPredicate[*tg.Tool]{})).
		// A Tool whose spec.finishedCallTTL may now say otherwise reaches the finished calls of its
		// toolName (retention.go).
		WatchesRawSource(source.Kind(mgr.GetCache(), &tg.Tool{}, toolRetentionChanged(mgr.GetClient()))).
		WatchesRawSource(source.Channel(r.Waiter.Events(), enqueueFirst())).
		// A notification the receiver takes is a decision to read: it is queued as the waiter's are,
		// at once (HandOver, whose reconcile records it), and again when the watch shows it recorded.
		WatchesRawSource(source.Channel(r.notified, enqueueFirst())).
		// Removals despite the finalizer that a replay found (gonereplay.go).
		WatchesRawSource(source.Channel(replayed, enqueueFirst())).
		Watches(&tg.ToolCall{}, notifiedFirst()).
		// A provider object whose delivery registration changed moves its waiting calls between long
		// polls and notifications.
		Watches(&tg.ApprovalProvider{}, handler.EnqueueRequestsFromMapFunc(waitingCallsOf(mgr.GetClient(), tg.KindApprovalProvider)), builder.WithPredicates(deliveryChanged()))
	// A manager without ClusterApprovalProviders (providercache.WithoutClusterProviders) never watches them.
	if !r.Providers.ClusterProvidersOff() {
		b = b.Watches(&tg.ClusterApprovalProvider{}, handler.EnqueueRequestsFromMapFunc(waitingCallsOf(mgr.GetClient(), tg.KindClusterApprovalProvider)), builder.WithPredicates(deliveryChanged()))
	}
	return b.WithOptions(controller.Options{
		MaxConcurrentReconciles: r.MaxConcurrentReconciles,
		RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](500*time.Millisecond, 30*time.Second),
	}).
		Named("toolcall").
		Complete(r)
}

// decisionPriority is the work queue priority of what the waiter reports (a decision, or a request the
// provider no longer knows). The controller's other work, the watch events of its own writes and of
// Jobs, has priority 0, so a human's answer is not queued behind them when the workers are busy.
const decisionPriority = 10

// notifiedFirst enqueues, at decisionPriority, a ToolCall whose status gained a notification.
func notifiedFirst() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			was, is := e.ObjectOld.(*tg.ToolCall).Status.Notification, e.ObjectNew.(*tg.ToolCall).Status.Notification
			if is == nil || (was != nil && was.ID == is.ID) {
				return
			}
			addFirst(q, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.ObjectNew)})
		},
	}
}

// enqueueFirst enqueues the waiter's events at decisionPriority on the controller's priority queue.
func enqueueFirst() handler.TypedEventHandler[*tg.ToolCall, reconcile.Request] {
	return handler.TypedFuncs[*tg.ToolCall, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*tg.ToolCall], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			addFirst(q, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		},
	}
}

// addFirst adds req at decisionPriority on the controller's priority queue (a plain queue takes it
// in order).
func addFirst(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(decisionPriority)}, req)
		return
	}
	q.Add(req)
}
