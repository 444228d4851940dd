package chaos

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// Safety invariants: nothing runs without a valid approval, nothing twice, no outcome misreported.
const (
	invNotTerminal   = "ToolCalls that never reached a terminal phase"
	invUnapprovedJob = "Jobs for non-approved or expired approvals"
	invMultiJob      = "ToolCalls with more than one Job"
	invTimeoutDenied = "Denied ToolCalls whose request the provider holds other than denied"
	invDuplicate     = "duplicate provider requests per ToolCall UID"
	invJobLost       = "Succeeded ToolCalls without their Job"
	invWrongVersion  = "Jobs for a Tool version nobody approved"
	invPolicyAsked   = "provider requests for calls a rule decided"
	invDeletedRan    = "Jobs for ToolCalls deleted before anyone approved them"
	invNotProviders  = "ToolCalls whose recorded decision is not the one the provider holds (409 races included)"
)

// Liveness invariants: what had time to run ran, the rest is explained, nothing is left for a human.
const (
	invNotLive       = "valid approvals decided with time to run that did not succeed"
	invUnexplained   = "approvals that did not run for a reason their timing does not explain"
	invLeftPending   = "provider requests still pending once every ToolCall ended or was deleted"
	invNotCancelled  = "requests of ToolCalls deleted with time to cancel that ended other than cancelled or decided"
	invNothingToRun  = "runs with no valid approval decided with time to run (nothing proved)"
	invFewKills      = "manager kills short of the killer's schedule"
	invFaultsMissing = "fault kinds that never fired although the run made enough calls for them"
	invNoRace        = "runs whose DELETEs met no racing decision although the first ones are set to"
	invNoNotified    = "asynchronous runs with no notification delivered and recorded on a ToolCall (nothing proved)"
	invOrphaned      = "requests pending, or approved after the liveness bound, for ToolCalls that no longer exist"
	invNoCursor      = "runs in which no manager saved the position of withdrawn removals (Lease toolgate-gone-cursor), so none could replay the removals since a kill (nothing proved)"
)

var invariantOrder = []string{
	invNotTerminal, invUnapprovedJob, invMultiJob, invTimeoutDenied, invDuplicate, invJobLost, invWrongVersion,
	invPolicyAsked, invDeletedRan, invNotProviders,
	invNotLive, invUnexplained, invLeftPending, invNotCancelled, invNothingToRun, invFewKills, invFaultsMissing, invNoRace, invOrphaned,
	invNoNotified, invNoCursor,
	invNoReceipt, invBadReceipt, invTwoReceipts, invChainBroken, invReceiptCount,
}

// outcome is one ToolCall's end as the audit saw it.
type outcome struct {
	final  string // the final phase, or "deleted"
	reason string // status.reason ("" once deleted)
	// left is the time the call still had before its approval limit when the human (or a rule)
	// decided; decided is false when nobody did.
	left    time.Duration
	decided bool
	// expl explains an approval (valid, or a rule's) that did not run; "" for other calls.
	expl string
	// toJob is how long the Job came after the decision (to the second), for approvals that ran.
	toJob time.Duration
	ran   bool
}

type report struct {
	// bound is the liveness bound (liveBound) of the run, starts its managers' measured starts.
	bound   time.Duration
	starts  string
	variant variant
	seed    uint64
	kills   int
	window  time.Duration
	edits   int
	calls   int
	// outcomes[action][final phase or "deleted"]
	outcomes map[action]map[string]int
	// ends[name]: each ToolCall's outcome.
	ends map[string]outcome
	all  []*call
	// invariant name -> offending ToolCalls (or figures)
	bad      map[string][]string
	requests int
	// unsubmitted counts the ToolCalls that ended before any submission reached the provider.
	unsubmitted int
	// races counts the requests a decision racing a DELETE decided; cancelled those a DELETE cancelled.
	races, cancelled int
	// racesLeft counts the counted decide_before_cancel rules that had met no pending request by the
	// audit (each is kept for the next DELETE until one does).
	racesLeft int
	// bypassed are the requests submitted for a ToolCall deleted at once that the apiserver removed
	// although the manager's acceptance had just given it its finalizer: a Delete that read the
	// ToolCall before the finalizer was added removes it without looking again (the registry checks
	// finalizers once, the storage's conditional delete only preconditions), so the manager, whose
	// acceptance write succeeded, submits for a ToolCall that is gone, and withdraws the request when
	// its status write fails NotFound or its watch shows the removal (or, after a kill, the next
	// leader's replay does). The report lists them; they are held to every invariant.
	bypassed []string
	stats    reference.Stats
	// notified counts the ToolCalls left at the end with a notification recorded (asynchronous mode).
	notified int
	// receiptTally counts the receipts checked (receipts_test.go).
	receiptTally receiptTally
}

func (r *report) violations() map[string][]string {
	out := map[string][]string{}
	for k, v := range r.bad {
		if len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

func (r *report) flag(inv, format string, args ...any) {
	r.bad[inv] = append(r.bad[inv], fmt.Sprintf(format, args...))
}

func audit(ctx context.Context, t *testing.T, h *th.Harness, all []*call, versions *toolVersions, bound time.Duration,
	keysOf func() (map[string]string, error)) *report {
	g := NewWithT(t)
	rep := &report{bound: bound, calls: len(all), all: all, outcomes: map[action]map[string]int{}, ends: map[string]outcome{}, bad: map[string][]string{}}
	for _, k := range invariantOrder {
		rep.bad[k] = nil
	}
	rep.goneCursor(ctx, h)
	keys, err := keysOf()
	g.Expect(err).NotTo(HaveOccurred())
	requests, err := h.Provider.List("")
	g.Expect(err).NotTo(HaveOccurred())
	rep.requests = len(requests)
	byID := map[string]provider.Request{}
	for _, req := range requests {
		byID[req.ID] = req
	}
	jobs := &batchv1.JobList{}
	g.Expect(h.K8s.List(ctx, jobs, client.InNamespace(h.NS))).To(Succeed())
	jobsOf := map[string][]batchv1.Job{}
	for _, j := range jobs.Items {
		uid := j.Labels[tg.LabelToolCallUID]
		jobsOf[uid] = append(jobsOf[uid], j)
	}
	uids := map[string]bool{}
	callOf := map[string]*call{}
	for _, c := range all {
		uids[string(c.uid)] = true
		if c.unsubmitted {
			rep.unsubmitted++
		}
		tc := &tg.ToolCall{}
		err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: c.name}, tc)
		exists := err == nil
		o := outcome{final: "deleted"}
		switch {
		case exists && !tc.Status.Phase.IsTerminal():
			rep.flag(invNotTerminal, "%s", c.name)
			o.final, o.reason = string(tc.Status.Phase), tc.Status.Reason
		case exists:
			o.final, o.reason = string(tc.Status.Phase), tc.Status.Reason
		case !apierrors.IsNotFound(err):
			g.Expect(err).NotTo(HaveOccurred())
		}
		if rep.outcomes[c.act] == nil {
			rep.outcomes[c.act] = map[string]int{}
		}
		rep.outcomes[c.act][o.final]++

		id, submitted := keys[string(c.uid)]
		req := byID[id]
		if submitted {
			callOf[id] = c
		}
		js := jobsOf[string(c.uid)]
		o.ran = len(js) > 0
		if len(js) > 1 {
			rep.flag(invMultiJob, "%s", c.name)
		}
		byRule := c.act == policyApprove || c.act == policyDeny
		if byRule && submitted {
			rep.flag(invPolicyAsked, "%s (request %s)", c.name, id)
		}
		for _, j := range js {
			if byRule {
				// Only the Approve rule may have approved it, recorded as the decision's source, and
				// the Job was created while that approval was valid.
				d := tc.Status.Decision
				if !exists || c.act != policyApprove || d == nil || d.Source != tg.DecisionSourcePolicy || d.Rule != "lookups" ||
					d.ExpiresAt == nil || !j.CreationTimestamp.Time.Before(d.ExpiresAt.Time) {
					rep.flag(invUnapprovedJob, "%s (action %s, decision %+v, job created %s)", c.name, c.act, d, j.CreationTimestamp.UTC().Format(time.RFC3339))
				}
			} else {
				d := req.Decision
				if !submitted || req.Status != provider.StatusApproved || d == nil || d.ExpiresAt == nil ||
					!j.CreationTimestamp.Time.Before(*d.ExpiresAt) {
					rep.flag(invUnapprovedJob, "%s (request %s, job created %s)", c.name, req.Status, j.CreationTimestamp.UTC().Format(time.RFC3339))
				}
			}
			// A deleted ToolCall never runs: a decision that raced its cancellation is the provider's
			// record, not a reason to start it.
			if c.act == deletePending || c.act == deleteAtOnce {
				rep.flag(invDeletedRan, "%s (request %s, job %s)", c.name, req.Status, j.Name)
			}
			// The Job runs the version of the Tool the call was accepted against, which is the one
			// the human (or the rule) approved.
			if problem := versions.check(j, tc, exists); problem != "" {
				rep.flag(invWrongVersion, "%s: %s", c.name, problem)
			}
		}
		if o.final == string(tg.PhaseSucceeded) && len(js) != 1 {
			rep.flag(invJobLost, "%s", c.name)
		}
		if o.final == string(tg.PhaseDenied) && req.Status != provider.StatusDenied {
			rep.flag(invTimeoutDenied, "%s (request %s, action %s)", c.name, req.Status, c.act)
		}
		// What the ToolCall says the provider decided is what the provider holds: a DELETE that met a
		// decision (409 already_terminal) is resolved to that decision.
		if d := tc.Status.Decision; exists && submitted && d != nil && d.Source != tg.DecisionSourcePolicy && d.Status != req.Status {
			rep.flag(invNotProviders, "%s: decision %s, the provider holds %s (action %s)", c.name, d.Status, req.Status, c.act)
		}
		rep.decisionTiming(c, tc, exists, req, &o, js, versions)
		rep.cancellation(ctx, h, c, submitted, req)
		rep.ends[c.name] = o
	}
	for _, req := range requests {
		if c := callOf[req.ID]; c != nil && c.goneAtOnce {
			// Removed by the apiserver despite the finalizer the acceptance had just added: the manager
			// withdraws the request when its status write finds the ToolCall gone, so such a request
			// is held to the same invariants as any other; the report lists them.
			rep.bypassed = append(rep.bypassed, fmt.Sprintf("%s (request %s %s)", c.name, req.ID, req.Status))
		}
		// Nobody waits for the request of a ToolCall that is gone: it is withdrawn, even when a
		// manager kill came between the removal and the withdrawal (the next leader replays the
		// removals since its predecessor's saved position), and no human decides it after the
		// manager had time to.
		if c := callOf[req.ID]; c != nil && !c.deletedAt.IsZero() {
			d := req.Decision
			if req.Status == provider.StatusPending ||
				(req.Status == provider.StatusApproved && d != nil && d.DecidedAt != nil && d.DecidedAt.After(c.deletedAt.Add(rep.bound))) {
				rep.flag(invOrphaned, "%s (%s): request %s %s, deleted at %s", c.name, c.act, req.ID, req.Status, c.deletedAt.UTC().Format("15:04:05.000"))
			}
		}
		if req.Status == provider.StatusPending {
			c := callOf[req.ID]
			who := "no ToolCall"
			if c != nil {
				who = fmt.Sprintf("%s (%s, %s %s)", c.name, c.act, rep.ends[c.name].final, rep.ends[c.name].reason)
			}
			rep.flag(invLeftPending, "request %s of %s, deadline %s", req.ID, who, req.DeadlineAt.UTC().Format(time.RFC3339))
		}
		if req.Status == provider.StatusCancelled {
			rep.cancelled++
		}
		if c := callOf[req.ID]; c != nil && (req.Status == provider.StatusApproved || req.Status == provider.StatusDenied) && c.decidedAt.IsZero() {
			rep.races++ // decided, but not by the human: by a decision racing a DELETE
		}
	}
	// One request per key, and every key a ToolCall's UID.
	seen := map[string]string{}
	for key, id := range keys {
		if !uids[key] {
			rep.flag(invDuplicate, "request %s has key %s, which is no ToolCall's UID", id, key)
		}
		if other, dup := seen[id]; dup {
			rep.flag(invDuplicate, "request %s has keys %s and %s", id, key, other)
		}
		seen[id] = key
	}
	if len(requests) != len(keys) {
		rep.flag(invDuplicate, "%d requests for %d keys", len(requests), len(keys))
	}
	rep.stats = h.Provider.Stats()
	for _, rule := range h.Provider.Faults().Rules() {
		if rule.Kind == faults.DecideBeforeCancel && rule.Count > 0 {
			rep.racesLeft++
		}
	}
	return rep
}

// decisionTiming records when the call was decided against its window, and checks that an approval
// with time to run ran and that any other approval that did not run ended for a reason its timing
// explains.
func (r *report) decisionTiming(c *call, tc *tg.ToolCall, exists bool, req provider.Request, o *outcome, js []batchv1.Job, versions *toolVersions) {
	decided := c.decidedAt
	if c.act == policyApprove && exists && tc.Status.Decision != nil && tc.Status.Decision.DecidedAt != nil {
		decided = tc.Status.Decision.DecidedAt.Time // the rule's decision, at acceptance
	}
	if !decided.IsZero() {
		o.decided, o.left = true, c.approvalLimit().Sub(decided)
		if len(js) > 0 {
			o.toJob = js[0].CreationTimestamp.Sub(decided.Truncate(time.Second))
		}
	}
	if !c.act.approval() {
		return
	}
	if !o.decided {
		o.expl = explNotDecided
		// A decision that raced a DELETE (the Tool's edit withdrawing the request) is the provider's,
		// and the call ends by it: a denial, or an approval the run gate refuses (ToolChanged).
		raceDenied := req.Status == provider.StatusDenied && o.reason == tg.ReasonDenied
		if o.final != string(tg.PhaseSucceeded) && !notDecidedReasons[o.reason] && !raceDenied {
			r.flag(invUnexplained, "%s (%s): not decided (%v), ended %s %s", c.name, c.act, c.decideErr, o.final, o.reason)
		}
		return
	}
	late := lateOf(c, c.tool, decided, versions, r.bound)
	o.expl = late.explanation()
	switch {
	case o.final == string(tg.PhaseSucceeded):
	case late.timeToRun():
		r.flag(invNotLive, "%s (%s): decided %s before its approval limit, ended %s %s", c.name, c.act, o.left.Round(time.Millisecond), o.final, o.reason)
	case !late.allowedReasons()[o.reason]:
		r.flag(invUnexplained, "%s (%s): %s, ended %s %s", c.name, c.act, o.expl, o.final, o.reason)
	}
}

// cancellation checks that the request of a ToolCall deleted with time to cancel it ended cancelled,
// or decided by a decision that raced the DELETE: not pending, and not expired at its deadline.
func (r *report) cancellation(ctx context.Context, h *th.Harness, c *call, submitted bool, req provider.Request) {
	if c.deletedAt.IsZero() || !submitted || req.Status != provider.StatusExpired {
		return
	}
	if req.DeadlineAt.Sub(c.deletedAt) >= r.bound {
		r.flag(invNotCancelled, "%s: deleted at %s, %s before its request's deadline, which expired it; its events: %s",
			c.name, c.deletedAt.UTC().Format("15:04:05.000"), req.DeadlineAt.Sub(c.deletedAt).Round(time.Millisecond), eventsOf(ctx, h, c.name))
	}
}

// goneCursor checks that the managers kept the position in the ToolCall watch up to which every
// removal despite the finalizer was withdrawn, without which a removal between a kill and the next
// start is never replayed.
func (r *report) goneCursor(ctx context.Context, h *th.Harness) {
	lease := &coordinationv1.Lease{}
	if err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "toolgate-gone-cursor"}, lease); err != nil {
		r.flag(invNoCursor, "reading the Lease: %v", err)
		return
	}
	if _, err := strconv.ParseUint(lease.Annotations[tg.AnnotationGoneCursor], 10, 64); err != nil {
		r.flag(invNoCursor, "annotation %s: %v", tg.AnnotationGoneCursor, err)
	}
}

// eventsOf renders the events about a ToolCall (they outlive it), for a violation's message.
func eventsOf(ctx context.Context, h *th.Harness, name string) string {
	list := &eventsv1.EventList{}
	if err := h.K8s.List(ctx, list, client.InNamespace(h.NS)); err != nil {
		return err.Error()
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].EventTime.Before(&list.Items[j].EventTime) })
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "ToolCall" && e.Regarding.Name == name {
			out = append(out, fmt.Sprintf("%s %s %s: %s", e.EventTime.UTC().Format("15:04:05.000"), e.Type, e.Reason, e.Note))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " | ")
}

// evidence checks that the run did what it is meant to prove things under: kills, faults of every
// kind (on deliveries too, in asynchronous mode), races between decisions and cancellations, valid
// approvals with time to run, and in asynchronous mode notifications delivered and recorded.
func (r *report) evidence(rules []faults.Rule, duringChaos reference.Stats) {
	if want := minKills(r.window); r.kills < want || r.kills == 0 {
		r.flag(invFewKills, "%d kills in %s, at least %d expected (a kill at most every %s)", r.kills, r.window.Round(time.Second), max(want, 1), *killMax)
	}
	expected := expectedFaults(rules, duringChaos)
	kinds := make([]string, 0, len(expected))
	for k := range expected {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if duringChaos.Faults[faults.Kind(k)] == 0 {
			r.flag(invFaultsMissing, "%s never fired (%d submits, %d gets, %d cancels, %d delivery attempts)", k,
				duringChaos.Submits, duringChaos.Gets, duringChaos.Cancels, duringChaos.DeliveryAttempts)
		}
	}
	if r.variant.async && (duringChaos.Delivered == 0 || r.notified == 0) {
		r.flag(invNoNotified, "%d notifications delivered during the chaos window, %d ToolCalls with one recorded", duringChaos.Delivered, r.notified)
	}
	if duringChaos.Cancels >= raceFirstCancels && r.races == 0 {
		// The figures say which side to look at: DELETEs that met no pending request (the provider's
		// counts), or races the provider made that the audit did not find.
		r.flag(invNoRace, "%d DELETEs, no request decided by a racing decision; the provider's counts by the audit: %d pending requests cancelled, %d decided by a racing decision, %d counted races still waiting for a pending request, DELETE answers %s",
			duringChaos.Cancels, r.stats.Cancellations, r.stats.RacedDecisions, r.racesLeft, answers(r.stats.Responses[faults.OpCancel]))
	}
	timeToRun, valid := 0, 0
	for _, c := range r.all {
		if c.act == approveValid {
			valid++
			if r.ends[c.name].expl == explTimeToRun {
				timeToRun++
			}
		}
	}
	if valid >= 5 && timeToRun == 0 {
		r.flag(invNothingToRun, "none of %d valid approvals was decided %s before its approval limit and its Tool's edit", valid, r.bound)
	}
}
