package controllers

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// An approval, a human's or a rule's, is given for one version of the Tool: the one the ToolCall was
// accepted against. Acceptance records the Tool's UID and generation; the Job is created only from
// that Tool at that generation. A Tool edited (a new generation) or deleted and created again (a new
// UID) after acceptance ends the call without running it; a call still awaiting a decision then has
// its request withdrawn at once (the Tool watch below brings it to awaitDecision).

// recordToolVersion writes the Tool's identity into the acceptance record.
func recordToolVersion(tc *tg.ToolCall, tool *tg.Tool) {
	tc.Annotations[tg.AnnotationToolUID] = string(tool.UID)
	tc.Annotations[tg.AnnotationToolGeneration] = strconv.FormatInt(tool.Generation, 10)
}

// toolVersionProblem says how the Tool differs from the version the ToolCall was accepted against,
// "" when it is that version. Missing or malformed annotations are a problem too: nothing runs on a
// version nobody recorded.
func toolVersionProblem(tc *tg.ToolCall, tool *tg.Tool) string {
	uid, okUID := tc.Annotations[tg.AnnotationToolUID]
	gen, errGen := strconv.ParseInt(tc.Annotations[tg.AnnotationToolGeneration], 10, 64)
	switch {
	case !okUID || errGen != nil:
		return fmt.Sprintf("the ToolCall does not record which version of Tool %s it was accepted against (annotations %s and %s)",
			tool.Name, tg.AnnotationToolUID, tg.AnnotationToolGeneration)
	case uid != string(tool.UID):
		return fmt.Sprintf("Tool %s was deleted and created again after the ToolCall was accepted (UID %s, accepted against %s)", tool.Name, tool.UID, uid)
	case gen != tool.Generation:
		return fmt.Sprintf("Tool %s was changed after the ToolCall was accepted (generation %d, accepted against %d)", tool.Name, tool.Generation, gen)
	}
	return ""
}

// checkToolVersion is checkAcceptance's check that the Tool is still the accepted version: a record
// without the version is not one this controller writes; a record of another version is a Tool that
// changed before the request was submitted (again).
func checkToolVersion(tc *tg.ToolCall, tool *tg.Tool) *rejection {
	for _, key := range []string{tg.AnnotationToolUID, tg.AnnotationToolGeneration} {
		if _, ok := tc.Annotations[key]; !ok {
			return notAccepted(fmt.Sprintf("annotation %s is missing (the controller writes it together with the finalizer)", key))
		}
	}
	if problem := toolVersionProblem(tc, tool); problem != "" {
		return &rejection{tg.ReasonToolChanged, "The call could not be put to a human: " + problem +
			"; an approval would cover the accepted version only. Create the ToolCall again to run it with the Tool as it is now. The call did not run."}
	}
	return nil
}

// toolChanged is the outcome of an approved call whose Tool is no longer the accepted version.
func toolChanged(problem string) *notStarted {
	return &notStarted{tg.PhaseFailed, tg.ReasonToolChanged,
		"The call was approved but could not start: " + problem + "; the approval covers the accepted version only. Create the ToolCall again to run it with the Tool as it is now. The call did not run."}
}

// acceptedToolChange says how the Tool a ToolCall was accepted against changed, "" while it is
// unchanged (or the ToolCall records no version, which the acceptance check deals with). tools are
// the Tools of the ToolCall's namespace.
func acceptedToolChange(tc *tg.ToolCall, tools []tg.Tool) string {
	uid := tc.Annotations[tg.AnnotationToolUID]
	if uid == "" {
		return ""
	}
	var other *tg.Tool // a Tool of that toolName with another UID: the accepted one was re-created
	for i := range tools {
		t := &tools[i]
		if t.Spec.ToolName != tc.Spec.Tool {
			continue
		}
		if string(t.UID) == uid {
			if !t.DeletionTimestamp.IsZero() {
				return fmt.Sprintf("Tool %s is being deleted", t.Name)
			}
			return toolVersionProblem(tc, t)
		}
		if other == nil {
			other = t
		}
	}
	if other != nil {
		return toolVersionProblem(tc, other)
	}
	return fmt.Sprintf("the Tool with toolName %s that the ToolCall was accepted against was deleted", tc.Spec.Tool)
}

// acceptedToolProblem is acceptedToolChange for a ToolCall awaiting a decision. A change the cache
// shows is confirmed with a live read, so that a cache that is behind never withdraws a request.
func (r *ToolCallReconciler) acceptedToolProblem(ctx context.Context, tc *tg.ToolCall) (string, error) {
	tools := &tg.ToolList{}
	if err := r.List(ctx, tools, client.InNamespace(tc.Namespace), client.MatchingFields{toolNameField: tc.Spec.Tool}); err != nil {
		return "", fmt.Errorf("listing the Tools of namespace %s from the cache: %w", tc.Namespace, err)
	}
	if acceptedToolChange(tc, tools.Items) == "" {
		return "", nil
	}
	if err := r.APIReader.List(ctx, tools, client.InNamespace(tc.Namespace)); err != nil {
		return "", fmt.Errorf("listing the Tools of namespace %s: %w", tc.Namespace, err)
	}
	return acceptedToolChange(tc, tools.Items), nil
}

// withdrawForToolChange ends a call whose Tool changed while its request awaited a decision: an
// approval would cover the accepted version only and could never start the tool, so the request is
// withdrawn and nobody reviews it. A decision that raced the withdrawal is applied as any other (an
// approval then ends ToolChanged at the run gate). A provider that cannot cancel is asked once for
// the request's state, so that a decision it already holds is applied; a request still pending
// there stays until its deadline, and the call ends all the same, with a CancelFailed event.
func (r *ToolCallReconciler) withdrawForToolChange(ctx context.Context, tc *tg.ToolCall, ref provider.Ref, problem string) (ctrl.Result, error) {
	settled, res, err := r.cancelRequest(ctx, tc, ref)
	withdrawn := "so the approval request was withdrawn before anyone decided"
	switch {
	case settled:
		return res, err
	case provider.CannotCancel(err):
		// Nothing to cancel with: a decision the provider already holds is applied as any other, so
		// that a human's denial is reported as one. Only a request still pending is left to its
		// deadline.
		cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
		cur, werr := r.Provider.Wait(cctx, ref, 0)
		cancel()
		if werr == nil && provider.IsTerminal(cur.Status) {
			return r.applyDecision(ctx, tc, cur)
		} else if provider.IsUntrusted(werr) {
			return r.failClosed(ctx, tc, werr)
		}
		r.Recorder.Eventf(tc, nil, corev1.EventTypeWarning, tg.ReasonCancelFailed, "Withdraw",
			"The approvals provider cannot cancel the approval request (%s); it ends at its provider deadline, and an approval of it is never used.", provider.CodeOf(err))
		withdrawn = "so the call ended before anyone decided (the provider cannot withdraw the request; an approval of it is never used)"
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("withdrawing the approval request of a call whose Tool changed: %w", err)
	}
	// Without an approval in the provider's answer, a Job started before a restart (whose status write
	// was lost) is still the record that the call ran.
	if started, err := r.markRunningIfStarted(ctx, tc); err != nil || started {
		return ctrl.Result{}, err
	}
	setPhase(tc, tg.PhaseCancelled, tg.ReasonToolChanged, "The call could not be approved: "+problem+", "+withdrawn+
		"; an approval would cover the accepted version only. Create the ToolCall again to run it with the Tool as it is now. The call did not run.")
	return ctrl.Result{}, nil
}

// toolCallToolField indexes ToolCalls by spec.tool.
const toolCallToolField = "spec.tool"

// toolToWaitingCalls maps a Tool to the ToolCalls of its namespace that name its toolName and await a
// decision: a new version (or the Tool's deletion or re-creation) withdraws their requests.
func toolToWaitingCalls(c client.Reader) handler.TypedMapFunc[*tg.Tool, reconcile.Request] {
	return func(ctx context.Context, tool *tg.Tool) []reconcile.Request {
		calls := &tg.ToolCallList{}
		if err := c.List(ctx, calls, client.InNamespace(tool.Namespace), client.MatchingFields{toolCallToolField: tool.Spec.ToolName}); err != nil {
			logf.FromContext(ctx).Error(err, "listing the ToolCalls of a changed Tool", "tool", tool.Name)
			return nil
		}
		var reqs []reconcile.Request
		for i := range calls.Items {
			if calls.Items[i].Status.Phase == tg.PhaseAwaitingApproval {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&calls.Items[i])})
			}
		}
		return reqs
	}
}
