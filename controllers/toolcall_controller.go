package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// toolNameField indexes Tools by spec.toolName.
const toolNameField = "spec.toolName"

// ToolCallReconciler drives a ToolCall through approval to its Job.
type ToolCallReconciler struct {
	client.Client
	// APIReader reads around the cache where a stale read could run a tool twice or mislabel it.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Provider  provider.Client
	Waiter    *Waiter
	// Clock is read for every expiry and limit decision.
	Clock  clock.PassiveClock
	Timing Timing
	// CallTimeout bounds one synchronous provider call (submit, cancel) made from a reconcile.
	CallTimeout time.Duration
	// CancelGiveUp bounds how long deletion keeps trying to cancel an unreachable provider's request.
	CancelGiveUp time.Duration
	// MaxConcurrentReconciles is the number of workers.
	MaxConcurrentReconciles int
	// RequeuePoll, when set, replaces the waiter with the common alternative design: each reconcile
	// reads the request once without waiting and requeues the ToolCall after this interval. It exists
	// as the baseline the benchmarks compare the long-poll waiter against.
	RequeuePoll time.Duration
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
	// Crash, when set, is called at the crash-sensitive points (CrashAfterSubmit, CrashBeforeJobCreate,
	// CrashAfterJobCreate); an error it returns ends the reconcile there, before any status write, as a
	// process crash would. Restart-safety tests use it.
	Crash func(point string) error

	tools   toolCache
	written writeLog
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls/finalizers,verbs=update
// +kubebuilder:rbac:groups=toolgate.dev,resources=tools,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile: get, handle deletion, then one small step per saved phase, one status patch at the end.
func (r *ToolCallReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tc := &tg.ToolCall{}
	if err := r.Get(ctx, req.NamespacedName, tc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tc.DeletionTimestamp.IsZero() {
		r.written.forget(tc.UID)
		return r.reconcileDelete(ctx, tc)
	}
	if r.written.behind(tc) {
		// The watch has not delivered our last write yet; its event reconciles again. The requeue
		// is only a backstop.
		return ctrl.Result{RequeueAfter: staleRequeue}, nil
	}
	if tc.Status.Phase.IsTerminal() {
		r.Waiter.Stop(tc.UID)
		return ctrl.Result{}, r.removeFinalizer(ctx, tc)
	}

	orig := tc.DeepCopy()
	var res ctrl.Result
	var err error
	switch tc.Status.Phase {
	case "", tg.PhasePending:
		res, err = r.submit(ctx, tc)
	case tg.PhaseAwaitingApproval:
		res, err = r.awaitDecision(ctx, tc)
	case tg.PhaseRunning:
		res, err = r.observeJob(ctx, tc)
	}
	if errors.Is(err, ErrCrashed) {
		return ctrl.Result{}, err // a simulated crash writes nothing more
	}
	if perr := r.patchStatus(ctx, orig, tc); perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	r.written.wrote(tc)
	r.recordTransition(orig, tc)
	if tc.Status.Phase == tg.PhaseRunning || tc.Status.Phase.IsTerminal() {
		// Approved (or ended): no request of this ToolCall can be pending any more.
		r.Waiter.Stop(tc.UID)
		if ferr := r.removeFinalizer(ctx, tc); ferr != nil {
			return ctrl.Result{}, errors.Join(err, ferr)
		}
	}
	return res, err
}

// submit admits a new ToolCall (or rejects it) and submits its approval request, idempotently.
func (r *ToolCallReconciler) submit(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	accepted := controllerutil.ContainsFinalizer(tc, tg.Finalizer)
	var rej *rejection
	var err error
	if accepted {
		// The finalizer and annotations record an earlier acceptance, but whoever may create a
		// ToolCall may also write them: the record is trusted only if this controller could have
		// written it.
		rej, err = r.checkAcceptance(ctx, tc)
	} else {
		rej, err = r.admit(ctx, tc)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if rej != nil {
		if accepted {
			r.withdraw(ctx, tc)
		}
		setPhase(tc, tg.PhaseRejected, rej.reason, rej.message)
		return ctrl.Result{}, nil
	}
	w, sub, err := r.submission(tc)
	if err != nil {
		return ctrl.Result{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	req, err := r.Provider.Submit(cctx, sub)
	if err != nil {
		return r.submitFailed(ctx, tc, w, err)
	}
	if err := r.crash(CrashAfterSubmit); err != nil {
		return ctrl.Result{}, err
	}
	recordRequest(tc, req)
	if provider.IsTerminal(req.Status) {
		// A decision in the POST response is applied at once, without polling.
		return r.applyDecision(ctx, tc, req)
	}
	setPhase(tc, tg.PhaseAwaitingApproval, tg.ReasonAwaitingApproval, "Waiting for a human to approve or deny the call.")
	return r.awaitDecision(ctx, tc)
}

// admit checks everything that can be checked before asking a human, then records acceptance: the
// finalizer (so no request is ever left behind) and the Tool's executionTimeout (so the ToolCall's
// timing and its request body stay fixed).
func (r *ToolCallReconciler) admit(ctx context.Context, tc *tg.ToolCall) (*rejection, error) {
	tool, rej, err := r.checkInput(ctx, tc)
	if err != nil || rej != nil {
		return rej, err
	}
	w := Window{Created: tc.CreationTimestamp.Time, WaitingLimit: tc.Spec.WaitingLimit.Duration, ExecutionTimeout: executionTimeout(tool)}
	timeout := r.Timing.RequestedTimeout(w, durationPtr(tc.Spec.Timeout), r.Clock.Now())
	if err := r.Timing.CheckFits(w, timeout, r.Clock.Now()); err != nil {
		return &rejection{tg.ReasonTimeoutDoesNotFit, "spec.timeout: " + err.Error() + "."}, nil
	}
	// The Job the approval would start must be valid before anyone is asked to approve it. The
	// template decides that, so the dry run runs once per Tool generation.
	if !r.tools.templateChecked(tool) {
		dry := buildJob(tc, tool, int64(w.ExecutionTimeout/time.Second))
		if err := r.Create(ctx, dry, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return &rejection{tg.ReasonInvalidTool, fmt.Sprintf("Tool %s: its spec.jobTemplate does not make a valid Job (%v); an admin must fix the Tool.", tool.Name, apierrors.ReasonForError(err))}, nil
			}
			return nil, err
		}
		r.tools.templatePassed(tool)
	}
	base := tc.DeepCopy()
	controllerutil.AddFinalizer(tc, tg.Finalizer)
	if tc.Annotations == nil {
		tc.Annotations = map[string]string{}
	}
	tc.Annotations[tg.AnnotationExecutionTimeout] = w.ExecutionTimeout.String()
	tc.Annotations[tg.AnnotationApprovalTimeout] = timeout.String()
	if err := r.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, err
	}
	r.written.wrote(tc)
	return nil, nil
}

// checkInput finds the ToolCall's Tool and checks the arguments: their size and depth, then the Tool's
// argumentsSchema. It returns the Tool only when every check passed.
func (r *ToolCallReconciler) checkInput(ctx context.Context, tc *tg.ToolCall) (*tg.Tool, *rejection, error) {
	tool, rej, err := r.findTool(ctx, tc)
	if err != nil || rej != nil {
		return nil, rej, err
	}
	if rej := checkArguments(tc.Spec.Arguments.Raw); rej != nil {
		return nil, rej, nil
	}
	if rej := r.tools.validateArguments(tool, tc.Spec.Arguments.Raw); rej != nil {
		return nil, rej, nil
	}
	return tool, nil, nil
}

// checkAcceptance checks the acceptance record of a ToolCall that carries the finalizer, before its
// request is submitted (again). It repeats every check of admit that does not depend on the instant
// of admission, and requires the annotations to be values admit could have written: the Tool's
// executionTimeout, and an approval timeout that is spec.timeout when set and fits the waiting limit
// counted from creation. A genuine record passes, so a submission repeated after a crash is still the
// same POST. The Job dry run is not repeated: it checks the Tool, not the ToolCall, it would add an
// apiserver request to every repeated submission, and the Job is validated when it is created.
func (r *ToolCallReconciler) checkAcceptance(ctx context.Context, tc *tg.ToolCall) (*rejection, error) {
	exec, rej := acceptedDuration(tc, tg.AnnotationExecutionTimeout)
	if rej != nil {
		return rej, nil
	}
	timeout, rej := acceptedDuration(tc, tg.AnnotationApprovalTimeout)
	if rej != nil {
		return rej, nil
	}
	tool, rej, err := r.checkInput(ctx, tc)
	if err != nil || rej != nil {
		return rej, err
	}
	if want := executionTimeout(tool); exec != want {
		return notAccepted(fmt.Sprintf("annotation %s is %s while Tool %s has executionTimeout %s (if the Tool was changed after the ToolCall was accepted, create the ToolCall again)",
			tg.AnnotationExecutionTimeout, exec, tool.Name, want)), nil
	}
	if tc.Spec.Timeout != nil {
		if want := tc.Spec.Timeout.Duration.Truncate(time.Second); timeout != want {
			return notAccepted(fmt.Sprintf("annotation %s is %s while spec.timeout is %s", tg.AnnotationApprovalTimeout, timeout, want)), nil
		}
	}
	w := Window{Created: tc.CreationTimestamp.Time, WaitingLimit: tc.Spec.WaitingLimit.Duration, ExecutionTimeout: exec}
	if timeout != timeout.Truncate(time.Second) || r.Timing.CheckFits(w, timeout, w.Created) != nil {
		most := max(r.Timing.ApprovalLimit(w).Sub(w.Created)-r.Timing.FinalStateMargin, 0).Truncate(time.Second)
		return notAccepted(fmt.Sprintf("annotation %s is %s while the approval timeouts that fit this ToolCall's waiting limit are whole seconds from 1s to %s",
			tg.AnnotationApprovalTimeout, timeout, most)), nil
	}
	return nil, nil
}

// acceptedDuration reads one annotation of the acceptance record.
func acceptedDuration(tc *tg.ToolCall, key string) (time.Duration, *rejection) {
	v, ok := tc.Annotations[key]
	if !ok {
		return 0, notAccepted(fmt.Sprintf("annotation %s is missing (the controller writes it together with the finalizer)", key))
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, notAccepted(fmt.Sprintf("annotation %s is %q, not a duration", key, v))
	}
	return d, nil
}

// notAccepted is the rejection of an acceptance record this controller would not have written.
func notAccepted(problem string) *rejection {
	return &rejection{tg.ReasonAcceptanceRecordInvalid, fmt.Sprintf(
		"The ToolCall carries the finalizer %s, which records that the controller accepted it, but %s. The controller does not submit or run a ToolCall on an acceptance record it did not write: create ToolCalls without toolgate.dev/ finalizers or annotations (the controller adds them). The call did not run.",
		tg.Finalizer, problem)}
}

// withdraw cancels, best effort, the request that an earlier submission of a rejected acceptance
// record may have left at the provider (a crash between the POST and the status write), recovering
// its id with the idempotent submission, so that no human reviews a call that will not run.
func (r *ToolCallReconciler) withdraw(ctx context.Context, tc *tg.ToolCall) {
	if _, _, err := r.submission(tc); err != nil {
		return // without both annotations nothing was ever submitted
	}
	if err := r.cancelPending(ctx, tc); err != nil {
		logf.FromContext(ctx).Info("withdrawing the approval request of a rejected acceptance record failed; it ends at its provider deadline", "code", provider.CodeOf(err))
	}
}

// submitFailed decides what a failed submission means: retry (Pending), refused input (Rejected),
// an untrusted answer or a limit reached (ApprovalUnavailable).
func (r *ToolCallReconciler) submitFailed(ctx context.Context, tc *tg.ToolCall, w Window, err error) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	code := provider.CodeOf(err)
	switch {
	case provider.IsUntrusted(err):
		setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonUntrustedResponse, "Approval could not be obtained: the provider's answer to the submission could not be trusted ("+err.Error()+"). The call did not run.")
		return ctrl.Result{}, nil
	case code == provider.CodeInvalidRequest || code == provider.CodeInvalidTimeout || code == provider.CodeIdempotencyKeyReused:
		setPhase(tc, tg.PhaseRejected, tg.ReasonProviderRefused, "The approvals provider refused the request before any human saw it ("+err.Error()+"). The call did not run.")
		return ctrl.Result{}, nil
	}
	cause := "provider error " + code
	if cert := certificateProblem(err); cert != "" {
		cause = "the approvals provider's TLS certificate could not be verified: " + cert + "; check --provider-url, and that --provider-ca-file holds the CA that signed the provider's certificate"
	}
	if !r.Clock.Now().Before(r.Timing.ApprovalLimit(w)) {
		// Any request that did reach the provider has passed its own deadline by now.
		setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained: the approvals provider could not be reached before the waiting limit ("+cause+"). The call did not run.")
		return ctrl.Result{}, nil
	}
	log.Info("submitting the approval request failed; retrying", "code", code)
	setPhase(tc, tg.PhasePending, tg.ReasonSubmitFailed, fmt.Sprintf("The approval request could not be submitted yet (%s); retrying until the waiting limit.", cause))
	return ctrl.Result{}, err
}

// certificateProblem returns the certificate verification error behind a failed call, "" when the
// call did not fail on the provider's TLS certificate. The text is the same on every attempt (an
// expiry is not quoted with the current time), so a status that quotes it is not rewritten on retries.
func certificateProblem(err error) string {
	var verify *tls.CertificateVerificationError
	if !errors.As(err, &verify) || verify.Err == nil {
		return ""
	}
	var invalid x509.CertificateInvalidError
	if errors.As(verify.Err, &invalid) && invalid.Reason == x509.Expired {
		return "x509: certificate has expired or is not yet valid"
	}
	return verify.Err.Error()
}

// awaitDecision applies what the waiter observed, gives up at the poll limit, or keeps waiting.
func (r *ToolCallReconciler) awaitDecision(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	if obs, ok := r.Waiter.Latest(tc.UID); ok {
		if obs.Err != nil {
			return r.failClosed(ctx, tc, obs.Err)
		}
		return r.applyDecision(ctx, tc, obs.Request)
	}
	w, sub, err := r.submission(tc)
	if err != nil {
		return ctrl.Result{}, err
	}
	ref, err := r.ref(tc, sub)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	until := r.Timing.PollUntil(w, timeOf(tc.Status.DeadlineAt))
	if !now.Before(until) {
		return r.giveUp(ctx, tc, w, ref)
	}
	if r.RequeuePoll > 0 {
		return r.pollOnce(ctx, tc, ref, until.Sub(now))
	}
	r.Waiter.Ensure(tc, ref, until.Sub(now))
	return ctrl.Result{RequeueAfter: until.Sub(now)}, nil
}

// pollOnce is the requeue-polling baseline: one read without waiting, then a requeue.
func (r *ToolCallReconciler) pollOnce(ctx context.Context, tc *tg.ToolCall, ref provider.Ref, left time.Duration) (ctrl.Result, error) {
	cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	req, err := r.Provider.Wait(cctx, ref, 0)
	switch {
	case err == nil && provider.IsTerminal(req.Status):
		return r.applyDecision(ctx, tc, req)
	case err != nil && isFinalWaitError(err):
		return r.failClosed(ctx, tc, err)
	}
	return ctrl.Result{RequeueAfter: min(r.RequeuePoll, left)}, nil
}

// giveUp: polling reached deadline_at + margin (or our limit). Cancel the request; a decision that
// raced the cancellation is applied as any other.
func (r *ToolCallReconciler) giveUp(ctx context.Context, tc *tg.ToolCall, w Window, ref provider.Ref) (ctrl.Result, error) {
	cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	req, err := r.Provider.Cancel(cctx, ref)
	switch {
	case err == nil && req.Status != provider.StatusCancelled && provider.IsTerminal(req.Status):
		return r.applyDecision(ctx, tc, req)
	case err == nil:
		recordRequest(tc, req)
	case provider.IsUntrusted(err):
		return r.failClosed(ctx, tc, err)
	default:
		if r.Clock.Now().Before(r.Timing.ApprovalLimit(w)) {
			return ctrl.Result{}, fmt.Errorf("cancelling the approval request at the waiting limit: %w", err)
		}
		// Past our limit the request has passed its deadline at the provider too: nobody reviews it.
	}
	setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained: no decision arrived before the waiting limit, so the request was withdrawn. The call did not run.")
	return ctrl.Result{}, nil
}

// applyDecision records the provider's terminal answer and acts on it.
func (r *ToolCallReconciler) applyDecision(ctx context.Context, tc *tg.ToolCall, req *provider.Request) (ctrl.Result, error) {
	recordRequest(tc, req)
	switch req.Status {
	case provider.StatusApproved:
		// The approval covers the arguments the provider hashed; the Job runs the spec's arguments.
		if sum, err := provider.ArgumentsSHA256(tc.Spec.Arguments.Raw); err != nil || sum != req.ArgumentsSHA256 {
			setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonArgumentsChanged, "Approval could not be obtained for these arguments: spec.arguments differ from the arguments the approval covers. The call did not run.")
			return ctrl.Result{}, nil
		}
		return r.startJob(ctx, tc)
	case provider.StatusDenied:
		msg := "A human denied the call. The call did not run."
		if tc.Status.Decision.Note != "" {
			msg = fmt.Sprintf("A human denied the call: %q. The call did not run.", tc.Status.Decision.Note)
		}
		setPhase(tc, tg.PhaseDenied, tg.ReasonDenied, msg)
	case provider.StatusCancelled:
		setPhase(tc, tg.PhaseCancelled, tg.ReasonProviderCancelled, "The approval request was cancelled at the provider. The call did not run.")
	default: // expired
		setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonProviderExpired, "Approval could not be obtained: the provider's approval window closed without a decision. The call did not run.")
	}
	return ctrl.Result{}, nil
}

// startJob starts the approved call: the Job's existence is the record that the tool ran, so an
// existing Job is never re-created and its call is never reported as not run, and a new one is created
// only if the approval is still valid at that instant. The create itself finds an existing Job
// (AlreadyExists); the Job is looked up only before saying that the call did not run.
func (r *ToolCallReconciler) startJob(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	name := JobName(tc)
	job, stop, err := r.approvedJob(ctx, tc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stop != nil {
		started, err := r.jobExists(ctx, tc.Namespace, name)
		if err != nil {
			return ctrl.Result{}, err
		}
		if started {
			return r.markRunning(tc, name)
		}
		setPhase(tc, stop.phase, stop.reason, stop.message)
		return ctrl.Result{}, nil
	}
	if err := r.crash(CrashBeforeJobCreate); err != nil {
		return ctrl.Result{}, err
	}
	err = r.Create(ctx, job)
	if cerr := r.crash(CrashAfterJobCreate); err == nil && cerr != nil {
		return ctrl.Result{}, cerr
	}
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return r.markRunning(tc, name)
	case apierrors.IsInvalid(err):
		setPhase(tc, tg.PhaseFailed, tg.ReasonJobRefused, fmt.Sprintf("The call was approved but the Job was refused by the cluster (%v). The call did not run.", apierrors.ReasonForError(err)))
		return ctrl.Result{}, nil
	default:
		// Not created (or unknown): the next attempt checks again, and creating finds a Job that exists.
		return ctrl.Result{}, fmt.Errorf("creating Job %s: %w", name, err)
	}
}

// notStarted is the outcome of an approved call that must not start, unless its Job already exists.
type notStarted struct {
	phase           tg.ToolCallPhase
	reason, message string
}

// approvedJob builds the Job for an approved call, or says why the call cannot start now: the Tool is
// gone or invalid, the approval is no longer valid at this instant, or no time is left to run it.
func (r *ToolCallReconciler) approvedJob(ctx context.Context, tc *tg.ToolCall) (*batchv1.Job, *notStarted, error) {
	tool, rej, err := r.findTool(ctx, tc)
	if err != nil {
		return nil, nil, err
	}
	if rej != nil {
		return nil, &notStarted{tg.PhaseFailed, tg.ReasonInvalidTool, "The call was approved but could not start: " + rej.message + " The call did not run."}, nil
	}
	w, _, err := r.submission(tc)
	if err != nil {
		return nil, nil, err
	}
	// The Tool's limit holds whatever the ToolCall's metadata says.
	w.ExecutionTimeout = min(w.ExecutionTimeout, executionTimeout(tool))
	job := buildJob(tc, tool, r.Timing.ActiveDeadline(w, r.Clock.Now()))

	// Immediately before the call starts: is the approval still valid, and is there still time?
	now := r.Clock.Now()
	expires := timeOf(tc.Status.Decision.ExpiresAt)
	if !r.Timing.ApprovalUsable(now, expires) {
		return nil, &notStarted{tg.PhaseExpired, tg.ReasonApprovalExpired, fmt.Sprintf("The approval expired at %s, before the call could start. The call did not run.", expires.UTC().Format(time.RFC3339))}, nil
	}
	if !now.Before(r.Timing.ApprovalLimit(w)) || *job.Spec.ActiveDeadlineSeconds < 1 {
		return nil, &notStarted{tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained in time: the approval arrived after the waiting limit left room to run the tool. The call did not run."}, nil
	}
	return job, nil, nil
}

// jobExists says whether the ToolCall's Job was created: from the cache if it holds the Job, else
// from the apiserver (a cache that has not seen it yet proves nothing).
func (r *ToolCallReconciler) jobExists(ctx context.Context, namespace, name string) (bool, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if err := r.Get(ctx, key, &batchv1.Job{}); err == nil {
		return true, nil
	}
	err := r.APIReader.Get(ctx, key, &batchv1.Job{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Crash points.
const (
	CrashAfterSubmit     = "after-submit"
	CrashBeforeJobCreate = "before-job-create"
	CrashAfterJobCreate  = "after-job-create"
)

// ErrCrashed is returned at a crash point chosen by Crash.
var ErrCrashed = errors.New("simulated crash")

func (r *ToolCallReconciler) crash(point string) error {
	if r.Crash == nil {
		return nil
	}
	if err := r.Crash(point); err != nil {
		return fmt.Errorf("%w at %s: %w", ErrCrashed, point, err)
	}
	return nil
}

func (r *ToolCallReconciler) markRunning(tc *tg.ToolCall, jobName string) (ctrl.Result, error) {
	tc.Status.JobName = jobName
	setPhase(tc, tg.PhaseRunning, tg.ReasonJobCreated, fmt.Sprintf("Approved; the tool is running as Job %s.", jobName))
	return ctrl.Result{}, nil
}

// observeJob records the Job's outcome and its termination message.
func (r *ToolCallReconciler) observeJob(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Status.JobName}
	job := &batchv1.Job{}
	if err := r.Get(ctx, key, job); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if err := r.APIReader.Get(ctx, key, job); err != nil {
			if apierrors.IsNotFound(err) {
				setPhase(tc, tg.PhaseFailed, tg.ReasonJobMissing, fmt.Sprintf("Job %s was deleted before it finished; its outcome is unknown.", key.Name))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, err
		}
	}
	finished, succeeded := jobFinished(job)
	if !finished {
		return ctrl.Result{}, nil
	}
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(tc.Namespace), client.MatchingLabels{tg.LabelToolCallUID: string(tc.UID)}); err != nil {
		return ctrl.Result{}, err
	}
	tc.Status.Result = terminationMessage(pods.Items)
	if succeeded {
		setPhase(tc, tg.PhaseSucceeded, tg.ReasonJobSucceeded, "The tool ran and succeeded; status.result holds its output.")
	} else {
		setPhase(tc, tg.PhaseFailed, tg.ReasonJobFailed, "The tool ran and failed; status.result holds its last message.")
	}
	return ctrl.Result{}, nil
}

// failClosed ends a ToolCall whose provider answers cannot be trusted or whose request was lost:
// nothing runs. A best-effort cancel keeps a human from reviewing it.
func (r *ToolCallReconciler) failClosed(ctx context.Context, tc *tg.ToolCall, cause error) (ctrl.Result, error) {
	if _, sub, err := r.submission(tc); err == nil {
		if ref, err := r.ref(tc, sub); err == nil && ref.ID != "" {
			cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
			_, _ = r.Provider.Cancel(cctx, ref)
			cancel()
		}
	}
	if provider.CodeOf(cause) == provider.CodeNotFound {
		setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonRequestLost, "Approval could not be obtained: the approvals provider no longer knows the request. The call did not run.")
	} else {
		setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonUntrustedResponse, "Approval could not be obtained: the provider's answer could not be trusted ("+cause.Error()+"). The call did not run.")
	}
	return ctrl.Result{}, nil
}

// reconcileDelete cancels a request that may still be pending, then lets the ToolCall go. It never
// hangs on an unreachable provider: it gives up after CancelGiveUp, or once the request's own
// deadline (within our limit) has passed.
func (r *ToolCallReconciler) reconcileDelete(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	r.Waiter.Stop(tc.UID)
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) {
		return ctrl.Result{}, nil
	}
	switch tc.Status.Phase {
	case "", tg.PhasePending, tg.PhaseAwaitingApproval:
		if err := r.cancelPending(ctx, tc); err != nil {
			w, _, _ := r.submission(tc)
			now := r.Clock.Now()
			if now.Before(tc.DeletionTimestamp.Add(r.CancelGiveUp)) && now.Before(r.Timing.ApprovalLimit(w)) {
				return ctrl.Result{}, fmt.Errorf("cancelling the approval request of a deleted ToolCall: %w", err)
			}
			r.Recorder.Eventf(tc, nil, corev1.EventTypeWarning, tg.ReasonCancelFailed, "Delete",
				"Gave up cancelling the approval request (%s); it ends at its provider deadline.", provider.CodeOf(err))
		} else {
			r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, tg.ReasonCancelRequested, "Delete", "The ToolCall was deleted; its approval request was cancelled.")
		}
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, tc)
}

// cancelPending cancels the ToolCall's request, recovering its id with the idempotent submission
// when it was never recorded.
func (r *ToolCallReconciler) cancelPending(ctx context.Context, tc *tg.ToolCall) error {
	_, sub, err := r.submission(tc)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	ref, err := r.ref(tc, sub)
	if err != nil {
		return err
	}
	if ref.ID == "" {
		req, err := r.Provider.Submit(cctx, sub)
		if err != nil {
			return err
		}
		if provider.IsTerminal(req.Status) {
			return nil
		}
		ref.ID = req.ID
	}
	_, err = r.Provider.Cancel(cctx, ref)
	return err
}

func (r *ToolCallReconciler) removeFinalizer(ctx context.Context, tc *tg.ToolCall) error {
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) {
		return nil
	}
	base := tc.DeepCopy()
	controllerutil.RemoveFinalizer(tc, tg.Finalizer)
	if err := r.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	if tc.DeletionTimestamp.IsZero() {
		r.written.wrote(tc)
	}
	return nil
}

// patchStatus writes the status once, and only if it changed.
func (r *ToolCallReconciler) patchStatus(ctx context.Context, orig, tc *tg.ToolCall) error {
	if equality.Semantic.DeepEqual(orig.Status, tc.Status) {
		return nil
	}
	base := tc.DeepCopy()
	base.Status = orig.Status
	return r.Status().Patch(ctx, tc, client.MergeFrom(base))
}

// recordTransition emits an event and counts outcomes when the phase changed.
func (r *ToolCallReconciler) recordTransition(orig, tc *tg.ToolCall) {
	if tc.Status.Decision != nil && orig.Status.Decision == nil {
		// The provider's terminal answer was recorded: counted once, when it is first written.
		approvalWaitSeconds.Observe(r.Clock.Since(tc.CreationTimestamp.Time).Seconds())
	}
	if orig.Status.Phase == tc.Status.Phase {
		return
	}
	eventType := corev1.EventTypeNormal
	switch tc.Status.Phase {
	case tg.PhaseFailed, tg.PhaseDenied, tg.PhaseExpired, tg.PhaseApprovalUnavailable, tg.PhaseCancelled, tg.PhaseRejected:
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(tc, nil, eventType, tc.Status.Reason, string(tc.Status.Phase), "%s", tc.Status.Message)
	if tc.Status.Phase.IsTerminal() {
		toolCallOutcomes.WithLabelValues(string(tc.Status.Phase)).Inc()
	}
}

// findTool resolves spec.tool to the namespace's one Tool with that toolName.
func (r *ToolCallReconciler) findTool(ctx context.Context, tc *tg.ToolCall) (*tg.Tool, *rejection, error) {
	tools := &tg.ToolList{}
	if err := r.List(ctx, tools, client.InNamespace(tc.Namespace), client.MatchingFields{toolNameField: tc.Spec.Tool}); err != nil {
		return nil, nil, err
	}
	tool, rej := pickTool(tools.Items, tc.Spec.Tool, tc.Namespace)
	if rej != nil {
		// Rejection is final: confirm with a live read that the cache was not just behind (a Tool
		// created a moment before the ToolCall).
		if err := r.APIReader.List(ctx, tools, client.InNamespace(tc.Namespace)); err != nil {
			return nil, nil, err
		}
		tool, rej = pickTool(tools.Items, tc.Spec.Tool, tc.Namespace)
	}
	return tool, rej, nil
}

// submission is the ToolCall's timing window and its approval request, both fixed when the ToolCall
// was accepted, so that every submission of it sends the same body.
func (r *ToolCallReconciler) submission(tc *tg.ToolCall) (Window, provider.Submission, error) {
	exec, err := annotatedDuration(tc, tg.AnnotationExecutionTimeout)
	if err != nil {
		return Window{}, provider.Submission{}, err
	}
	timeout, err := annotatedDuration(tc, tg.AnnotationApprovalTimeout)
	if err != nil {
		return Window{}, provider.Submission{}, err
	}
	w := Window{Created: tc.CreationTimestamp.Time, WaitingLimit: tc.Spec.WaitingLimit.Duration, ExecutionTimeout: exec}
	return w, provider.Submission{
		IdempotencyKey: string(tc.UID),
		Tool:           tc.Spec.Tool,
		Arguments:      tc.Spec.Arguments.Raw,
		Timeout:        timeout,
	}, nil
}

func annotatedDuration(tc *tg.ToolCall, key string) (time.Duration, error) {
	d, err := time.ParseDuration(tc.Annotations[key])
	if err != nil {
		return 0, fmt.Errorf("annotation %s, written when the ToolCall was accepted, is missing or invalid: %w", key, err)
	}
	return d, nil
}

func (r *ToolCallReconciler) ref(tc *tg.ToolCall, sub provider.Submission) (provider.Ref, error) {
	ref, err := sub.Ref()
	ref.ID = tc.Status.RequestID
	return ref, err
}

// recordRequest copies the provider's view of the request into the status.
func recordRequest(tc *tg.ToolCall, req *provider.Request) {
	tc.Status.RequestID = req.ID
	if !req.DeadlineAt.IsZero() {
		tc.Status.DeadlineAt = metaTime(&req.DeadlineAt)
	}
	if d := req.Decision; d != nil && provider.IsTerminal(req.Status) {
		tc.Status.Decision = &tg.Decision{Status: req.Status, Note: d.Note, DecidedAt: metaTime(d.DecidedAt), ExpiresAt: metaTime(d.ExpiresAt)}
	} else if provider.IsTerminal(req.Status) {
		tc.Status.Decision = &tg.Decision{Status: req.Status}
	}
}

// SetupWithManager registers the controller, its Tool index and the waiter's channel source.
func (r *ToolCallReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &tg.Tool{}, toolNameField, func(o client.Object) []string {
		return []string{o.(*tg.Tool).Spec.ToolName}
	}); err != nil {
		return err
	}
	if err := mgr.Add(r.Waiter); err != nil {
		return err
	}
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&tg.ToolCall{}).
		Owns(&batchv1.Job{}).
		WatchesRawSource(source.Channel(r.Waiter.Events(), enqueueFirst())).
		WithOptions(controller.Options{
			SkipNameValidation:      &r.SkipNameValidation,
			MaxConcurrentReconciles: workers,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](500*time.Millisecond, 30*time.Second),
		}).
		Named("toolcall").
		Complete(r)
}

// decisionPriority is the work queue priority of what the waiter reports (a decision, or a request the
// provider no longer knows). The controller's other work, the watch events of its own writes and of
// Jobs, has priority 0, so a human's answer is not queued behind them when the workers are busy.
const decisionPriority = 10

// enqueueFirst enqueues the waiter's events at decisionPriority on the controller's priority queue.
func enqueueFirst() handler.TypedEventHandler[*tg.ToolCall, reconcile.Request] {
	return handler.TypedFuncs[*tg.ToolCall, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*tg.ToolCall], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(decisionPriority)}, req)
				return
			}
			q.Add(req)
		},
	}
}

// Defaults fills unset options.
func (r *ToolCallReconciler) Defaults() {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Timing == (Timing{}) {
		r.Timing = DefaultTiming()
	}
	if r.CallTimeout <= 0 {
		r.CallTimeout = 15 * time.Second
	}
	if r.CancelGiveUp <= 0 {
		r.CancelGiveUp = 2 * time.Minute
	}
}
