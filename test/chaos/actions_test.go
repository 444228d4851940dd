package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// action is what the humans (and the agent) do with one ToolCall.
type action string

const (
	approveValid action = "approve (valid)"
	// A valid approval of a call to the report Tool, which the admin edits once while its calls await
	// their decisions: the approvals decided before the edit run, the others cover a version that is
	// gone.
	approveEdited   action = "approve (valid, its Tool edited meanwhile)"
	approveExpired  action = "approve (already expired)"
	approveExpiring action = "approve (expiring during the run)"
	deny            action = "deny"
	noDecision      action = "no decision"
	providerCancel  action = "provider cancel"
	deletePending   action = "ToolCall deleted while pending"
	deleteAtOnce    action = "ToolCall deleted at once"
	// Calls to the lookup Tool, whose approval rules decide without a human.
	policyApprove action = "approved by a rule"
	policyDeny    action = "denied by a rule"
)

var mix = []struct {
	a      action
	weight int
}{
	{approveValid, 24}, {approveEdited, 8}, {approveExpired, 8}, {approveExpiring, 10}, {deny, 14},
	{noDecision, 10}, {providerCancel, 10}, {deletePending, 13}, {deleteAtOnce, 5},
	{policyApprove, 12}, {policyDeny, 4},
}

func pick(r *rand.Rand) action {
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	n := r.IntN(total)
	for _, m := range mix {
		if n < m.weight {
			return m.a
		}
		n -= m.weight
	}
	panic("unreachable")
}

// byHuman reports whether a human acts on the call's request at the provider (or deletes the ToolCall).
func (a action) byHuman() bool {
	switch a {
	case deleteAtOnce, noDecision, policyApprove, policyDeny:
		return false
	}
	return true
}

// Reproducibility. Every random choice of the run comes from a source derived from the printed seed:
// each ToolCall's plan (its action, waiting limit, the human's delay and an approval's validity) from a
// source of its own (seed and the call's index), the manager's lifetimes from the killer's, the Tool
// edits' timing from the editor's, and the provider's faults from its fault source (Options.FaultSeed).
// A source belongs to one goroutine. The same seed therefore replays the same sequence of choices.
// What it does not replay is timing: goroutine and process scheduling, how long a manager takes to
// start, which HTTP call of the manager each fault draw lands on (the draws are made in the order the
// calls arrive), the manager's own retry jitter, and so which calls a kill or a Tool edit catches
// mid-flight. A failure found with a seed is reproduced by running that seed until the schedule that
// exposes it comes round again, with the same plans.
func newSource(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// Streams of the run's sources, besides each call's (streamCalls + its index).
const (
	streamKiller = 0x51afd7ed558ccd
	streamEditor = 0x2545f4914f6cdd1d
	streamCalls  = 1 << 32
)

// maxHumanDelay is the longest a human waits, once a request exists, before acting on it.
const maxHumanDelay = 4 * time.Second

// Waiting limits are drawn from [minWaitingLimit, maxWaitingLimit], in whole seconds.
const (
	minWaitingLimit = 20 * time.Second
	maxWaitingLimit = 40 * time.Second
)

// plan is every random choice about one ToolCall, drawn when the agent creates it.
type plan struct {
	act   action
	limit time.Duration // spec.waitingLimit
	// delay is how long the human waits once the request exists.
	delay time.Duration
	// validity is how long an approve (expiring during the run) stays valid after the decision.
	validity time.Duration
}

// planFor draws call i's plan from its own source.
func planFor(seed uint64, i int) plan {
	r := newSource(seed, streamCalls+uint64(i))
	return plan{
		act:      pick(r),
		limit:    minWaitingLimit + time.Duration(r.IntN(int((maxWaitingLimit-minWaitingLimit)/time.Second)+1))*time.Second,
		delay:    time.Duration(r.IntN(int(maxHumanDelay/time.Millisecond))) * time.Millisecond,
		validity: 500*time.Millisecond + time.Duration(r.IntN(2500))*time.Millisecond,
	}
}

// call is one ToolCall of the run and what the test did with it.
type call struct {
	name string
	tool string // the Tool's name (issue-refund, export-report or lookup)
	args string // the arguments the agent created it with
	plan
	uid types.UID
	// created is the ToolCall's creationTimestamp (whole seconds, as the manager reads it).
	created time.Time
	// unsubmitted: the ToolCall ended before any submission reached the provider.
	unsubmitted bool

	// What the human did, written by its goroutine (humans.wait orders it before the audit).
	acted     time.Time // when the human acted
	decidedAt time.Time // the provider's decided_at of the human's own decision; zero if none was made
	decideErr error     // why the human's decision (or cancellation) was not made
	deletedAt time.Time // when the ToolCall was deleted (deletePending, deleteAtOnce)
	// goneAtOnce: a ToolCall deleted at once no longer existed right after the Delete, so no finalizer
	// held it. See report.bypassed.
	goneAtOnce bool
}

// humans run the humans' actions, each on a timer of its own, and let the audit wait for them all.
type humans struct {
	wg sync.WaitGroup
	// halfEdited is closed once half of the approve (valid, its Tool edited meanwhile) calls are
	// approved: the admin's cue to edit their Tool.
	halfEdited chan struct{}
	mu         sync.Mutex
	toEdit     int // approvals of those calls still to come before the cue
}

func newHumans(all []*call) *humans {
	hs := &humans{halfEdited: make(chan struct{})}
	for _, c := range all {
		if c.act == approveEdited {
			hs.toEdit++
		}
	}
	hs.toEdit = (hs.toEdit + 1) / 2
	return hs
}

// after runs act for c once its delay has passed.
func (hs *humans) after(ctx context.Context, h *th.Harness, c *call, id string) {
	hs.wg.Add(1)
	time.AfterFunc(c.delay, func() {
		defer hs.wg.Done()
		act(ctx, h, c, id)
		if c.act == approveEdited && !c.decidedAt.IsZero() {
			hs.mu.Lock()
			if hs.toEdit--; hs.toEdit == 0 {
				close(hs.halfEdited)
			}
			hs.mu.Unlock()
		}
	})
}

func (hs *humans) wait() { hs.wg.Wait() }

// act applies a call's human action at the provider (or deletes the ToolCall, as an agent would) and
// records what became of it.
func act(ctx context.Context, h *th.Harness, c *call, id string) {
	now := time.Now()
	c.acted = now
	var req provider.Request
	var err error
	switch c.act {
	case approveValid, approveEdited:
		exp := now.Add(time.Minute)
		req, err = h.Provider.Decide(id, provider.StatusApproved, "ok", &exp)
	case approveExpired:
		exp := now.Add(-time.Second)
		req, err = h.Provider.Decide(id, provider.StatusApproved, "ok", &exp)
	case approveExpiring:
		exp := now.Add(c.validity)
		req, err = h.Provider.Decide(id, provider.StatusApproved, "ok", &exp)
	case deny:
		req, err = h.Provider.Decide(id, provider.StatusDenied, "no", nil)
	case providerCancel:
		req, err = h.Provider.Cancel(id)
	case deletePending:
		c.deletedAt = now
		err = client.IgnoreNotFound(h.K8s.Delete(ctx, h.NewToolCall(c.name, "", "{}", time.Second, nil)))
		return
	}
	// A decision can lose the race with the deadline or the controller's own cancellation: that is
	// part of the run, and the audit explains the call's outcome by it.
	if err != nil {
		c.decideErr = err
		return
	}
	if d := req.Decision; d != nil && d.DecidedAt != nil && c.act != providerCancel {
		c.decidedAt = *d.DecidedAt
	}
}

// The provider's faults during the run: every kind the client must survive. Rules are tried in order
// and at most one fires per call.
//
// The first rules fire on the first matching calls (a count, no probability), so that every kind of
// fault on a cancellation happens in every run that sends at least four DELETEs, whatever the seed:
// the first two DELETEs meet a decision racing them (approved, then denied), so that they answer 409
// already_terminal, the third commits and loses its response, the fourth meets a 502 from an
// intermediary (plain text). The first long poll is held past the client's timeout. After those, the
// same faults fire at random.
func faultRules() []faults.Rule {
	return []faults.Rule{
		{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Count: 1, Decision: provider.StatusApproved},
		{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Count: 1, Decision: provider.StatusDenied},
		{Op: faults.OpCancel, Kind: faults.DropAfterCommit, Count: 1},
		{Op: faults.OpCancel, Kind: faults.Error5xx, Count: 1, Status: 502},
		{Op: faults.OpGet, Kind: faults.Delay, Count: 1, Delay: heldPoll},

		{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Probability: 0.08, Decision: provider.StatusApproved},
		{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Probability: 0.04, Decision: provider.StatusDenied},
		{Op: faults.OpCancel, Kind: faults.DropAfterCommit, Probability: 0.08},
		{Op: faults.OpCancel, Kind: faults.Error5xx, Probability: 0.06, Status: 502},
		{Op: faults.OpAny, Kind: faults.Error5xx, Probability: 0.06, Status: 503},
		{Op: faults.OpSubmit, Kind: faults.DropAfterCommit, Probability: 0.08},
		{Op: faults.OpGet, Kind: faults.Delay, Probability: 0.02, Delay: heldPoll},
		{Op: faults.OpAny, Kind: faults.Reset, Probability: 0.04},
		{Op: faults.OpAny, Kind: faults.RateLimit, Probability: 0.04, RetryAfter: time.Second},
	}
}

// heldPoll is a delay fault's hold on a long poll: past the client's bound on one (the manager's
// --poll-wait of 2s plus 10s), so the manager gives up on the read and retries.
const heldPoll = 13 * time.Second

// raceFirstCancels is how many DELETEs the counted rules above need to have fired each of them.
const raceFirstCancels = 4

// unfinishedCalls returns the names of the ToolCalls that exist and are not terminal (a ToolCall
// not in it ended or is gone); nil if they cannot be listed now.
func unfinishedCalls(ctx context.Context, h *th.Harness) map[string]bool {
	list := &tg.ToolCallList{}
	if err := h.K8s.List(ctx, list, client.InNamespace(h.NS)); err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, tc := range list.Items {
		if !tc.Status.Phase.IsTerminal() {
			out[tc.Name] = true
		}
	}
	return out
}

func simulateKubelet(ctx context.Context, h *th.Harness) {
	done := map[string]bool{}
	pace := time.NewTicker(200 * time.Millisecond) // the kubelet's own pace
	defer pace.Stop()
	for ctx.Err() == nil {
		jobs := &batchv1.JobList{}
		if err := h.K8s.List(ctx, jobs, client.InNamespace(h.NS)); err == nil {
			for _, j := range jobs.Items {
				if !done[j.Name] {
					if err := th.FinishJob(ctx, h.K8s, h.NS, j.Name, true, "refunded"); err == nil {
						done[j.Name] = true
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-pace.C:
		}
	}
}

func unfinished(ctx context.Context, h *th.Harness, all []*call) []string {
	var out []string
	for _, c := range all {
		tc := &tg.ToolCall{}
		err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: c.name}, tc)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			out = append(out, c.name+": "+err.Error())
		case !tc.DeletionTimestamp.IsZero():
			out = append(out, c.name+": being deleted")
		case !tc.Status.Phase.IsTerminal():
			out = append(out, fmt.Sprintf("%s: %s", c.name, tc.Status.Phase))
		}
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
