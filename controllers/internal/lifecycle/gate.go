package lifecycle

import (
	"time"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// RunGate is the run/don't-run decision immediately before the Job is created: nil when the call may
// start at now, otherwise the status of a call that did not run. The call may start when tool is the
// version the call was accepted against, the recorded decision (a human's or a rule's) is an approval
// still valid at now by its expiry less the skew margin, the approval limit has not passed, and at
// least one second is left to run the tool. w is the call's window with the execution timeout the
// Job would get.
func RunGate(tc *tg.ToolCall, tool *tg.Tool, w Window, t Timing, now time.Time) *Status {
	// The approval covers the version of the Tool the call was accepted against, and no other.
	if mismatch := ToolVersionMismatch(tc, tool); mismatch != "" {
		return ApprovedToolChanged.Status(mismatch)
	}
	d := tc.Status.Decision
	if d == nil || d.Status != provider.StatusApproved {
		// Never reached: the Job is only ever started for an approval. Fail closed all the same.
		return DecisionNotApproval.Status()
	}
	var expires time.Time
	if d.ExpiresAt != nil {
		expires = d.ExpiresAt.Time
	}
	if !t.ApprovalUsable(now, expires) {
		return ApprovalExpired.Status(expires.UTC().Format(time.RFC3339))
	}
	if !now.Before(t.ApprovalLimit(w)) || t.ActiveDeadline(w, now) < 1 {
		return ApprovedTooLate.Status()
	}
	return nil
}
