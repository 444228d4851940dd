package lifecycle

import (
	"fmt"
	"time"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Timing holds the margins that place a ToolCall's approval and execution inside its waiting limit
// (docs/behaviour.md, Timing). Manager flags set them.
type Timing struct {
	// ReturnMargin is kept at the end of the caller's waiting limit to return the result (default 10s).
	ReturnMargin time.Duration
	// FinalStateMargin is the time allowed after the provider's deadline to read its final state (default 15s).
	FinalStateMargin time.Duration
	// SkewMargin is how long before decision.expires_at an approval stops being usable (default 1s).
	SkewMargin time.Duration
	// SubmitAllowance is left for submitting when the requested timeout is defaulted, so that the
	// default still fits once the request reaches the provider (default 5s).
	SubmitAllowance time.Duration
}

// DefaultTiming returns the default margins (the manager flags' defaults).
func DefaultTiming() Timing {
	return Timing{ReturnMargin: 10 * time.Second, FinalStateMargin: 15 * time.Second, SkewMargin: time.Second, SubmitAllowance: 5 * time.Second}
}

// Window is the timing of one ToolCall, fixed by its creation, its waiting limit and its Tool.
type Window struct {
	Created          time.Time
	WaitingLimit     time.Duration
	ExecutionTimeout time.Duration
}

// NewWindow is the window of tc when its Tool's execution timeout is executionTimeout: the one
// acceptance reads from the Tool, or the one the acceptance record fixed.
func NewWindow(tc *tg.ToolCall, executionTimeout time.Duration) Window {
	return Window{Created: tc.CreationTimestamp.Time, WaitingLimit: tc.Spec.WaitingLimit.Duration, ExecutionTimeout: executionTimeout}
}

// ExecutionTimeout is the Tool's spec.executionTimeout, or the default when it sets none.
func ExecutionTimeout(tool *tg.Tool) time.Duration {
	if tool.Spec.ExecutionTimeout != nil && tool.Spec.ExecutionTimeout.Duration > 0 {
		return tool.Spec.ExecutionTimeout.Duration
	}
	d, _ := time.ParseDuration(tg.DefaultExecutionTimeout)
	return d
}

// ApprovalLimit is our limit: creation + waitingLimit - executionTimeout - returnMargin. No approval
// obtained at or after it is acted on.
func (t Timing) ApprovalLimit(w Window) time.Time {
	return w.Created.Add(w.WaitingLimit - w.ExecutionTimeout - t.ReturnMargin)
}

// ResultDeadline is when the caller must have the result: creation + waitingLimit - returnMargin.
func (t Timing) ResultDeadline(w Window) time.Time {
	return w.Created.Add(w.WaitingLimit - t.ReturnMargin)
}

// RequestedTimeout returns the approval timeout to request: the explicit one in whole seconds, or by
// default the largest timeout that fits at now, leaving SubmitAllowance for the request to reach the
// provider, rounded down to whole minutes once it is a minute or more, so that the provider is asked
// for a timeout in one unit as it is usually written (44m rather than 2669s). The controller computes
// it once, when it accepts the ToolCall, and records it.
func (t Timing) RequestedTimeout(w Window, explicit *time.Duration, now time.Time) time.Duration {
	if explicit != nil {
		return explicit.Truncate(time.Second)
	}
	timeout := t.ApprovalLimit(w).Sub(now) - t.FinalStateMargin - t.SubmitAllowance
	if timeout >= time.Minute {
		return timeout.Truncate(time.Minute)
	}
	return timeout.Truncate(time.Second)
}

// CheckFits checks timeout + finalStateMargin <= limit - now and explains the numbers when it does not.
func (t Timing) CheckFits(w Window, timeout time.Duration, now time.Time) error {
	left := t.ApprovalLimit(w).Sub(now)
	if timeout < time.Second || timeout+t.FinalStateMargin > left {
		return fmt.Errorf("the approval timeout does not fit the waiting limit: timeout %s + final-state margin %s must be at most the %s left before the approval limit (waitingLimit %s - Tool executionTimeout %s - return margin %s, counted from creation); raise spec.waitingLimit or lower spec.timeout",
			round(timeout), round(t.FinalStateMargin), round(left), round(w.WaitingLimit), round(w.ExecutionTimeout), round(t.ReturnMargin))
	}
	return nil
}

// PollUntil is when polling stops: the provider's deadline plus the final-state margin, never past
// our approval limit.
func (t Timing) PollUntil(w Window, deadlineAt time.Time) time.Time {
	until := deadlineAt.Add(t.FinalStateMargin)
	if limit := t.ApprovalLimit(w); until.After(limit) || deadlineAt.IsZero() {
		return limit
	}
	return until
}

// ApprovalUsable reports whether an approval expiring at expiresAt may still start the call at now.
func (t Timing) ApprovalUsable(now, expiresAt time.Time) bool {
	return now.Before(expiresAt.Add(-t.SkewMargin))
}

// ActiveDeadline is the Job's activeDeadlineSeconds: the time left until the result deadline, capped
// by the execution timeout. Zero means no time is left to run.
func (t Timing) ActiveDeadline(w Window, now time.Time) int64 {
	left := t.ResultDeadline(w).Sub(now)
	if left > w.ExecutionTimeout {
		left = w.ExecutionTimeout
	}
	if left < time.Second {
		return 0
	}
	return int64(left / time.Second)
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }
