package toolcalls

import (
	"context"
	"fmt"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/provider"
)

// submit admits a new ToolCall (or rejects it) and submits its approval request, idempotently.
func (r *Reconciler) submit(ctx context.Context, sc *scope) (ctrl.Result, error) {
	tc := sc.tc
	accepted := controllerutil.ContainsFinalizer(tc, tg.Finalizer)
	if accepted && approvedByPolicy(tc) {
		// A rule approved the call in an earlier reconcile whose Job create failed, or so says a
		// status that anyone allowed to write toolcalls/status may have written: the Tool's rules
		// decide again, and only their approval goes on to the run gate.
		holds, err := r.ruleApprovalHolds(ctx, sc)
		if err != nil {
			return ctrl.Result{}, err
		}
		if holds {
			return r.startJob(ctx, sc)
		}
		r.emit(tc, nil, lifecycle.RuleApprovalNotVerified, tc.Status.Decision.Rule)
		tc.Status.Decision = nil
	}
	var adm *acceptedCall
	var rej *lifecycle.Status
	var err error
	if accepted {
		// The finalizer and annotations record an earlier acceptance, but whoever may create a
		// ToolCall may also write them: the record is trusted only if this controller could have
		// written it.
		adm, rej, err = r.checkAcceptance(ctx, sc)
	} else {
		adm, rej, err = r.accept(ctx, sc)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if rej != nil {
		if !accepted {
			setStatus(tc, rej)
			return ctrl.Result{}, nil
		}
		// An accepted call may have been approved and started by an earlier reconcile whose status
		// write was lost (a rule's approval creates the Job before any status is written): its Job
		// is the record that the tool ran, and such a call is never reported as not run.
		ended, err := r.endWithoutRunning(ctx, sc, rej)
		if ended {
			r.withdrawRejected(ctx, sc)
		}
		return ctrl.Result{}, err
	}
	if adm.tool.Spec.Preview != nil {
		// The preview runs before anyone is asked, and the Tool's rules decide with what it said.
		if done, res, err := r.runPreview(ctx, sc, adm.tool); !done || err != nil {
			return res, err
		}
		if rej := r.decideWithPreview(sc, adm); rej != nil {
			setStatus(tc, rej)
			return ctrl.Result{}, nil
		}
	}
	if adm.verdict.Action == tg.ActionApprove {
		return r.approveByPolicy(ctx, sc, adm)
	}
	acc, err := sc.accepted()
	if err != nil {
		return ctrl.Result{}, err
	}
	if res, waiting, err := r.awaitProvider(ctx, sc, acc.Window); waiting || err != nil {
		return res, err
	}
	req, err := r.submitOwn(ctx, sc, acc)
	if err != nil {
		return r.submitFailed(ctx, sc, acc.Window, err)
	}
	recordRequest(tc, req)
	if provider.IsTerminal(req.Status) {
		// A decision in the POST response is applied at once, without polling.
		return r.applyDecision(ctx, sc, req)
	}
	setStatus(tc, lifecycle.AwaitingHuman.Status())
	return r.awaitDecision(ctx, sc)
}

// providerRecheck is how soon a call waiting for its provider to be Ready looks again.
const providerRecheck = 5 * time.Second

// awaitProvider keeps a call Pending while the provider it was accepted with is missing or not Ready
// (waiting true), and ends it ApprovalUnavailable once its approval limit passed that way.
func (r *Reconciler) awaitProvider(ctx context.Context, sc *scope, w lifecycle.Window) (res ctrl.Result, waiting bool, err error) {
	rec := sc.rec()
	k, err := providercache.Recorded(sc.tc, rec)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	c, current, err := r.Providers.Client(ctx, k, true, rec.Instance)
	u, notReady := readiness.ErrorOf(err)
	if err != nil && !notReady {
		return ctrl.Result{}, true, err
	}
	if !notReady {
		// The request must live in one instance for the call's whole life: a call accepted before
		// its provider had an instance records the one it is first submitted to.
		if err := r.recordInstance(ctx, sc, current); err != nil {
			return ctrl.Result{}, true, err
		}
		sc.client = c
		return ctrl.Result{}, false, nil
	}
	problem := u.Message
	if !r.Clock.Now().Before(r.Timing.ApprovalLimit(w)) {
		setStatus(sc.tc, lifecycle.ProviderUnreachable.Status(problem))
		return ctrl.Result{}, true, nil
	}
	setStatus(sc.tc, lifecycle.ProviderWaiting.Status(problem))
	return ctrl.Result{RequeueAfter: providerRecheck}, true, nil
}

// recordInstance records instance, the provider's current one, as the call's if it names none yet.
func (r *Reconciler) recordInstance(ctx context.Context, sc *scope, instance string) error {
	tc, rec := sc.tc, sc.rec()
	if instance == "" || rec.Instance != "" {
		return nil
	}
	base := tc.DeepCopy()
	rec.Instance = instance
	rec.Write(tc)
	if err := r.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("recording the provider instance: %w", err)
	}
	r.written.wrote(tc)
	sc.took(rec)
	return nil
}

// withdrawRejected cancels, best effort, the request that an earlier submission of a rejected acceptance
// record may have left at the provider (a crash between the POST and the status write), recovering
// its id with the idempotent submission, so that no human reviews a call that will not run.
func (r *Reconciler) withdrawRejected(ctx context.Context, sc *scope) {
	if sc.rec().RuleApproved {
		return // a rule approved the call at acceptance: no request was ever submitted
	}
	if _, err := sc.accepted(); err != nil {
		return // without both annotations nothing was ever submitted
	}
	if _, err := r.withdrawOwn(ctx, sc); err != nil {
		logf.FromContext(ctx).Info("withdrawing the approval request of a rejected acceptance record failed; it ends at its provider deadline", "code", provider.CodeOf(err))
	}
}

// submitFailed decides what a failed submission means: retry (Pending), refused input (Rejected),
// an untrusted answer or a limit reached (ApprovalUnavailable).
func (r *Reconciler) submitFailed(ctx context.Context, sc *scope, w lifecycle.Window, err error) (ctrl.Result, error) {
	tc := sc.tc
	code := provider.CodeOf(err)
	switch {
	case provider.IsUntrusted(err):
		setStatus(tc, lifecycle.UntrustedSubmitAnswer.Status(err))
		return ctrl.Result{}, nil
	case code == provider.CodeIdempotencyConflict:
		// Another request holds the call's key: nothing is asked under a new key, nothing runs.
		setStatus(tc, lifecycle.IdempotencyConflict.Status())
		return ctrl.Result{}, nil
	case provider.Codes[code].Status == http.StatusBadRequest:
		// invalid_request, or another 400 code the table knows: the provider refused the input.
		setStatus(tc, lifecycle.ProviderRefused.Status(err))
		return ctrl.Result{}, nil
	}
	cause := "provider error " + code
	if cert := providercache.CertificateProblem(err); cert != "" {
		cause = "the approvals provider's TLS certificate could not be verified: " + cert + "; check --provider-url, and that --provider-ca-file holds the CA that signed the provider's certificate"
	}
	if !r.Clock.Now().Before(r.Timing.ApprovalLimit(w)) {
		// Any request that did reach the provider has passed its own deadline by now.
		setStatus(tc, lifecycle.ProviderUnreachable.Status(cause))
		return ctrl.Result{}, nil
	}
	logf.FromContext(ctx).Info("submitting the approval request failed; retrying", "code", code)
	setStatus(tc, lifecycle.SubmitRetrying.Status(cause))
	return ctrl.Result{}, err
}

// awaitDecision applies what the waiter observed, gives up at the poll limit, withdraws the request
// when the Tool is no longer the version the call was accepted against, or keeps waiting.
func (r *Reconciler) awaitDecision(ctx context.Context, sc *scope) (ctrl.Result, error) {
	tc := sc.tc
	if obs, ok := r.Waiter.Latest(tc.UID); ok {
		if obs.Err != nil {
			return r.failClosed(ctx, sc, obs.Err)
		}
		return r.applyDecision(ctx, sc, obs.Request)
	}
	acc, err := sc.accepted()
	if err != nil {
		return ctrl.Result{}, err
	}
	ref, err := sc.ref()
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	until := r.Timing.PollUntil(acc.Window, timeOf(tc.Status.DeadlineAt))
	if !now.Before(until) {
		return r.withdrawAtLimit(ctx, sc, acc.Window, ref)
	}
	// The Tool's watch brings a changed Tool's waiting calls here: their approval could never start
	// the tool. A decision already recorded (an approval whose Job the cluster refused so far) is
	// left to the run gate, which checks the Tool's version too.
	if tc.Status.Decision == nil {
		change, err := r.confirmedToolChange(ctx, tc)
		if err != nil {
			return ctrl.Result{}, err
		}
		if change != "" {
			return r.withdrawForToolChange(ctx, sc, ref, change)
		}
	}
	if r.Providers.Asynchronous(ctx, tc) {
		// Asynchronous mode (asyncwait.go): no long poll; one the call had before its provider's
		// delivery was registered ends.
		r.Waiter.Stop(tc.UID)
		return r.awaitNotification(ctx, sc, ref, until)
	}
	r.asyncReads.forget(tc.UID)
	pc, err := r.providerOf(sc).raw(ctx, "wait")
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.Waiter.Ensure(tc, pc, ref, until.Sub(now))}, nil
}

// withdrawAtLimit withdraws the request once polling reached deadline_at + margin (or the call's
// limit); a decision that raced the withdrawal is applied as any other.
func (r *Reconciler) withdrawAtLimit(ctx context.Context, sc *scope, w lifecycle.Window, ref provider.Ref) (ctrl.Result, error) {
	settled, res, err := r.withdrawRequest(ctx, sc, ref)
	switch {
	case settled:
		return res, err
	case provider.CannotCancel(err):
		// No cancel endpoint (or the request is gone): it ends at its provider deadline, which has
		// passed. Without the provider's answer, a Job started before a restart is the record that the
		// call ran.
		_, err := r.endWithoutRunning(ctx, sc, lifecycle.NoDecision.Status())
		return ctrl.Result{}, err
	case err != nil:
		if r.Clock.Now().Before(r.Timing.ApprovalLimit(w)) {
			return ctrl.Result{}, fmt.Errorf("cancelling the approval request at the waiting limit: %w", err)
		}
		// Past our limit the request has passed its deadline at the provider too: nobody reviews it.
	}
	setStatus(sc.tc, lifecycle.NoDecisionWithdrawn.Status())
	return ctrl.Result{}, nil
}

// withdrawRequest cancels the call's pending request and records the provider's answer. A decision
// made meanwhile, or an answer that cannot be trusted, settles the call (applyDecision, failClosed):
// settled is then true, and res and err are the reconcile's. Otherwise err is the cancel's failure,
// nil when the request is cancelled.
func (r *Reconciler) withdrawRequest(ctx context.Context, sc *scope, ref provider.Ref) (settled bool, res ctrl.Result, err error) {
	// The submission that names the call's own request may find it ended already: its answer then
	// stands for the cancel's.
	ref, req, err := r.ownRef(ctx, sc, ref)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if req == nil || !provider.IsTerminal(req.Status) {
		req, err = r.providerOf(sc).Cancel(ctx, ref)
	}
	switch {
	case err == nil && req.Status != provider.StatusCancelled && provider.IsTerminal(req.Status):
		res, err := r.applyDecision(ctx, sc, req)
		return true, res, err
	case err == nil:
		recordRequest(sc.tc, req)
	case provider.IsUntrusted(err):
		res, err := r.failClosed(ctx, sc, err)
		return true, res, err
	}
	return false, ctrl.Result{}, err
}

// ownRef is ref naming the call's own request before it is cancelled: the id the provider answered
// this reconcile's submission with, or else the one the idempotent submission under the call's key
// answers with now, which it also returns (cur). status.requestID is only a hint here: whoever may
// write the status could point it at another call's request, whose cancellation would leave this
// call's own pending for a human nobody waits for.
func (r *Reconciler) ownRef(ctx context.Context, sc *scope, ref provider.Ref) (provider.Ref, *provider.Request, error) {
	if sc.own != "" {
		ref.ID = sc.own
		return ref, nil, nil
	}
	acc, err := sc.accepted()
	if err != nil {
		return ref, nil, err
	}
	cur, err := r.submitOwn(ctx, sc, acc)
	if err != nil {
		return ref, nil, err
	}
	ref.ID = cur.ID
	return ref, cur, nil
}

// submitOwn submits the call's request under its own idempotency key (a replay answers with the
// request as it is now) and notes the id the provider answered with as the call's own.
func (r *Reconciler) submitOwn(ctx context.Context, sc *scope, acc lifecycle.Acceptance) (*provider.Request, error) {
	req, err := r.providerOf(sc).Submit(ctx, acc.Submission)
	if err != nil {
		return nil, err
	}
	sc.own = req.ID
	return req, nil
}

// applyDecision records the provider's terminal answer and acts on it.
func (r *Reconciler) applyDecision(ctx context.Context, sc *scope, req *provider.Request) (ctrl.Result, error) {
	tc := sc.tc
	recordRequest(tc, req)
	switch req.Status {
	case provider.StatusApproved:
		// The approval covers the arguments the provider echoed; the Job runs the spec's arguments.
		if err := req.Covers(tc.Spec.Arguments.Raw); err != nil {
			setStatus(tc, lifecycle.ArgumentsChanged.Status())
			return ctrl.Result{}, nil
		}
		if req.ID != sc.own {
			return r.confirmOwnRequest(ctx, sc, req)
		}
		return r.startJob(ctx, sc)
	case provider.StatusDenied:
		st := lifecycle.HumanDenied.Status()
		if note := tc.Status.Decision.Note; note != "" {
			st = lifecycle.HumanDeniedWithNote.Status(note)
		}
		setStatus(tc, st)
	case provider.StatusCancelled:
		setStatus(tc, lifecycle.ProviderCancelled.Status())
	default: // expired
		setStatus(tc, lifecycle.ProviderExpired.Status())
	}
	return ctrl.Result{}, nil
}

// confirmOwnRequest asks the provider, through the idempotent submission under the call's own key,
// which request this call submitted and what state it is in, before an approval read by its id
// (status.requestID) starts the Job. Whoever may write ToolCall status may point that id at another
// call's approved request with the same tool and arguments; only the request submitted under this
// call's key speaks for it. A submission that answers with another request is followed instead, and
// the approval read by id is dropped.
func (r *Reconciler) confirmOwnRequest(ctx context.Context, sc *scope, seen *provider.Request) (ctrl.Result, error) {
	tc := sc.tc
	acc, err := sc.accepted()
	if err != nil {
		return ctrl.Result{}, err
	}
	own, err := r.submitOwn(ctx, sc, acc)
	if err != nil {
		return r.submitFailed(ctx, sc, acc.Window, err)
	}
	if own.ID != seen.ID {
		logf.FromContext(ctx).Info("status.requestID named a request this call did not submit; following the call's own request",
			"recorded", seen.ID, "own", own.ID)
		r.emit(tc, nil, lifecycle.RequestIDNotOwn)
		r.stopWaiting(tc.UID)
		tc.Status.Decision = nil
	}
	if !provider.IsTerminal(own.Status) {
		recordRequest(tc, own)
		setStatus(tc, lifecycle.AwaitingHuman.Status())
		return r.awaitDecision(ctx, sc)
	}
	return r.applyDecision(ctx, sc, own)
}

// failClosed ends a ToolCall whose provider answers cannot be trusted or whose request was lost:
// nothing runs. A best-effort cancel keeps a human from reviewing it.
func (r *Reconciler) failClosed(ctx context.Context, sc *scope, cause error) (ctrl.Result, error) {
	r.cancelRecorded(ctx, sc)
	if provider.CodeOf(cause) == provider.CodeNotFound {
		setStatus(sc.tc, lifecycle.RequestLost.Status())
	} else {
		setStatus(sc.tc, lifecycle.UntrustedAnswer.Status(cause))
	}
	return ctrl.Result{}, nil
}

// cancelRecorded cancels, best effort, the request status.requestID names, if any: for a call whose
// own request cannot be trusted or found again, it keeps a human from reviewing a call that will not run.
func (r *Reconciler) cancelRecorded(ctx context.Context, sc *scope) {
	if ref, err := sc.ref(); err == nil && ref.ID != "" {
		_, _ = r.providerOf(sc).Cancel(ctx, ref)
	}
}

// recordRequest copies the provider's view of the request into the status.
func recordRequest(tc *tg.ToolCall, req *provider.Request) {
	tc.Status.RequestID = req.ID
	if !req.DeadlineAt.IsZero() {
		tc.Status.DeadlineAt = metaTime(&req.DeadlineAt)
	}
	if d := req.Decision; d != nil && provider.IsTerminal(req.Status) {
		tc.Status.Decision = &tg.Decision{Status: req.Status, Source: tg.DecisionSourceProvider, Note: d.Note, DecidedAt: metaTime(d.DecidedAt), ExpiresAt: metaTime(d.ExpiresAt),
			ResponseDigest: req.BodyDigest}
	} else if provider.IsTerminal(req.Status) {
		tc.Status.Decision = &tg.Decision{Status: req.Status, Source: tg.DecisionSourceProvider, ResponseDigest: req.BodyDigest}
	} else {
		// A pending request has no decision: one in the status was not the provider's.
		tc.Status.Decision = nil
	}
}
