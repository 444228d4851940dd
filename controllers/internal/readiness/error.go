package readiness

import (
	"errors"
	"fmt"
)

// Error is why an object cannot be used, as an error that carries what its Ready condition says:
// the progress (Retrying or Stalled), the reason, and a message that names what to fix. Every step
// that finds such a problem returns one; Writer.Write sets Ready from it. Reason is empty where the
// one asking is a ToolCall (its provider object is missing or not Ready yet): the call's status says
// why it waits, and no Ready condition is written from it. Any other error (a failed apiserver
// request, say) is retried, never written.
type Error struct {
	Progress Progress
	Reason   string
	Message  string
}

func (e *Error) Error() string { return e.Message }

// Stalledf is an Error only a change of configuration fixes (Stalled).
func Stalledf(reason, format string, args ...any) error {
	return &Error{Progress: Stalled, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Retryingf is an Error that may pass without a change: the manager tries again (Retrying).
func Retryingf(reason, format string, args ...any) error {
	return &Error{Progress: Retrying, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ErrorOf returns the *Error err is, or wraps; ok is false for any other error, nil included.
func ErrorOf(err error) (e *Error, ok bool) {
	ok = errors.As(err, &e)
	return e, ok
}

// outcome is what Ready says after a check that found problem: Usable with reason and message when
// problem is nil, the Error's progress, reason and message when it is one. Any other error is
// returned: nothing is written from it.
func outcome(problem error, reason, message string) (Progress, string, string, error) {
	if problem == nil {
		return Usable, reason, message, nil
	}
	e, ok := ErrorOf(problem)
	if !ok {
		return "", "", "", problem
	}
	p := e.Progress
	if p != Stalled {
		p = Retrying // an Error is never Usable
	}
	return p, e.Reason, e.Message, nil
}
