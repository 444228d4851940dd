package toolcalls

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/provider"
)

// An approval, a human's or a rule's, is given for one version of the Tool: the one the ToolCall was
// accepted against (lifecycle.RecordToolVersion, lifecycle.ToolVersionMismatch). A Tool edited (a new
// generation) or deleted and created again (a new UID) after acceptance ends the call without running
// it; a call still awaiting a decision then has its request withdrawn at once (the Tool watch,
// toolToWaitingCalls, brings it to awaitDecision).

// confirmedToolChange says how the Tool a ToolCall awaiting a decision was accepted against changed,
// "" while it is unchanged. A change the cache shows is confirmed with a live read, so that a cache
// that is behind never withdraws a request.
func (r *Reconciler) confirmedToolChange(ctx context.Context, tc *tg.ToolCall) (string, error) {
	tools := &tg.ToolList{}
	if err := r.List(ctx, tools, client.InNamespace(tc.Namespace), client.MatchingFields{ToolNameField: tc.Spec.Tool}); err != nil {
		return "", fmt.Errorf("listing the Tools of namespace %s from the cache: %w", tc.Namespace, err)
	}
	if lifecycle.ToolChangeAmong(tc, tools.Items) == "" {
		return "", nil
	}
	if err := r.APIReader.List(ctx, tools, client.InNamespace(tc.Namespace)); err != nil {
		return "", fmt.Errorf("listing the Tools of namespace %s: %w", tc.Namespace, err)
	}
	return lifecycle.ToolChangeAmong(tc, tools.Items), nil
}

// withdrawForToolChange ends a call whose Tool changed while its request awaited a decision: an
// approval would cover the accepted version only and could never start the tool, so the request is
// withdrawn and nobody reviews it. A decision that raced the withdrawal is applied as any other (an
// approval then ends ToolChanged at the run gate). A provider that cannot cancel is asked once for
// the request's state, so that a decision it already holds is applied; a request still pending
// there stays until its deadline, and the call ends all the same, with a CancelFailed event.
func (r *Reconciler) withdrawForToolChange(ctx context.Context, sc *scope, ref provider.Ref, change string) (ctrl.Result, error) {
	settled, res, err := r.withdrawRequest(ctx, sc, ref)
	outcome := lifecycle.ToolChangedWithdrawn
	switch {
	case settled:
		return res, err
	case provider.CannotCancel(err):
		// Nothing to cancel with: a decision the provider already holds is applied as any other, so
		// that a human's denial is reported as one. Only a request still pending is left to its
		// deadline.
		cur, werr := r.providerOf(sc).Wait(ctx, ref, 0)
		if werr == nil && provider.IsTerminal(cur.Status) {
			return r.applyDecision(ctx, sc, cur)
		} else if provider.IsUntrusted(werr) {
			return r.failClosed(ctx, sc, werr)
		}
		r.emit(sc.tc, nil, lifecycle.CannotWithdraw, provider.CodeOf(err))
		outcome = lifecycle.ToolChangedNotWithdrawable
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("withdrawing the approval request of a call whose Tool changed: %w", err)
	}
	// Without an approval in the provider's answer, a Job started before a restart (whose status write
	// was lost) is still the record that the call ran.
	_, err = r.endWithoutRunning(ctx, sc, outcome.Status(change))
	return ctrl.Result{}, err
}
