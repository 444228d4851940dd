package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// submit admits a new ToolCall (or rejects it) and submits its approval request, idempotently.
func (r *ToolCallReconciler) submit(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	accepted := controllerutil.ContainsFinalizer(tc, tg.Finalizer)
	if accepted && approvedByPolicy(tc) {
		// A rule approved the call in an earlier reconcile whose Job create failed: the approval is
		// checked again, with the Tool's version, immediately before the Job, as a human's would be.
		return r.startJob(ctx, tc)
	}
	var adm *admitted
	var rej *rejection
	var err error
	if accepted {
		// The finalizer and annotations record an earlier acceptance, but whoever may create a
		// ToolCall may also write them: the record is trusted only if this controller could have
		// written it.
		adm, rej, err = r.checkAcceptance(ctx, tc)
	} else {
		adm, rej, err = r.admit(ctx, tc)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if rej != nil {
		if accepted {
			// An accepted call may have been approved and started by an earlier reconcile whose status
			// write was lost (a rule's approval creates the Job before any status is written): its Job
			// is the record that the tool ran, and such a call is never reported as not run.
			if started, err := r.markRunningIfStarted(ctx, tc); err != nil || started {
				return ctrl.Result{}, err
			}
			r.withdraw(ctx, tc)
		}
		setPhase(tc, tg.PhaseRejected, rej.reason, rej.message)
		return ctrl.Result{}, nil
	}
	if adm.verdict.Action == tg.ActionApprove {
		return r.approveByPolicy(ctx, tc, adm)
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
	recordRequest(tc, req)
	if provider.IsTerminal(req.Status) {
		// A decision in the POST response is applied at once, without polling.
		return r.applyDecision(ctx, tc, req)
	}
	setPhase(tc, tg.PhaseAwaitingApproval, tg.ReasonAwaitingApproval, "Waiting for a human to approve or deny the call.")
	return r.awaitDecision(ctx, tc)
}

// withdraw cancels, best effort, the request that an earlier submission of a rejected acceptance
// record may have left at the provider (a crash between the POST and the status write), recovering
// its id with the idempotent submission, so that no human reviews a call that will not run.
func (r *ToolCallReconciler) withdraw(ctx context.Context, tc *tg.ToolCall) {
	if _, ruled := tc.Annotations[tg.AnnotationApprovalRule]; ruled {
		return // a rule approved the call at acceptance: no request was ever submitted
	}
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

// awaitDecision applies what the waiter observed, gives up at the poll limit, withdraws the request
// when the Tool is no longer the version the call was accepted against, or keeps waiting.
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
	// The Tool's watch brings a changed Tool's waiting calls here: their approval could never start
	// the tool. A decision already recorded (an approval whose Job the cluster refused so far) is
	// left to the run gate, which checks the Tool's version too.
	if tc.Status.Decision == nil {
		problem, err := r.acceptedToolProblem(ctx, tc)
		if err != nil {
			return ctrl.Result{}, err
		}
		if problem != "" {
			return r.withdrawForToolChange(ctx, tc, ref, problem)
		}
	}
	return ctrl.Result{RequeueAfter: r.Waiter.Ensure(tc, ref, until.Sub(now))}, nil
}

// giveUp: polling reached deadline_at + margin (or our limit). Cancel the request; a decision that
// raced the cancellation is applied as any other.
func (r *ToolCallReconciler) giveUp(ctx context.Context, tc *tg.ToolCall, w Window, ref provider.Ref) (ctrl.Result, error) {
	settled, res, err := r.cancelRequest(ctx, tc, ref)
	switch {
	case settled:
		return res, err
	case provider.CannotCancel(err):
		// No cancel endpoint (or the request is gone): it ends at its provider deadline, which has
		// passed. Without the provider's answer, a Job started before a restart is the record that the
		// call ran.
		if started, err := r.markRunningIfStarted(ctx, tc); err != nil || started {
			return ctrl.Result{}, err
		}
		setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained: no decision arrived before the waiting limit. The call did not run.")
		return ctrl.Result{}, nil
	case err != nil:
		if r.Clock.Now().Before(r.Timing.ApprovalLimit(w)) {
			return ctrl.Result{}, fmt.Errorf("cancelling the approval request at the waiting limit: %w", err)
		}
		// Past our limit the request has passed its deadline at the provider too: nobody reviews it.
	}
	setPhase(tc, tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained: no decision arrived before the waiting limit, so the request was withdrawn. The call did not run.")
	return ctrl.Result{}, nil
}

// cancelRequest cancels the call's pending request and records the provider's answer. A decision
// made meanwhile, or an answer that cannot be trusted, settles the call (applyDecision, failClosed):
// settled is then true, and res and err are the reconcile's. Otherwise err is the cancel's failure,
// nil when the request is cancelled.
func (r *ToolCallReconciler) cancelRequest(ctx context.Context, tc *tg.ToolCall, ref provider.Ref) (settled bool, res ctrl.Result, err error) {
	cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	req, err := r.Provider.Cancel(cctx, ref)
	switch {
	case err == nil && req.Status != provider.StatusCancelled && provider.IsTerminal(req.Status):
		res, err := r.applyDecision(ctx, tc, req)
		return true, res, err
	case err == nil:
		recordRequest(tc, req)
	case provider.IsUntrusted(err):
		res, err := r.failClosed(ctx, tc, err)
		return true, res, err
	}
	return false, ctrl.Result{}, err
}

// applyDecision records the provider's terminal answer and acts on it.
func (r *ToolCallReconciler) applyDecision(ctx context.Context, tc *tg.ToolCall, req *provider.Request) (ctrl.Result, error) {
	recordRequest(tc, req)
	switch req.Status {
	case provider.StatusApproved:
		// The approval covers the arguments the provider echoed; the Job runs the spec's arguments.
		if err := req.Covers(tc.Spec.Arguments.Raw); err != nil {
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
		Requester:      requesterName(tc),
	}, nil
}

// requesterName is who asked, as the admission policy recorded it; empty when it did not.
func requesterName(tc *tg.ToolCall) string {
	if tc.Spec.Requester == nil {
		return ""
	}
	return tc.Spec.Requester.Username
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
		tc.Status.Decision = &tg.Decision{Status: req.Status, Source: tg.DecisionSourceProvider, Note: d.Note, DecidedAt: metaTime(d.DecidedAt), ExpiresAt: metaTime(d.ExpiresAt)}
	} else if provider.IsTerminal(req.Status) {
		tc.Status.Decision = &tg.Decision{Status: req.Status, Source: tg.DecisionSourceProvider}
	}
}
