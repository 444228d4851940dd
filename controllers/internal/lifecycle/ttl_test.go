package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// finishedCall is a ToolCall in phase whose Ready condition says it ended at finished (none when
// finished is zero), labelled with labels.
func finishedCall(phase tg.ToolCallPhase, ready metav1.ConditionStatus, finished time.Time, labels map[string]string) *tg.ToolCall {
	tc := &tg.ToolCall{}
	tc.CreationTimestamp = metav1.NewTime(t0.Add(-365 * 24 * time.Hour))
	tc.Labels = labels
	tc.Status.Phase = phase
	if !finished.IsZero() {
		tc.Status.Conditions = []metav1.Condition{
			{Type: tg.ConditionApproved, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(finished.Add(-time.Hour))},
			{Type: tg.ConditionReady, Status: ready, LastTransitionTime: metav1.NewTime(finished)},
		}
	}
	return tc
}

// When a call is deleted: when it finished plus the TTL, and never for a call that has not finished
// (whatever its age), a call labelled to be kept, a TTL of 0, or a finished call whose end is unknown.
func TestDeleteAt(t *testing.T) {
	finished := t0.Add(-2 * time.Hour)
	day := 24 * time.Hour
	cases := []struct {
		name   string
		tc     *tg.ToolCall
		ttl    time.Duration
		want   time.Time
		wantOK bool
	}{
		{"succeeded", finishedCall(tg.PhaseSucceeded, metav1.ConditionTrue, finished, nil), day, finished.Add(day), true},
		{"failed", finishedCall(tg.PhaseFailed, metav1.ConditionTrue, finished, nil), time.Hour, finished.Add(time.Hour), true},
		{"denied", finishedCall(tg.PhaseDenied, metav1.ConditionTrue, finished, nil), time.Minute, finished.Add(time.Minute), true},
		{"expired", finishedCall(tg.PhaseExpired, metav1.ConditionTrue, finished, nil), day, finished.Add(day), true},
		{"approval unavailable", finishedCall(tg.PhaseApprovalUnavailable, metav1.ConditionTrue, finished, nil), day, finished.Add(day), true},
		{"cancelled", finishedCall(tg.PhaseCancelled, metav1.ConditionTrue, finished, nil), day, finished.Add(day), true},
		{"rejected", finishedCall(tg.PhaseRejected, metav1.ConditionTrue, finished, nil), day, finished.Add(day), true},
		{"the keep label's value is anything but true", finishedCall(tg.PhaseSucceeded, metav1.ConditionTrue, finished, map[string]string{tg.LabelKeep: "false"}), day, finished.Add(day), true},

		{"no phase yet, created a year ago", finishedCall("", metav1.ConditionFalse, time.Time{}, nil), time.Minute, time.Time{}, false},
		{"pending, created a year ago", finishedCall(tg.PhasePending, metav1.ConditionFalse, finished, nil), time.Minute, time.Time{}, false},
		{"awaiting approval, created a year ago", finishedCall(tg.PhaseAwaitingApproval, metav1.ConditionFalse, finished, nil), time.Minute, time.Time{}, false},
		{"running, created a year ago", finishedCall(tg.PhaseRunning, metav1.ConditionFalse, finished, nil), time.Minute, time.Time{}, false},
		{"running with a Ready condition that says True", finishedCall(tg.PhaseRunning, metav1.ConditionTrue, finished, nil), time.Minute, time.Time{}, false},
		{"labelled to be kept", finishedCall(tg.PhaseSucceeded, metav1.ConditionTrue, finished, map[string]string{tg.LabelKeep: "true"}), time.Minute, time.Time{}, false},
		{"TTL 0 keeps forever", finishedCall(tg.PhaseSucceeded, metav1.ConditionTrue, finished, nil), 0, time.Time{}, false},
		{"finished without a Ready condition", finishedCall(tg.PhaseSucceeded, metav1.ConditionTrue, time.Time{}, nil), time.Minute, time.Time{}, false},
		{"finished with Ready not True", finishedCall(tg.PhaseDenied, metav1.ConditionFalse, finished, nil), time.Minute, time.Time{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at, ok := DeleteAt(c.tc, c.ttl)
			if ok != c.wantOK || !at.Equal(c.want) {
				t.Errorf("DeleteAt = %v, %v; want %v, %v", at, ok, c.want, c.wantOK)
			}
		})
	}
}

func toolWithTTL(name, toolName string, ttl *time.Duration, deleting bool) tg.Tool {
	t := tg.Tool{}
	t.Name, t.Spec.ToolName = name, toolName
	if ttl != nil {
		t.Spec.FinishedCallTTL = &metav1.Duration{Duration: *ttl}
	}
	if deleting {
		now := metav1.NewTime(t0)
		t.DeletionTimestamp = &now
	}
	return t
}

// The Tool's TTL wins over the manager's, in both directions (shorter, longer, 0 for forever); with
// no Tool of that toolName the manager's applies; several Tools keep a record as long as any asks.
func TestFinishedCallTTL(t *testing.T) {
	hour, week, zero := time.Hour, 7*24*time.Hour, time.Duration(0)
	other := toolWithTTL("restart-pod", "restart_pod", &hour, false)
	cases := []struct {
		name  string
		tools []tg.Tool
		def   time.Duration
		want  time.Duration
	}{
		{"no Tool: the manager's", []tg.Tool{other}, week, week},
		{"no Tool, the manager's 0: forever", nil, 0, 0},
		{"a Tool without its own: the manager's", []tg.Tool{toolWithTTL("issue-refund", "issue_refund", nil, false), other}, week, week},
		{"the Tool's shorter wins", []tg.Tool{toolWithTTL("issue-refund", "issue_refund", &hour, false)}, week, hour},
		{"the Tool's longer wins", []tg.Tool{toolWithTTL("issue-refund", "issue_refund", &week, false)}, hour, week},
		{"the Tool's over the manager's 0", []tg.Tool{toolWithTTL("issue-refund", "issue_refund", &hour, false)}, 0, hour},
		{"the Tool's 0 keeps forever", []tg.Tool{toolWithTTL("issue-refund", "issue_refund", &zero, false)}, hour, 0},
		{"a Tool being deleted counts for nothing", []tg.Tool{toolWithTTL("issue-refund", "issue_refund", &hour, true)}, week, week},
		{"several: the longest", []tg.Tool{toolWithTTL("a", "issue_refund", &hour, false), toolWithTTL("b", "issue_refund", &week, false)}, time.Minute, week},
		{"several, one without its own: the manager's if longer", []tg.Tool{toolWithTTL("a", "issue_refund", &hour, false), toolWithTTL("b", "issue_refund", nil, false)}, week, week},
		{"several, one keeps forever: forever", []tg.Tool{toolWithTTL("a", "issue_refund", &hour, false), toolWithTTL("b", "issue_refund", &zero, false)}, week, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FinishedCallTTL(c.tools, "issue_refund", c.def); got != c.want {
				t.Errorf("FinishedCallTTL = %v, want %v", got, c.want)
			}
		})
	}
}

func TestCheckFinishedCallTTL(t *testing.T) {
	cases := []struct {
		ttl     time.Duration
		wantErr string
	}{
		{ttl: 0},
		{ttl: time.Minute},
		{ttl: 7 * 24 * time.Hour},
		{ttl: 59 * time.Second, wantErr: "--finished-toolcall-ttl 59s: use 0 (keep finished ToolCalls forever) or at least 1m0s, so that a caller waiting for the outcome reads it before the ToolCall is deleted"},
		{ttl: -time.Hour, wantErr: "--finished-toolcall-ttl -1h0m0s: use 0 (keep finished ToolCalls forever) or at least 1m0s, so that a caller waiting for the outcome reads it before the ToolCall is deleted"},
	}
	for _, c := range cases {
		t.Run(c.ttl.String(), func(t *testing.T) {
			err := CheckFinishedCallTTL(c.ttl)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("CheckFinishedCallTTL(%s) = %v, want nil", c.ttl, err)
			case c.wantErr != "" && (err == nil || err.Error() != c.wantErr):
				t.Errorf("CheckFinishedCallTTL(%s) = %v, want %q", c.ttl, err, c.wantErr)
			}
		})
	}
}
