package chaos

import (
	"fmt"
	"math"
	"time"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// The liveness bound. A decision the manager can act on reaches a Job within a few manager lives,
// whatever the faults and kills. From the run's own numbers:
//
//   - The manager life in which a human decides may do nothing with the decision: it is killed before
//     its reconcile, or its long poll is held by a delay fault (heldPoll, 13s, longer than any life)
//     until the kill: at most -chaos.kill-max (5s).
//   - The next life may do nothing either: a life can be as short as -chaos.kill-min (2s), less than a
//     manager needs to start, sync its caches and reconcile every open call once on a loaded two-core
//     machine. Another -chaos.kill-max. (Two such lives in a row are rare, and a call decided with
//     time to run has more than the bound left; the longest decision-to-Job the report prints shows
//     the margin.)
//   - The life after those starts: the longest start the run measured (starts), a second or two with
//     80 calls, more with hundreds. Then it reads the request. A read fails with probability about
//     0.16 (503 6%, reset 4%, 429 4%, delay 2%): twice in a row for 2.6% of the decisions, three
//     times for 0.4%. Two failed reads cost the client's backoff (managerBackoffBase, 500ms, then 1s,
//     each up to half again of jitter), each at least the 429's Retry-After of 1s: 1s + 1.5s.
//   - Then one reconcile reads the Tool and creates the Job: a second on a loaded machine.
//
// With the defaults and a 1.5s start: 2×5s + 1.5s + 2.5s + 1s = 15s. The same holds for a deletion:
// its reconcile sends the DELETE, which the cancellation faults fail about as often (502 6%, 503 6%,
// reset 4%, 429 4%; a lost response or a racing decision ends the request all the same).
//
// In asynchronous mode the manager reads the request only once a notification is recorded on the
// call: deliveryAllowance (async_test.go) adds the delivery's retry gaps and faults, 4.4s.
func liveBound(longestStart time.Duration) time.Duration {
	twoLives := 2 * *killMax
	twoRetries := max(time.Second, manager.backoffBase*3/2) + max(time.Second, manager.backoffBase*2*3/2)
	return twoLives + longestStart + twoRetries + time.Second
}

// manager is what the audit knows of the manager process's timing (the flags the harness starts it
// with, and the provider client's defaults it runs with).
var manager = struct {
	executionTimeout time.Duration // the Tools' spec.executionTimeout (the harness's default)
	returnMargin     time.Duration // --return-margin (testharness.TestTiming)
	backoffBase      time.Duration // provider.Options.BackoffBase's default, which the command uses
}{5 * time.Second, time.Second, 500 * time.Millisecond}

// approvalLimit is the end of a call's approval window: the last instant its Job may be created
// (creation + waitingLimit - executionTimeout - returnMargin, as the manager computes it).
func (c *call) approvalLimit() time.Time {
	return c.created.Add(c.limit - manager.executionTimeout - manager.returnMargin)
}

// approval reports whether the call is approved (by a human, validly, or by a rule): the calls the
// audit demands run when they had time to, and explains when they did not.
func (a action) approval() bool { return a == approveValid || a == approveEdited || a == policyApprove }

// lateness says how a decided approval stood against its window, "" when it had time to run.
type lateness struct {
	nearLimit bool // decided less than liveBound before the approval limit
	nearEdit  bool // decided less than liveBound before its Tool was edited
}

func (l lateness) timeToRun() bool { return !l.nearLimit && !l.nearEdit }

// Explanations of an approval that did not run: why the run could not demand that it did.
const (
	explTimeToRun  = "decided with time to run (≥ the liveness bound before the approval limit and before any edit of its Tool)"
	explNearLimit  = "decided less than the liveness bound before the approval limit"
	explNearEdit   = "decided less than the liveness bound before its Tool was edited"
	explNearBoth   = "decided less than the liveness bound before the approval limit and before its Tool was edited"
	explNotDecided = "not decided by the human: the request was already terminal (withdrawn, expired, or decided by a decision racing its withdrawal), or never existed"
)

func (l lateness) explanation() string {
	switch {
	case l.nearLimit && l.nearEdit:
		return explNearBoth
	case l.nearLimit:
		return explNearLimit
	case l.nearEdit:
		return explNearEdit
	}
	return explTimeToRun
}

// allowedReasons are the reasons an approval that did not run may end with, given how late it was.
func (l lateness) allowedReasons() map[string]bool {
	ok := map[string]bool{}
	if l.nearLimit {
		ok[tg.ReasonWaitingLimitReached] = true
		ok[tg.ReasonApprovalExpired] = true // a rule's approval expires at the approval limit
	}
	if l.nearEdit {
		ok[tg.ReasonToolChanged] = true
	}
	return ok
}

// notDecidedReasons are the reasons a call whose human found no pending request may end with: it was
// withdrawn for a Tool edit (or approved by a decision racing the withdrawal, which the run gate
// refuses), it expired first (slow submissions), or its submissions failed until the waiting limit.
// A denial racing the withdrawal is allowed where the provider holds it (decisionTiming).
var notDecidedReasons = map[string]bool{
	tg.ReasonWaitingLimitReached: true, tg.ReasonProviderExpired: true, tg.ReasonToolChanged: true,
}

// lateOf says how late an approval decided at decided was for c, whose Tool is tool.
func lateOf(c *call, tool string, decided time.Time, versions *toolVersions, bound time.Duration) lateness {
	l := lateness{nearLimit: c.approvalLimit().Sub(decided) < bound}
	if edit := versions.firstEditAfter(tool, c.created); !edit.IsZero() && edit.Sub(decided) < bound {
		l.nearEdit = true
	}
	return l
}

// Buckets of the time a call still had, before its approval limit, when the human decided.
func leftBucket(left, bound time.Duration) string {
	bound = bound.Round(100 * time.Millisecond)
	switch {
	case left < 2*time.Second:
		return "decided with < 2s left"
	case left < bound:
		return fmt.Sprintf("decided with 2s–%s left", bound)
	}
	return fmt.Sprintf("decided with ≥ %s left (time to run)", bound)
}

const bucketNeverDecided = "never decided"

// minKills is the fewest kills the run must have made: the killer kills after at most -chaos.kill-max
// and starts the next manager at once, so a window of w holds w/kill-max kills; half of that leaves a
// manager start of up to kill-max each (on a loaded machine) before the run counts the killer as stuck.
func minKills(window time.Duration) int {
	return int(window / (2 * *killMax))
}

// expectedFaults are the fault kinds the run must have injected, given how many calls of each operation
// the provider served: a counted rule is certain to fire once its operation has had as many calls as
// there are counted rules up to it; a random one is counted on once the chance that it never fired is
// below one in a million.
func expectedFaults(rules []faults.Rule, st reference.Stats) map[faults.Kind]bool {
	calls := map[faults.Op]int64{
		faults.OpSubmit: st.Submits, faults.OpGet: st.Gets, faults.OpCancel: st.Cancels,
		faults.OpDeliver: st.DeliveryAttempts,
	}
	want := map[faults.Kind]bool{}
	for op, n := range calls {
		counted := int64(0)
		miss := 1.0 // chance that a call of op escapes every random rule before the current one
		for _, r := range rules {
			// Rules of op any act on the provider API's calls, not on deliveries.
			if r.Op != op && (r.Op != faults.OpAny || op == faults.OpDeliver) {
				continue
			}
			if r.Probability == 0 {
				counted += int64(r.Count)
				if n >= counted {
					want[r.Kind] = true
				}
				continue
			}
			p := r.Probability * miss
			if never := math.Pow(1-p, float64(n-counted)); n > counted && never < 1e-6 {
				want[r.Kind] = true
			}
			miss *= 1 - r.Probability
		}
	}
	return want
}
