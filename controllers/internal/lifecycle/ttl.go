package lifecycle

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Retention: a finished ToolCall is deleted once its time to live (TTL) has passed, counted from when
// it finished. The TTL is the Tool's spec.finishedCallTTL, else the manager's --finished-toolcall-ttl;
// 0 keeps finished calls forever, and so does the label toolgate.dev/keep: "true". A call that has not
// finished is never deleted, whatever its age.

// MinFinishedCallTTL is the shortest TTL other than 0: a caller that waits for the outcome (a watch
// that reconnects, a poll) reads it before the call goes.
const MinFinishedCallTTL = time.Minute

// CheckFinishedCallTTL refuses a manager TTL that is negative or shorter than MinFinishedCallTTL
// (0, keep forever, is allowed). The Tool's field is checked by the CRD's schema with the same rule.
func CheckFinishedCallTTL(ttl time.Duration) error {
	if ttl == 0 || ttl >= MinFinishedCallTTL {
		return nil
	}
	return fmt.Errorf("--finished-toolcall-ttl %s: use 0 (keep finished ToolCalls forever) or at least %s, so that a caller waiting for the outcome reads it before the ToolCall is deleted", ttl, MinFinishedCallTTL)
}

// FinishedAt is when tc entered its final phase: the lastTransitionTime of its Ready condition, which
// the manager sets True when the call ends, and only then (Ready stays True afterwards, so the time
// never moves). ok is false for a call that has not finished, and for a finished one whose Ready
// condition does not say when it ended (a status the manager did not write): its end is unknown.
func FinishedAt(tc *tg.ToolCall) (time.Time, bool) {
	if !tc.Status.Phase.IsTerminal() {
		return time.Time{}, false
	}
	ready := meta.FindStatusCondition(tc.Status.Conditions, tg.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.LastTransitionTime.IsZero() {
		return time.Time{}, false
	}
	return ready.LastTransitionTime.Time, true
}

// Kept reports whether tc is labelled to be kept forever (toolgate.dev/keep: "true").
func Kept(tc *tg.ToolCall) bool {
	return tc.Labels[tg.LabelKeep] == "true"
}

// FinishedCallTTL is the TTL of the finished calls to toolName, given the Tools of their namespace:
// the spec.finishedCallTTL of the Tool with that toolName, or def (the manager's) when it sets none
// or there is no such Tool. Should several Tools carry the toolName (new calls to it are rejected as
// ambiguous), the longest of their TTLs applies, 0 (forever) being the longest: a record is kept as
// long as any of them asks. Tools being deleted are left out, as when a call finds its Tool.
func FinishedCallTTL(tools []tg.Tool, toolName string, def time.Duration) time.Duration {
	found := false
	var longest time.Duration
	for i := range tools {
		t := &tools[i]
		if t.Spec.ToolName != toolName || !t.DeletionTimestamp.IsZero() {
			continue
		}
		ttl := def
		if t.Spec.FinishedCallTTL != nil {
			ttl = t.Spec.FinishedCallTTL.Duration
		}
		if ttl <= 0 {
			return 0
		}
		found = true
		longest = max(longest, ttl)
	}
	if !found {
		return max(def, 0)
	}
	return longest
}

// DeleteAt is when tc is to be deleted under ttl: when it finished plus ttl. ok is false when it is
// kept: it has not finished (or its end is unknown), it is labelled to be kept, or ttl is 0.
func DeleteAt(tc *tg.ToolCall, ttl time.Duration) (at time.Time, ok bool) {
	if ttl <= 0 || Kept(tc) {
		return time.Time{}, false
	}
	finished, ok := FinishedAt(tc)
	if !ok {
		return time.Time{}, false
	}
	return finished.Add(ttl), true
}
