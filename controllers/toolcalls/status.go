package toolcalls

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
)

// setStatus records what a step decided: a row of the outcome table with its message. It is how every
// step writes the phase.
func setStatus(tc *tg.ToolCall, st *lifecycle.Status) {
	setPhase(tc, st.Phase(), st.Reason(), st.Message)
}

// setCondition sets one condition with the ToolCall's generation.
func setCondition(tc *tg.ToolCall, condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&tc.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: message, ObservedGeneration: tc.Generation,
	})
}

// setPhase records a phase with its reason and message and derives the conditions from it. Steps call
// setStatus, so that what they record is in the outcome table.
func setPhase(tc *tg.ToolCall, phase tg.ToolCallPhase, reason, message string) {
	tc.Status.Phase = phase
	tc.Status.Reason = reason
	tc.Status.Message = message
	tc.Status.ObservedGeneration = tc.Generation
	setProgress(tc, phase, reason, message)
	switch phase {
	case tg.PhasePending, tg.PhaseAwaitingApproval:
		if approvedByPolicy(tc) { // an Approve rule matched; the Job is being created
			setApproved(tc)
		} else {
			setCondition(tc, tg.ConditionApproved, metav1.ConditionUnknown, reason, message)
		}
		setCondition(tc, tg.ConditionExecuted, metav1.ConditionFalse, reason, "The tool has not been started.")
		setCondition(tc, tg.ConditionReady, metav1.ConditionFalse, reason, message)
	case tg.PhaseRunning:
		setApproved(tc)
		if reason == tg.ReasonImageUnavailable {
			setCondition(tc, tg.ConditionExecuted, metav1.ConditionUnknown, reason, imageUnavailableExecuted)
		} else {
			setCondition(tc, tg.ConditionExecuted, metav1.ConditionTrue, reason, message)
		}
		setCondition(tc, tg.ConditionReady, metav1.ConditionFalse, reason, message)
	case tg.PhaseSucceeded, tg.PhaseFailed:
		setApproved(tc)
		if reason == tg.ReasonImageUnavailable {
			setCondition(tc, tg.ConditionExecuted, metav1.ConditionUnknown, reason, imageUnavailableExecuted)
		} else if tc.Status.JobName != "" {
			setCondition(tc, tg.ConditionExecuted, metav1.ConditionTrue, reason, message)
		} else { // approved, but the Job could not be created (Tool gone, Job refused)
			setCondition(tc, tg.ConditionExecuted, metav1.ConditionFalse, reason, "The tool did not run.")
		}
		setCondition(tc, tg.ConditionReady, metav1.ConditionTrue, reason, message)
	default: // Denied, Expired, ApprovalUnavailable, Cancelled, Rejected: the tool never runs.
		setCondition(tc, tg.ConditionApproved, metav1.ConditionFalse, reason, message)
		setCondition(tc, tg.ConditionExecuted, metav1.ConditionFalse, reason, "The tool did not run.")
		setCondition(tc, tg.ConditionReady, metav1.ConditionTrue, reason, message)
	}
}

// setProgress sets kstatus's conditions from the phase: Reconciling True while the call is under way;
// once it ended, Reconciling False and Stalled True for every outcome but Succeeded, so that a tool
// that waits on a ToolCall with kstatus (Flux, kapply, Config Sync) reports a denied, expired,
// rejected, cancelled, unavailable or failed call as failed, and only a succeeded one as current.
func setProgress(tc *tg.ToolCall, phase tg.ToolCallPhase, reason, message string) {
	if !phase.IsTerminal() {
		// A short message: every pending ToolCall in the manager's cache carries it, and
		// status.message already says the rest.
		setCondition(tc, tg.ConditionReconciling, metav1.ConditionTrue, reason, "The call is "+string(phase)+".")
		meta.RemoveStatusCondition(&tc.Status.Conditions, tg.ConditionStalled)
		return
	}
	setCondition(tc, tg.ConditionReconciling, metav1.ConditionFalse, reason, message)
	stalled := metav1.ConditionTrue
	if phase == tg.PhaseSucceeded {
		stalled = metav1.ConditionFalse
	}
	setCondition(tc, tg.ConditionStalled, stalled, reason, message)
}

// imageUnavailableExecuted is the Executed condition's message while, or after, the tool's container
// waited for an image it never got: the Job exists, so the call is never counted as not run, but
// nothing says it ran either.
const imageUnavailableExecuted = "The Job exists, but the tool's container has not started, as last reported by the kubelet: the node cannot get its image (see status.message)."

// setApproved records who approved the call: a human, or an Approve rule of the Tool.
func setApproved(tc *tg.ToolCall) {
	if approvedByPolicy(tc) {
		setCondition(tc, tg.ConditionApproved, metav1.ConditionTrue, tg.ReasonPolicyApproved,
			"Rule "+tc.Status.Decision.Rule+" of the Tool's spec.approval approved the call; no human was asked.")
		return
	}
	setCondition(tc, tg.ConditionApproved, metav1.ConditionTrue, tg.ReasonApproved, "A human approved the call while the approval was valid.")
}
