package readiness

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Ready follows what the check found: nil is Usable with the reason and message of a usable object;
// an *Error, wrapped or not, gives its progress, reason and message (never Usable); any other error
// is handed back, and nothing is written from it.
func TestOutcomeOfACheck(t *testing.T) {
	apiserver := errors.New("the apiserver timed out")
	for _, c := range []struct {
		name     string
		problem  error
		progress Progress
		reason   string
		message  string
		err      error
	}{
		{"usable", nil, Usable, "Reachable", "Read.", nil},
		{"stalled", Stalledf("CredentialRejected", "Refused by %s.", "aap"), Stalled, "CredentialRejected", "Refused by aap.", nil},
		{"retrying", Retryingf("Unreachable", "No answer."), Retrying, "Unreachable", "No answer.", nil},
		{"wrapped", fmt.Errorf("probing: %w", Stalledf("CABundleInvalid", "No PEM.")), Stalled, "CABundleInvalid", "No PEM.", nil},
		{"an Error is never usable", &Error{Progress: Usable, Reason: "Odd", Message: "Odd."}, Retrying, "Odd", "Odd.", nil},
		{"no progress given: retried", &Error{Reason: "Odd", Message: "Odd."}, Retrying, "Odd", "Odd.", nil},
		{"another error", apiserver, "", "", "", apiserver},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, reason, message, err := outcome(c.problem, "Reachable", "Read.")
			if p != c.progress || reason != c.reason || message != c.message || err != c.err {
				t.Errorf("outcome = %q %q %q %v, want %q %q %q %v", p, reason, message, err, c.progress, c.reason, c.message, c.err)
			}
		})
	}
}

// ErrorOf finds an *Error through wrapping, and nothing in another error or nil; a call-facing
// Error keeps its empty reason.
func TestErrorOf(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		ok     bool
		reason string
	}{
		{"nil", nil, false, ""},
		{"another error", errors.New("boom"), false, ""},
		{"an Error", Stalledf("HeaderSecretUnavailable", "no Secret"), true, "HeaderSecretUnavailable"},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", Retryingf("", "provider default is not Ready"))), true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, ok := ErrorOf(c.err)
			if ok != c.ok {
				t.Fatalf("ErrorOf ok = %v, want %v", ok, c.ok)
			}
			if ok && (e.Reason != c.reason || e.Error() != e.Message) {
				t.Errorf("ErrorOf = %+v, want reason %q and Error() its message", e, c.reason)
			}
		})
	}
}

// A reconcile that lost its status write runs again soon, whatever it would have waited otherwise;
// one that wrote waits as it says.
func TestResultRequeueAfter(t *testing.T) {
	for _, c := range []struct {
		name string
		res  Result
		next time.Duration
		want ctrl.Result
	}{
		{"written, next probe", Result{Progress: Usable}, 5 * time.Minute, ctrl.Result{RequeueAfter: 5 * time.Minute}},
		{"written, nothing scheduled", Result{Progress: Stalled}, 0, ctrl.Result{}},
		{"lost", Result{Progress: Usable, Lost: true}, 5 * time.Minute, ctrl.Result{RequeueAfter: ConflictRetry}},
		{"lost, nothing scheduled", Result{Progress: Retrying, Lost: true}, 0, ctrl.Result{RequeueAfter: ConflictRetry}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.res.RequeueAfter(c.next); got != c.want {
				t.Errorf("RequeueAfter(%s) = %+v, want %+v", c.next, got, c.want)
			}
		})
	}
}

// A message fits metav1.Condition's limit: one at the limit is kept whole, a longer one is cut with
// an ellipsis to exactly the limit.
func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		name string
		in   int
		want int
		cut  bool
	}{
		{"short", 10, 10, false},
		{"at the limit", maxMessage, maxMessage, false},
		{"over", maxMessage + 1, maxMessage, true},
		{"far over", 10 * maxMessage, maxMessage, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Truncate(strings.Repeat("a", c.in))
			if len(got) != c.want || strings.HasSuffix(got, "...") != c.cut {
				t.Errorf("Truncate of %d bytes: %d bytes, cut %v; want %d, cut %v", c.in, len(got), strings.HasSuffix(got, "..."), c.want, c.cut)
			}
		})
	}
}
