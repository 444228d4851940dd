package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/reference/faults"
)

func (r *report) print(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nChaos run against the %s provider profile, %s: %d ToolCalls, %d manager kills (SIGKILL) in %s, %d Tool edits, seed %d, %d provider requests, %d replayed submissions\n",
		r.variant.profile, r.variant.mode(), r.calls, r.kills, r.window.Round(time.Second), r.edits, r.seed, r.requests, r.stats.Replays)
	fmt.Fprintf(&b, "Faults injected: %s\n", counts(r.stats.Faults))
	if r.variant.async {
		fmt.Fprintf(&b, "Notifications: %d delivery attempts, %d acknowledged, %d failed (receiver down, dropped, refused), %d abandoned; ToolCalls left with a notification recorded: %d\n",
			r.stats.DeliveryAttempts, r.stats.Delivered, r.stats.DeliveryFailures, r.stats.DeliveriesAbandoned, r.notified)
	}
	fmt.Fprintf(&b, "DELETEs: %d, answered %s; %d requests cancelled, %d decided by a decision racing a DELETE (the provider counts %d)\n",
		r.stats.Cancels, answers(r.stats.Responses[faults.OpCancel]), r.cancelled, r.races, r.stats.RacedDecisions)
	fmt.Fprintf(&b, "ToolCalls that ended before any submission reached the provider (no human could act): %d\n", r.unsubmitted)
	fmt.Fprintf(&b, "Requests submitted for a ToolCall deleted at once that the apiserver removed despite the finalizer the acceptance had just added (withdrawn by the manager when its status write or its watch found the ToolCall gone, or after a kill by the next leader's replay): %d %v\n", len(r.bypassed), r.bypassed)
	fmt.Fprintf(&b, "Receipts: %s\n", r.receiptTally)
	fmt.Fprintf(&b, "Manager starts (to ready: every open call reconciled once): %s\n", r.starts)
	fmt.Fprintf(&b, "Liveness bound: %s (a valid approval decided at least this long before its approval limit and its Tool's next edit must run); decision to Job for valid approvals that ran: %s\n\n",
		r.bound.Round(100*time.Millisecond), r.toJobSummary())

	fmt.Fprintf(&b, "| Invariant | Count |\n|---|---|\n")
	for _, k := range invariantOrder {
		fmt.Fprintf(&b, "| %s | %d |\n", k, len(r.bad[k]))
	}
	fmt.Fprintf(&b, "\n| Action | ToolCalls | Outcomes |\n|---|---|---|\n")
	for _, m := range mix {
		o := r.outcomes[m.a]
		n := 0
		for _, c := range o {
			n += c
		}
		fmt.Fprintf(&b, "| %s | %d | %s |\n", m.a, n, counts(o))
	}
	r.printValid(&b)
	r.printUnavailable(&b)
	for _, k := range invariantOrder {
		for _, v := range r.bad[k] {
			fmt.Fprintf(&b, "VIOLATION %s: %s\n", k, v)
		}
	}
	t.Log(b.String())
}

// printValid breaks the approvals down by when they were decided against their window.
func (r *report) printValid(b *strings.Builder) {
	type key struct {
		act  action
		expl string
	}
	rows := map[key]map[string]int{}
	for _, c := range r.all {
		if !c.act.approval() {
			continue
		}
		o := r.ends[c.name]
		k := key{c.act, o.expl}
		if rows[k] == nil {
			rows[k] = map[string]int{}
		}
		rows[k][ending(o)]++
	}
	fmt.Fprintf(b, "\n| Approvals | When decided | ToolCalls | Outcomes |\n|---|---|---|---|\n")
	for _, a := range []action{approveValid, approveEdited, policyApprove} {
		for _, expl := range []string{explTimeToRun, explNearLimit, explNearEdit, explNearBoth, explNotDecided} {
			n := 0
			for _, v := range rows[key{a, expl}] {
				n += v
			}
			if n > 0 || a == approveValid {
				fmt.Fprintf(b, "| %s | %s | %d | %s |\n", a, expl, n, counts(rows[key{a, expl}]))
			}
		}
	}
}

// printUnavailable breaks every ApprovalUnavailable down by reason and by the time the call still had
// before its approval limit when the human decided, so that an approval lost while there was time to
// run it is a row of its own.
func (r *report) printUnavailable(b *strings.Builder) {
	type key struct{ reason, bucket string }
	rows := map[key]map[string]int{}
	for _, c := range r.all {
		o := r.ends[c.name]
		if o.final != string(tg.PhaseApprovalUnavailable) {
			continue
		}
		k := key{o.reason, bucketNeverDecided}
		if o.decided {
			k.bucket = leftBucket(o.left, r.bound)
		}
		if rows[k] == nil {
			rows[k] = map[string]int{}
		}
		rows[k][string(c.act)]++
	}
	keys := make([]key, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].reason != keys[j].reason {
			return keys[i].reason < keys[j].reason
		}
		return keys[i].bucket < keys[j].bucket
	})
	fmt.Fprintf(b, "\n| ApprovalUnavailable reason | When the human decided | ToolCalls | Actions |\n|---|---|---|---|\n")
	if len(keys) == 0 {
		fmt.Fprintf(b, "| (none) | | 0 | |\n")
	}
	for _, k := range keys {
		n := 0
		for _, v := range rows[k] {
			n += v
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s |\n", k.reason, k.bucket, n, counts(rows[k]))
	}
	b.WriteString("\n")
}

// toJobSummary is the median and the longest time from a valid approval's decision to its Job.
func (r *report) toJobSummary() string {
	var d []time.Duration
	for _, c := range r.all {
		if o := r.ends[c.name]; c.act == approveValid && o.ran && o.decided {
			d = append(d, o.toJob)
		}
	}
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	return fmt.Sprintf("median %s, longest %s over %d (to the second)", d[len(d)/2], d[len(d)-1], len(d))
}

// ending is a call's final phase with its reason.
func ending(o outcome) string {
	if o.reason == "" {
		return o.final
	}
	return o.final + " (" + o.reason + ")"
}

// counts renders a tally as "a 2, b 1", sorted by name.
func counts[K ~string, V int | int64](m map[K]V) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// answers renders the responses to an operation by status: "200 12, 409 3, none 2" (none: the
// connection was dropped or reset, or the client left first).
func answers(m map[int]int64) string {
	statuses := make([]int, 0, len(m))
	for s := range m {
		statuses = append(statuses, s)
	}
	slices.Sort(statuses)
	parts := make([]string, 0, len(m))
	for _, s := range statuses {
		name := fmt.Sprint(s)
		if s == 0 {
			name = "none"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, m[s]))
	}
	return strings.Join(parts, ", ")
}
