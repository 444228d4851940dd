package toolcall

import (
	"errors"
	"fmt"
	"strings"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Sentinels for errors.Is, one per terminal phase other than Succeeded.
var (
	ErrDenied              = errors.New("toolcall: denied by the approver")
	ErrExpired             = errors.New("toolcall: the approval expired before the tool could start")
	ErrApprovalUnavailable = errors.New("toolcall: approval could not be obtained in time")
	ErrCancelled           = errors.New("toolcall: the approval request was cancelled")
	ErrRejected            = errors.New("toolcall: rejected before asking a human")
	ErrFailed              = errors.New("toolcall: the tool ran and failed")
)

// ErrDeleted is wrapped by the error Call and Wait return when someone else deleted the ToolCall
// before it reached a terminal phase.
var ErrDeleted = errors.New("toolcall: the ToolCall was deleted")

var phaseErrors = map[tg.ToolCallPhase]error{
	tg.PhaseDenied:              ErrDenied,
	tg.PhaseExpired:             ErrExpired,
	tg.PhaseApprovalUnavailable: ErrApprovalUnavailable,
	tg.PhaseCancelled:           ErrCancelled,
	tg.PhaseRejected:            ErrRejected,
	tg.PhaseFailed:              ErrFailed,
}

// Error is a terminal outcome other than Succeeded. errors.Is(err, ErrDenied) etc. work.
type Error struct {
	Phase   tg.ToolCallPhase
	Reason  string
	Message string
	// Note is the approver's note (status.decision.note), for Denied and for approvals.
	Note string
	Name string
}

func errorOf(tc *tg.ToolCall) *Error {
	e := &Error{Phase: tc.Status.Phase, Reason: tc.Status.Reason, Message: tc.Status.Message, Name: tc.Name}
	if tc.Status.Decision != nil {
		e.Note = tc.Status.Decision.Note
	}
	return e
}

// Error reads as "toolcall NAME: PHASE (REASON): MESSAGE", followed for a denial by the approver's
// note when the message does not already carry it.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolcall %s: %s", e.Name, e.Phase)
	if e.Reason != "" && e.Reason != string(e.Phase) {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Phase == tg.PhaseDenied && e.Note != "" && !strings.Contains(e.Message, e.Note) {
		fmt.Fprintf(&b, " Approver's note: %q", e.Note)
	}
	return b.String()
}

// Is matches the sentinel of the Error's phase.
func (e *Error) Is(target error) bool {
	s, ok := phaseErrors[e.Phase]
	return ok && s == target
}

// AbandonedError is returned by Call when its context ended before the ToolCall reached a terminal
// phase. errors.Is(err, context.Canceled) (or DeadlineExceeded) holds.
type AbandonedError struct {
	Name      string
	Namespace string
	// Phase is the last observed phase ("" if the controller had not seen the ToolCall yet).
	Phase tg.ToolCallPhase
	// Deleted reports that the ToolCall was deleted (or was already gone), so Toolgate cancels its
	// approval request, or deletes its Job if it was Running.
	Deleted bool
	// DeleteErr is why the deletion failed, when it did.
	DeleteErr error
	// Err is the context's error.
	Err error
}

func (e *AbandonedError) Error() string {
	if e.Deleted {
		return fmt.Sprintf("toolcall %s: abandoned in phase %s (%v); the ToolCall was deleted", e.Name, e.Phase.OrPending(), e.Err)
	}
	return fmt.Sprintf("toolcall %s: abandoned in phase %s (%v), but deleting it failed (%v): delete ToolCall %s/%s to cancel its approval request",
		e.Name, e.Phase.OrPending(), e.Err, e.DeleteErr, e.Namespace, e.Name)
}

func (e *AbandonedError) Unwrap() []error {
	if e.DeleteErr != nil {
		return []error{e.Err, e.DeleteErr}
	}
	return []error{e.Err}
}
