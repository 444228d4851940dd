package toolcalls

import (
	"math/big"
	"strings"
	"testing"
	"time"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/provider"
)

// The timing functions decide whether an approved call may start and for how long: the run gate
// (lifecycle.RunGate) combines ApprovalUsable, the approval limit and ActiveDeadline. These fuzz
// targets state each piece's property over arbitrary inputs, with the expected values computed
// independently in exact arithmetic.
//
// Inputs are bounded: margins in [0, 1h], waiting limit and execution timeout in (0, 1000h] (either
// may exceed the other), instants within 1000h of creation. A selector input puts an instant or a
// duration within 2s of one of the boundaries, where a random value would almost never land.

const maxSpan = 1000 * time.Hour

var t0 = time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)

// span maps v onto [lo, hi] (nanoseconds).
func span(v int64, lo, hi time.Duration) time.Duration {
	n := uint64(hi-lo) + 1
	return lo + time.Duration(uint64(v)%n)
}

// near maps v onto [-2s, 2s].
func near(v int64) time.Duration { return span(v, -2*time.Second, 2*time.Second) }

// choose picks one of options by sel.
func choose[T any](sel int64, options ...T) T { return options[uint64(sel)%uint64(len(options))] }

// instant maps sec and nsec onto an instant between years 1 and 9999.
func instant(sec, nsec int64) time.Time {
	const first, last = -62135596800, 253402300799 // 0001-01-01, 9999-12-31T23:59:59 UTC
	s := first + int64(uint64(sec)%uint64(last-first+1))
	return time.Unix(s, int64(uint64(nsec)%uint64(time.Second))).UTC()
}

// nanos is t in nanoseconds since the Unix epoch, exactly.
func nanos(t time.Time) *big.Int {
	n := big.NewInt(t.Unix())
	n.Mul(n, big.NewInt(int64(time.Second)))
	return n.Add(n, big.NewInt(int64(t.Nanosecond())))
}

// plus is t + ds in nanoseconds since the Unix epoch, exactly.
func plus(t time.Time, ds ...time.Duration) *big.Int {
	n := nanos(t)
	for _, d := range ds {
		n.Add(n, big.NewInt(int64(d)))
	}
	return n
}

// fuzzWindow maps the seven window inputs onto a lifecycle.Timing and a lifecycle.Window, created between years 1000
// and 9000 so that every instant of a target stays representable.
func fuzzWindow(created, waiting, exec, ret, final, skew, submit int64) (lifecycle.Timing, lifecycle.Window) {
	c := instant(created, 0)
	if c.Year() > 9000 {
		c = c.AddDate(-1000, 0, 0)
	}
	if c.Year() < 1000 {
		c = c.AddDate(1000, 0, 0)
	}
	return lifecycle.Timing{
			ReturnMargin:     span(ret, 0, time.Hour),
			FinalStateMargin: span(final, 0, time.Hour),
			SkewMargin:       span(skew, 0, time.Hour),
			SubmitAllowance:  span(submit, 0, time.Hour),
		}, lifecycle.Window{
			Created:          c,
			WaitingLimit:     span(waiting, 1, maxSpan),
			ExecutionTimeout: span(exec, 1, maxSpan),
		}
}

// addSeeds adds every window below with every list of target-specific inputs in extras: the
// documented defaults (a 45m waiting limit, a 5m Tool), a waiting limit shorter than the execution
// timeout, one that leaves exactly no room, a sub-second execution timeout, and extremes.
func addSeeds(f *testing.F, extras ...[]int64) {
	created := t0.Unix() + 62135596800 // instant(created, 0) == t0
	d := func(x time.Duration) int64 { return int64(x) }
	windows := [][]int64{
		// created, waitingLimit-1, executionTimeout-1, returnMargin, finalStateMargin, skewMargin, submitAllowance
		{created, d(45*time.Minute - 1), d(5*time.Minute - 1), d(10 * time.Second), d(15 * time.Second), d(time.Second), d(5 * time.Second)},
		{created, d(2*time.Minute - 1), d(5*time.Minute - 1), d(10 * time.Second), d(15 * time.Second), d(time.Second), d(5 * time.Second)},
		{created, d(5*time.Minute + 10*time.Second - 1), d(5*time.Minute - 1), d(10 * time.Second), d(15 * time.Second), d(time.Second), d(5 * time.Second)},
		{created, d(45*time.Minute - 1), d(500*time.Millisecond - 1), d(10 * time.Second), d(15 * time.Second), d(time.Second), d(5 * time.Second)},
		{created, d(45*time.Minute - 1), d(5*time.Minute + 500*time.Millisecond - 1), d(10 * time.Second), d(15 * time.Second), d(time.Second), d(5 * time.Second)},
		{0, 0, 0, 0, 0, 0, 0},
		{-1, -1, -1, -1, -1, -1, -1},
	}
	if len(extras) == 0 {
		extras = [][]int64{nil}
	}
	for _, w := range windows {
		for _, e := range extras {
			args := []any{}
			for _, v := range append(append([]int64{}, w...), e...) {
				args = append(args, v)
			}
			f.Add(args...)
		}
	}
}

// offsets are seed offsets from creation (before span maps them onto [-1000h, 1000h]): around
// creation, and around the default window's approval limit (39m50s) and result deadline (44m50s).
var offsets = []int64{
	0, 1, -1, int64(time.Second), int64(39*time.Minute + 35*time.Second), int64(39*time.Minute + 50*time.Second),
	int64(39*time.Minute + 50*time.Second - 1), int64(44*time.Minute + 49*time.Second), int64(44*time.Minute + 50*time.Second),
	int64(time.Hour), -int64(time.Hour), 1 << 62,
}

// product returns every combination of one value from each list.
func product(lists ...[]int64) [][]int64 {
	out := [][]int64{nil}
	for _, l := range lists {
		var next [][]int64
		for _, prefix := range out {
			for _, v := range l {
				next = append(next, append(append([]int64{}, prefix...), v))
			}
		}
		out = next
	}
	return out
}

// FuzzApprovalLimit: limit = created + waitingLimit - executionTimeout - returnMargin; the result
// deadline is the limit plus the execution timeout.
func FuzzApprovalLimit(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, created, waiting, exec, ret, final, skew, submit int64) {
		tm, w := fuzzWindow(created, waiting, exec, ret, final, skew, submit)
		limit, result := tm.ApprovalLimit(w), tm.ResultDeadline(w)
		if want := plus(w.Created, w.WaitingLimit, -w.ExecutionTimeout, -tm.ReturnMargin); nanos(limit).Cmp(want) != 0 {
			t.Fatalf("ApprovalLimit = %s, want created + %s - %s - %s", limit, w.WaitingLimit, w.ExecutionTimeout, tm.ReturnMargin)
		}
		if want := plus(w.Created, w.WaitingLimit, -tm.ReturnMargin); nanos(result).Cmp(want) != 0 {
			t.Fatalf("ResultDeadline = %s, want created + %s - %s", result, w.WaitingLimit, tm.ReturnMargin)
		}
		if !limit.Add(w.ExecutionTimeout).Equal(result) {
			t.Fatalf("approval limit %s + execution timeout %s != result deadline %s", limit, w.ExecutionTimeout, result)
		}
	})
}

// FuzzApprovalUsable: an approval is usable at now exactly when now < expires_at - skewMargin; so
// never once expires_at - skew <= now, never with the zero expires_at a missing one is read as,
// and once unusable never usable again later.
func FuzzApprovalUsable(f *testing.F) {
	const epoch = 62135596800 // instant(epoch+s, n) == time.Unix(s, n)
	sec := int64(time.Second)
	for _, s := range [][6]int64{
		// now sec, now nsec, expires sec, expires nsec, skew, selector
		{t0.Unix(), 0, t0.Unix() + 420, 0, sec, 0},
		{t0.Unix(), 0, t0.Unix() + 1, 0, sec, 0},
		{t0.Unix(), 0, t0.Unix() + 1, 1, sec, 0},
		{t0.Unix(), 999999999, t0.Unix() + 1, 0, sec, 0},
		{t0.Unix() + 420, 0, t0.Unix() + 420, 0, 0, 0},
		{t0.Unix() + 419, 999999999, t0.Unix() + 420, 0, 0, 0},
		{t0.Unix(), 0, -epoch, 0, sec, 0},
		{-epoch, 0, -epoch, 0, 0, 0},
		{253402300799, 999999999, 253402300799, 999999999, int64(time.Hour), 0},
		{t0.Unix(), 0, 0, 0, sec, 1},
		{t0.Unix(), 0, 0, -1, sec, 1},
		{t0.Unix(), 0, 0, int64(2 * time.Second), sec, 1},
	} {
		f.Add(s[0]+epoch, s[1], s[2]+epoch, s[3], s[4], s[5], int64(time.Minute))
	}
	f.Fuzz(func(t *testing.T, nowSec, nowNsec, expSec, expNsec, skew, sel, later int64) {
		tm := lifecycle.Timing{SkewMargin: span(skew, 0, time.Hour)}
		now, exp := instant(nowSec, nowNsec), instant(expSec, expNsec)
		if sel%2 != 0 && now.Year() > 1 && now.Year() < 9999 {
			exp = now.Add(tm.SkewMargin + near(expNsec)) // within 2s of the boundary
		}
		got := tm.ApprovalUsable(now, exp)
		want := nanos(now).Cmp(plus(exp, -tm.SkewMargin)) < 0
		if got != want {
			t.Fatalf("ApprovalUsable(%s, %s) with skew %s = %v, want %v", now.Format(time.RFC3339Nano), exp.Format(time.RFC3339Nano), tm.SkewMargin, got, want)
		}
		if tm.ApprovalUsable(now, time.Time{}) {
			t.Fatalf("an approval without expires_at (the zero time) is usable at %s", now)
		}
		if !got && now.Year() < 9000 {
			if after := now.Add(span(later, 0, maxSpan)); tm.ApprovalUsable(after, exp) {
				t.Fatalf("unusable at %s but usable again at %s", now, after)
			}
		}
	})
}

// FuzzPollUntil: polling stops at deadline_at + finalStateMargin, never after the approval limit,
// and at the limit when the deadline is unknown.
func FuzzPollUntil(f *testing.F) {
	addSeeds(f, product(offsets, []int64{0, 1, 2})...)
	f.Fuzz(func(t *testing.T, created, waiting, exec, ret, final, skew, submit, deadlineOff, sel int64) {
		tm, w := fuzzWindow(created, waiting, exec, ret, final, skew, submit)
		limit := tm.ApprovalLimit(w)
		if got := tm.PollUntil(w, time.Time{}); !got.Equal(limit) {
			t.Fatalf("PollUntil with no deadline = %s, want the approval limit %s", got, limit)
		}
		// The provider's deadline_at may be anything, including before the ToolCall was created.
		deadline := choose(sel,
			w.Created.Add(span(deadlineOff, -maxSpan, maxSpan)),
			limit.Add(-tm.FinalStateMargin).Add(near(deadlineOff)), // where the cap starts
			w.Created.Add(near(deadlineOff)),
		)
		got := tm.PollUntil(w, deadline)
		if got.After(limit) {
			t.Fatalf("PollUntil(%s) = %s is after the approval limit %s", deadline, got, limit)
		}
		want := plus(deadline, tm.FinalStateMargin)
		if want.Cmp(nanos(limit)) > 0 {
			want = nanos(limit)
		}
		if nanos(got).Cmp(want) != 0 {
			t.Fatalf("PollUntil(%s) = %s, want min(deadline + %s, limit %s)", deadline, got, tm.FinalStateMargin, limit)
		}
	})
}

// FuzzActiveDeadline: the Job's activeDeadlineSeconds is never negative, never more than the
// execution timeout, never lets the Job run past the result deadline, is the largest whole number
// of seconds that does so, and is the whole execution timeout whenever the approval limit has not
// passed. Zero means no whole second is left, and startJob then runs nothing.
func FuzzActiveDeadline(f *testing.F) {
	addSeeds(f, product(offsets, []int64{0, 1, 2, 3})...)
	f.Fuzz(func(t *testing.T, created, waiting, exec, ret, final, skew, submit, nowOff, sel int64) {
		tm, w := fuzzWindow(created, waiting, exec, ret, final, skew, submit)
		result := tm.ResultDeadline(w)
		now := choose(sel,
			w.Created.Add(span(nowOff, -maxSpan, maxSpan)),
			tm.ApprovalLimit(w).Add(near(nowOff)),
			result.Add(near(nowOff)),
			result.Add(-w.ExecutionTimeout.Truncate(time.Second)).Add(near(nowOff)),
		)
		ad := tm.ActiveDeadline(w, now)
		run := time.Duration(ad) * time.Second
		if ad < 0 {
			t.Fatalf("ActiveDeadline = %d", ad)
		}
		if run > w.ExecutionTimeout {
			t.Fatalf("ActiveDeadline %ds exceeds the execution timeout %s", ad, w.ExecutionTimeout)
		}
		if ad > 0 && plus(now, run).Cmp(nanos(result)) > 0 {
			t.Fatalf("a Job started at %s for %ds ends after the result deadline %s", now, ad, result)
		}
		// left = min(resultDeadline - now, executionTimeout); ad = floor(left / 1s) when left >= 1s.
		left := new(big.Int).Sub(nanos(result), nanos(now))
		if left.Cmp(big.NewInt(int64(w.ExecutionTimeout))) > 0 {
			left.SetInt64(int64(w.ExecutionTimeout))
		}
		want := int64(0)
		if left.Cmp(big.NewInt(int64(time.Second))) >= 0 {
			want = new(big.Int).Quo(left, big.NewInt(int64(time.Second))).Int64()
		}
		if ad != want {
			t.Fatalf("ActiveDeadline at %s = %d, want %d (result deadline %s, execution timeout %s)", now, ad, want, result, w.ExecutionTimeout)
		}
		if now.Before(tm.ApprovalLimit(w)) && ad != int64(w.ExecutionTimeout/time.Second) {
			t.Fatalf("before the approval limit the Job gets %ds, not its execution timeout %s", ad, w.ExecutionTimeout)
		}
	})
}

// FuzzCheckFits: a timeout is accepted exactly when it is at least 1s and now + timeout +
// finalStateMargin <= approval limit, so the provider's deadline plus the time to read its final
// state never passes the limit; a refusal states the numbers and the fix. The default timeout,
// when it fits, still fits SubmitAllowance later and is the largest whole second that does; an
// explicit one is kept.
func FuzzCheckFits(f *testing.F) {
	nows := []int64{0, int64(10 * time.Minute), int64(39*time.Minute + 40*time.Second), int64(time.Hour)}
	timeouts := []int64{int64(30 * time.Minute), int64(39*time.Minute + 35*time.Second), int64(39*time.Minute + 36*time.Second),
		int64(500 * time.Millisecond), int64(time.Second), 0, -int64(time.Second)}
	addSeeds(f, product(nows, timeouts, []int64{0})...)
	addSeeds(f, product(nows, []int64{0, 1, -1}, []int64{1, 2, 3})...)
	f.Fuzz(func(t *testing.T, created, waiting, exec, ret, final, skew, submit, nowOff, timeoutOff, sel int64) {
		tm, w := fuzzWindow(created, waiting, exec, ret, final, skew, submit)
		limit := tm.ApprovalLimit(w)
		// now anywhere from creation to past the limit; the timeout anywhere, negative included.
		now := w.Created.Add(span(nowOff, 0, maxSpan))
		room := limit.Sub(now) - tm.FinalStateMargin // the largest timeout that fits
		timeout := choose(sel,
			span(timeoutOff, -maxSpan, maxSpan),
			room+near(timeoutOff),
			time.Second+near(timeoutOff),
			room.Truncate(time.Second)+near(timeoutOff),
		)

		err := tm.CheckFits(w, timeout, now)
		fits := timeout >= time.Second && plus(now, timeout, tm.FinalStateMargin).Cmp(nanos(limit)) <= 0
		if (err == nil) != fits {
			t.Fatalf("CheckFits(timeout %s at %s, limit %s, final-state margin %s) = %v, want fits=%v", timeout, now, limit, tm.FinalStateMargin, err, fits)
		}
		if err == nil {
			// The provider counts the timeout from when it receives the request, no earlier than now.
			if got, want := tm.PollUntil(w, now.Add(timeout)), now.Add(timeout+tm.FinalStateMargin); !got.Equal(want) {
				t.Fatalf("an accepted timeout's final state is cut short: PollUntil = %s, want %s", got, want)
			}
		} else {
			msg := err.Error()
			for _, want := range []string{
				"timeout " + timeout.Round(time.Second).String() + " + final-state margin " + tm.FinalStateMargin.Round(time.Second).String(),
				"the " + limit.Sub(now).Round(time.Second).String() + " left",
				"waitingLimit " + w.WaitingLimit.Round(time.Second).String(),
				"raise spec.waitingLimit or lower spec.timeout",
			} {
				if !strings.Contains(msg, want) {
					t.Fatalf("the refusal %q does not say %q", msg, want)
				}
			}
		}

		d := tm.RequestedTimeout(w, nil, now)
		// The default is asked for in one unit: whole minutes from a minute up, whole seconds below.
		unit := time.Second
		if d >= time.Minute {
			unit = time.Minute
		}
		if d%unit != 0 {
			t.Fatalf("default timeout %s is not whole %s", d, unit)
		}
		if tm.CheckFits(w, d, now) == nil {
			if err := tm.CheckFits(w, d, now.Add(tm.SubmitAllowance)); err != nil {
				t.Fatalf("the default timeout %s fits at %s but not %s later when it reaches the provider: %v", d, now, tm.SubmitAllowance, err)
			}
			if next := d + unit; tm.CheckFits(w, next, now.Add(tm.SubmitAllowance)) == nil && (unit == time.Minute || next < time.Minute) {
				t.Fatalf("the default timeout %s is not the largest in its unit: %s fits too", d, next)
			}
		}
		if explicit := timeout; tm.RequestedTimeout(w, &explicit, now) != timeout.Truncate(time.Second) {
			t.Fatalf("an explicit timeout %s is not kept (truncated to seconds)", timeout)
		}
	})
}

// FuzzRunGate: the three checks startJob makes immediately before creating the Job (the approval
// is usable, the approval limit has not passed, at least one second is left to run) together
// guarantee that the call starts before expires_at - skewMargin, with its whole execution timeout,
// bounded to end by the result deadline.
func FuzzRunGate(f *testing.F) {
	addSeeds(f, product(offsets, []int64{0, 1, -1, int64(time.Second), int64(5 * time.Minute), -int64(time.Minute)}, []int64{0, 1, 2, 3, 4})...)
	f.Fuzz(func(t *testing.T, created, waiting, exec, ret, final, skew, submit, nowOff, expOff, sel int64) {
		tm, w := fuzzWindow(created, waiting, exec, ret, final, skew, submit)
		limit := tm.ApprovalLimit(w)
		now := w.Created.Add(span(nowOff, -maxSpan, maxSpan))
		if sel&1 != 0 {
			now = limit.Add(near(nowOff))
		}
		var expires time.Time // zero: no expires_at recorded
		switch choose(sel>>1, 0, 1, 2) {
		case 1:
			expires = now.Add(span(expOff, -maxSpan, maxSpan))
		case 2:
			expires = now.Add(tm.SkewMargin + near(expOff))
		}
		ad := tm.ActiveDeadline(w, now)
		if !(tm.ApprovalUsable(now, expires) && now.Before(limit) && ad >= 1) {
			return
		}
		if expires.IsZero() || plus(now).Cmp(plus(expires, -tm.SkewMargin)) >= 0 {
			t.Fatalf("runs at %s on an approval expiring at %s (skew %s)", now, expires, tm.SkewMargin)
		}
		if plus(now, time.Duration(ad)*time.Second).Cmp(nanos(tm.ResultDeadline(w))) > 0 {
			t.Fatalf("runs at %s for %ds, past the result deadline %s", now, ad, tm.ResultDeadline(w))
		}
		if ad != int64(w.ExecutionTimeout/time.Second) {
			t.Fatalf("runs for %ds, not the execution timeout %s", ad, w.ExecutionTimeout)
		}
	})
}

// gateTool is the Tool of the run-gate fuzz targets; gateCall a ToolCall accepted against it.
func gateTool() *tg.Tool {
	tool := &tg.Tool{}
	tool.Name, tool.UID, tool.Generation = "issue-refund", "tool-uid-1", 3
	return tool
}

func gateCall() *tg.ToolCall {
	tc := &tg.ToolCall{}
	tc.Annotations = map[string]string{tg.AnnotationToolUID: "tool-uid-1", tg.AnnotationToolGeneration: "3"}
	return tc
}

// FuzzRunGateWithDecisions: lifecycle.RunGate, the run/don't-run decision immediately before the Job, over
// arbitrary windows, instants, decisions (none, a provider's of any status, a rule's approval as
// recordPolicyApproval records it, a rule's denial) and Tool versions (the accepted one, another
// generation, another UID, none recorded). The call may start exactly when the Tool is the accepted
// version, the decision is an approval, now < expires_at - skewMargin, now is before the approval
// limit and a whole second is left to run; computed independently in exact arithmetic. A changed
// Tool always says ToolChanged, whatever the decision; nothing the gate refuses is ever Denied; and
// a rule's approval never outlives the approval limit or its approval timeout.
func FuzzRunGateWithDecisions(f *testing.F) {
	sec := int64(time.Second)
	addSeeds(f, product(offsets, []int64{0, 1, -1, sec, int64(5 * time.Minute)}, []int64{0, 1, 2, 3, 4, 5, 6, 7}, []int64{0, int64(30 * time.Minute)}, []int64{0, 1, 2, 3})...)
	f.Fuzz(func(t *testing.T, created, waiting, exec, ret, final, skew, submit, nowOff, expOff, sel, approvalTimeout, version int64) {
		tm, w := fuzzWindow(created, waiting, exec, ret, final, skew, submit)
		limit := tm.ApprovalLimit(w)
		now := w.Created.Add(span(nowOff, -maxSpan, maxSpan))
		if sel&1 != 0 {
			now = limit.Add(near(nowOff))
		}
		tool, tc := gateTool(), gateCall()
		switch choose(version, 0, 1, 2, 3) {
		case 1:
			tool.Generation++
		case 2:
			tool.UID = "tool-uid-2"
		case 3:
			tc.Annotations = nil
		}
		sameVersion := choose(version, true, false, false, false)

		var expires time.Time // zero: no expires_at recorded
		switch choose(sel>>1, 0, 1, 2, 3) {
		case 1:
			expires = now.Add(span(expOff, -maxSpan, maxSpan))
		case 2:
			expires = now.Add(tm.SkewMargin + near(expOff))
		}
		timeout := span(approvalTimeout, 0, maxSpan)
		approved := false
		switch kind := choose(sel>>3, 0, 1, 2, 3); kind {
		case 1: // the provider's decision, any status
			status := choose(sel>>5, provider.StatusApproved, provider.StatusDenied, provider.StatusExpired, provider.StatusCancelled, "approved ", "")
			tc.Status.Decision = &tg.Decision{Status: status, Source: tg.DecisionSourceProvider, ExpiresAt: metaTime(&expires)}
			approved = status == provider.StatusApproved
		case 2: // a rule's approval, recorded when the rule matched, at or before now
			if now.Year() < 1000 || now.Year() > 9000 {
				return
			}
			decided := now.Add(-span(expOff, 0, time.Hour))
			recordPolicyApproval(tc, "small-refunds", w, timeout, tm, decided)
			approved = true
			d := tc.Status.Decision
			if d.Source != tg.DecisionSourcePolicy || d.Rule != "small-refunds" || d.Status != provider.StatusApproved {
				t.Fatalf("a rule's approval is recorded as %+v", d)
			}
			expires = timeOf(d.ExpiresAt)
			if expires.After(limit) {
				t.Fatalf("a rule's approval expires at %s, after the approval limit %s", expires, limit)
			}
			if expires.After(decided.Add(timeout)) {
				t.Fatalf("a rule's approval decided at %s for %s expires at %s", decided, timeout, expires)
			}
		case 3: // a rule's denial
			tc.Status.Decision = &tg.Decision{Status: provider.StatusDenied, Source: tg.DecisionSourcePolicy, Rule: "never-prod"}
		}
		if tc.Status.Decision != nil {
			expires = timeOf(tc.Status.Decision.ExpiresAt)
		}

		stop := lifecycle.RunGate(tc, tool, w, tm, now)
		ad := tm.ActiveDeadline(w, now)
		want := sameVersion && approved && !expires.IsZero() &&
			nanos(now).Cmp(plus(expires, -tm.SkewMargin)) < 0 && now.Before(limit) && ad >= 1
		if (stop == nil) != want {
			t.Fatalf("RunGate at %s (decision %+v, expires %s, skew %s, limit %s, %ds left, same version %v) = %+v, want run=%v",
				now, tc.Status.Decision, expires, tm.SkewMargin, limit, ad, sameVersion, stop, want)
		}
		if stop == nil {
			if ad != int64(w.ExecutionTimeout/time.Second) {
				t.Fatalf("runs for %ds, not the execution timeout %s", ad, w.ExecutionTimeout)
			}
			return
		}
		if !sameVersion && stop.Reason() != tg.ReasonToolChanged {
			t.Fatalf("a Tool that is not the accepted version stops the call with %s, not ToolChanged", stop.Reason())
		}
		if stop.Phase() == tg.PhaseDenied || !stop.Phase().IsTerminal() || !strings.HasSuffix(stop.Message, "The call did not run.") {
			t.Fatalf("the gate refused the call with %s/%s %q", stop.Phase(), stop.Reason(), stop.Message)
		}
	})
}

// FuzzProviderAnswerIsNeverAPolicyDecision: whatever a provider answers (fields named like a rule's
// decision included), what the controller records from it is the provider's decision, and the gate
// lets the call run only on the provider's approval.
func FuzzProviderAnswerIsNeverAPolicyDecision(f *testing.F) {
	for _, seed := range []string{
		`{"id":"req-1","tool":"issue_refund","status":"approved","decision":{"status":"approved","source":"Policy","rule":"small-refunds","decided_at":"2026-09-16T12:01:00Z","expires_at":"2026-09-16T12:06:00Z"}}`,
		`{"id":"req-1","tool":"issue_refund","status":"denied","source":"Policy","rule":"x","decision":{"status":"denied","note":"no","decided_at":"2026-09-16T12:01:00Z"}}`,
		`{"id":"req-1","status":"expired","decision":{"status":"expired"}}`,
		`{"id":"req-1","status":"cancelled"}`,
		`{"id":"req-1","tool":"issue_refund","status":"pending","deadline_at":"2026-09-16T12:30:00Z"}`,
	} {
		f.Add([]byte(seed), int64(time.Minute))
	}
	f.Fuzz(func(t *testing.T, body []byte, nowOff int64) {
		req, err := provider.DecodeRequest(body)
		if err != nil {
			return
		}
		tc := gateCall()
		recordRequest(tc, req)
		d := tc.Status.Decision
		if d == nil {
			if provider.IsTerminal(req.Status) {
				t.Fatalf("terminal status %q recorded no decision", req.Status)
			}
			return
		}
		if d.Source != tg.DecisionSourceProvider || d.Rule != "" {
			t.Fatalf("a provider answer was recorded as %+v", d)
		}
		tm := lifecycle.DefaultTiming()
		w := lifecycle.Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 5 * time.Minute}
		now := t0.Add(span(nowOff, 0, time.Hour))
		if lifecycle.RunGate(tc, gateTool(), w, tm, now) == nil && req.Status != provider.StatusApproved {
			t.Fatalf("the gate lets a %q answer run", req.Status)
		}
	})
}
