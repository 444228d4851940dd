// Package chaos runs many ToolCalls through Toolgate while the approvals provider misbehaves and the
// manager process is killed (SIGKILL) and restarted every few seconds, some calls are decided by a
// Tool's approval rules and an admin keeps editing the Tools, then audits the end state against the
// guarantees in docs/reliability.md.
//
// It runs once per reference provider profile (-chaos.profiles, default both; side by side unless
// -chaos.parallel=false, which the full run sets so that each has the control plane to itself): "full"
// (arguments_sha256, problem+json errors, the cancel endpoint) and "seed" (exactly the seed's HTTP
// example: no arguments_sha256, plain-text errors, no cancel endpoint), and prints the invariant table
// of each. The default size is the short run `make test` includes. The full run:
//
//	go test ./test/chaos/ -run TestChaos -v -args -chaos.calls=500
//
// (`make chaos`). Everything runs on loopback: envtest's apiserver, the reference provider, the manager.
package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
	th "toolgate.dev/toolgate/test/testharness"
)

var (
	calls    = flag.Int("chaos.calls", 80, "ToolCalls in the chaos run")
	seed     = flag.Uint64("chaos.seed", 0, "random seed (0: from the clock; the seed is printed)")
	killMin  = flag.Duration("chaos.kill-min", 2*time.Second, "shortest manager lifetime between kills")
	killMax  = flag.Duration("chaos.kill-max", 5*time.Second, "longest manager lifetime between kills")
	spreadOf = flag.Duration("chaos.spread", 0, "time over which ToolCalls are created (0: 40ms per call, at least 5s)")
	profiles = flag.String("chaos.profiles", "full,seed", "reference provider profiles to run against, comma-separated (full, seed)")
	parallel = flag.Bool("chaos.parallel", true, "run the profiles side by side (they share the control plane) rather than one after the other")
)

var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }

// action is what the humans (and the agent) do with one ToolCall.
type action string

const (
	approveValid    action = "approve (valid)"
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
	{approveValid, 30}, {approveExpired, 8}, {approveExpiring, 10}, {deny, 14},
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

// The provider's faults during the run: every kind the client must survive.
func faultRules() []reference.FaultRule {
	return []reference.FaultRule{
		{Op: reference.OpAny, Kind: reference.FaultError5xx, Probability: 0.06, Status: 503},
		{Op: reference.OpSubmit, Kind: reference.FaultDropAfterCommit, Probability: 0.08},
		{Op: reference.OpCancel, Kind: reference.FaultDropAfterCommit, Probability: 0.08},
		{Op: reference.OpGet, Kind: reference.FaultDelay, Probability: 0.02, Delay: 13 * time.Second}, // past the client's 12s
		{Op: reference.OpAny, Kind: reference.FaultReset, Probability: 0.04},
		{Op: reference.OpAny, Kind: reference.FaultRateLimit, Probability: 0.04, RetryAfter: time.Second},
	}
}

// Waiting limits are drawn from [20s, maxWaitingLimit].
const maxWaitingLimit = 40 * time.Second

type call struct {
	name string
	// unsubmitted: the ToolCall ended before any submission reached the provider.
	unsubmitted bool
	uid         types.UID
	act         action
	decided     time.Time // when the test acted at the provider
}

func TestChaos(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	for _, name := range strings.Split(*profiles, ",") {
		profile, err := reference.ParseProfile(strings.TrimSpace(name))
		if err != nil {
			t.Fatalf("-chaos.profiles: %v", err)
		}
		t.Run(string(profile), func(t *testing.T) {
			if *parallel {
				t.Parallel()
			}
			runChaos(t, profile, s)
		})
	}
}

func runChaos(t *testing.T, profile reference.Profile, s uint64) {
	g := NewWithT(t)
	r := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	t.Logf("chaos: %d ToolCalls, seed %d, provider profile %s", *calls, s, profile)

	h := th.New(t, env, th.WithoutManager(), th.WithProfile(profile), th.WithProvider(func(o *reference.Options) { o.FaultSeed = s }))
	h.Opts.CancelGiveUp = 20 * time.Second
	versions := newToolVersions()
	versions.record(h.Tool("issue-refund", "issue_refund", th.RefundSchema, versions.mark))
	versions.record(h.Tool("lookup", "lookup_order", "", versions.mark, func(t *tg.Tool) {
		t.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{
			{Name: "never-blocked", Expression: `has(arguments.blocked) && arguments.blocked`, Action: tg.ActionDeny},
			{Name: "lookups", Expression: `true`, Action: tg.ActionApprove},
		}}
	}))
	g.Expect(h.Provider.Faults().Set(faultRules()...)).To(Succeed())

	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	// The manager: killed and restarted until the chaos window ends.
	var kills int
	proc := h.StartProcess()
	chaosOver := make(chan struct{})
	managerDone := make(chan struct{})
	killer := rand.New(rand.NewPCG(s+1, s^0x51afd7ed558ccd)) // its own source: r belongs to the test goroutine
	go func() {
		defer close(managerDone)
		for {
			life := *killMin + time.Duration(killer.Int64N(int64(*killMax-*killMin)+1))
			select {
			case <-chaosOver:
				return
			case <-time.After(life):
			}
			proc.Kill()
			kills++
			proc = h.StartProcess()
		}
	}()

	// The kubelet: every Job created runs and succeeds.
	go simulateKubelet(ctx, h)

	// The agent: creates the ToolCalls over the spread, deleting some at once.
	spread := *spreadOf
	if spread == 0 {
		spread = max(5*time.Second, time.Duration(*calls)*40*time.Millisecond)
	}
	// The admin: edits the rules' Tool every few seconds (a new generation each time) until the chaos
	// window ends, and the refund Tool once, after the agent's last call, while the slowest calls (the
	// manager down, the provider failing) still await their decisions: most are approved before the
	// edit and run; the others were approved for a version that is gone.
	editor := rand.New(rand.NewPCG(s+2, s^0x2545f4914f6cdd1d))
	editsDone := make(chan struct{})
	go func() {
		defer close(editsDone)
		refundEdit := time.After(spread + 2*time.Second + time.Duration(editor.Int64N(int64(4*time.Second))))
		for {
			select {
			case <-chaosOver:
				return
			case <-refundEdit:
				versions.edit(ctx, h, "issue-refund")
				refundEdit = nil
			case <-time.After(2*time.Second + time.Duration(editor.Int64N(int64(4*time.Second)))):
				versions.edit(ctx, h, "lookup")
			}
		}
	}()
	all := make([]*call, *calls)
	var mu sync.Mutex
	pace := time.NewTicker(spread / time.Duration(*calls)) // the agent's request rate
	defer pace.Stop()
	for i := range all {
		<-pace.C
		c := &call{name: fmt.Sprintf("call-%04d", i), act: pick(r)}
		limit := 20*time.Second + time.Duration(r.IntN(int(maxWaitingLimit/time.Second)-19))*time.Second
		tool, args := "issue_refund", fmt.Sprintf(`{"payment_id":"p-%d","amount":%d,"currency":"GBP"}`, i, 1+i)
		switch c.act {
		case policyApprove:
			tool, args = "lookup_order", fmt.Sprintf(`{"order":"o-%d"}`, i)
		case policyDeny:
			tool, args = "lookup_order", fmt.Sprintf(`{"order":"o-%d","blocked":true}`, i)
		}
		tc := h.ToolCall(c.name, tool, args, limit, nil)
		c.uid = tc.UID
		all[i] = c
		if c.act == deleteAtOnce {
			g.Expect(client.IgnoreNotFound(h.K8s.Delete(ctx, tc))).To(Succeed())
		}
	}

	lastCreated := time.Now()

	// The humans: act on each request once it exists, after a random delay.
	acted := map[types.UID]bool{}
	byUID := map[types.UID]*call{}
	for _, c := range all {
		byUID[c.uid] = c
		if c.act == deleteAtOnce || c.act == noDecision || c.act == policyApprove || c.act == policyDeny {
			acted[c.uid] = true
		}
	}
	g.Eventually(func() int {
		keys, err := h.Provider.Keys()
		if err != nil {
			return -1
		}
		waiting := 0
		for _, c := range all {
			if acted[c.uid] {
				continue
			}
			id, ok := keys[string(c.uid)]
			if !ok && endedUnsubmitted(ctx, h, c) {
				// Its submissions failed until its limit (faults, kills): no human can act on it. The
				// audit still checks its outcome; the report counts it.
				acted[c.uid] = true
				c.unsubmitted = true
				continue
			}
			if !ok {
				waiting++
				continue
			}
			acted[c.uid] = true
			c := c
			delay := time.Duration(r.IntN(4000)) * time.Millisecond
			time.AfterFunc(delay, func() {
				mu.Lock()
				c.decided = time.Now()
				mu.Unlock()
				act(ctx, h, c, id)
			})
		}
		return waiting
	}).WithTimeout(2*time.Minute).WithPolling(100*time.Millisecond).Should(BeZero(), "ToolCalls whose approval request never appeared")

	// The chaos window lasts until every waiting limit has passed; then the manager is left running.
	<-time.After(time.Until(lastCreated.Add(maxWaitingLimit + 5*time.Second)))
	close(chaosOver)
	<-managerDone
	<-editsDone
	h.Provider.Faults().Clear()
	t.Logf("chaos window over after %d kills and %d Tool edits; letting the last manager converge", kills, versions.edits)

	// Convergence: every ToolCall terminal or gone.
	g.Eventually(func() []string {
		return unfinished(ctx, h, all)
	}).WithTimeout(3*time.Minute).WithPolling(500*time.Millisecond).Should(BeEmpty(), func() string {
		return "manager log tail:\n" + tail(proc.Log(), 40)
	})

	if profile == reference.ProfileSeed {
		// Without a cancel endpoint a withdrawn request ends at its provider deadline: the audit
		// looks once every deadline has passed.
		awaitDeadlines(t, h)
	}
	rep := audit(ctx, t, h, all, versions)
	rep.kills = kills
	rep.edits = versions.edits
	rep.seed = s
	rep.profile = profile
	rep.print(t)
	g.Expect(rep.violations()).To(BeEmpty(), "invariant violations")
}

// act applies a call's human action at the provider (or deletes the ToolCall, as an agent would).
func act(ctx context.Context, h *th.Harness, c *call, id string) {
	now := time.Now()
	var err error
	switch c.act {
	case approveValid:
		exp := now.Add(time.Minute)
		_, err = h.Provider.Decide(id, provider.StatusApproved, "ok", &exp)
	case approveExpired:
		exp := now.Add(-time.Second)
		_, err = h.Provider.Decide(id, provider.StatusApproved, "ok", &exp)
	case approveExpiring:
		exp := now.Add(500*time.Millisecond + time.Duration(rand.IntN(2500))*time.Millisecond)
		_, err = h.Provider.Decide(id, provider.StatusApproved, "ok", &exp)
	case deny:
		_, err = h.Provider.Decide(id, provider.StatusDenied, "no", nil)
	case providerCancel:
		_, err = h.Provider.Cancel(id)
	case deletePending:
		err = client.IgnoreNotFound(h.K8s.Delete(ctx, h.NewToolCall(c.name, "", "{}", time.Second, nil)))
	}
	// A decision can lose the race with the deadline (or the controller's own cancellation): that is
	// part of the run, not an error.
	_ = err
}

// endedUnsubmitted reports whether c's ToolCall is terminal or gone while the provider has no request
// for it.
func endedUnsubmitted(ctx context.Context, h *th.Harness, c *call) bool {
	tc := &tg.ToolCall{}
	err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: c.name}, tc)
	return apierrors.IsNotFound(err) || (err == nil && tc.Status.Phase.IsTerminal())
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

type report struct {
	profile reference.Profile
	seed    uint64
	kills   int
	edits   int
	calls   int
	// outcomes[action][final phase or "deleted"]
	outcomes map[action]map[string]int
	// invariant name -> offending ToolCalls
	bad      map[string][]string
	order    []string
	requests int
	// unsubmitted counts the ToolCalls that ended before any submission reached the provider.
	unsubmitted int
	faults      map[reference.FaultKind]int64
	replays     int64
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

const (
	invNotTerminal   = "ToolCalls that never reached a terminal phase"
	invUnapprovedJob = "Jobs for non-approved or expired approvals"
	invMultiJob      = "ToolCalls with more than one Job"
	invTimeoutDenied = "timeouts reported as Denied"
	invLeftPending   = "provider requests left pending after their ToolCall was deleted or ended"
	invDuplicate     = "duplicate provider requests per ToolCall UID"
	invJobLost       = "Succeeded ToolCalls without their Job"
	invWrongVersion  = "Jobs for a Tool version nobody approved"
	invPolicyAsked   = "provider requests for calls a rule decided"
)

func audit(ctx context.Context, t *testing.T, h *th.Harness, all []*call, versions *toolVersions) *report {
	g := NewWithT(t)
	rep := &report{calls: len(all), outcomes: map[action]map[string]int{}, bad: map[string][]string{},
		order: []string{invNotTerminal, invUnapprovedJob, invMultiJob, invTimeoutDenied, invLeftPending, invDuplicate, invJobLost, invWrongVersion, invPolicyAsked}}
	for _, k := range rep.order {
		rep.bad[k] = nil
	}
	keys, err := h.Provider.Keys()
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
	for _, c := range all {
		uids[string(c.uid)] = true
		if c.unsubmitted {
			rep.unsubmitted++
		}
		tc := &tg.ToolCall{}
		err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: c.name}, tc)
		final := "deleted"
		switch {
		case err == nil && !tc.Status.Phase.IsTerminal():
			rep.bad[invNotTerminal] = append(rep.bad[invNotTerminal], c.name)
			final = string(tc.Status.Phase)
		case err == nil:
			final = string(tc.Status.Phase)
		case !apierrors.IsNotFound(err):
			g.Expect(err).NotTo(HaveOccurred())
		}
		if rep.outcomes[c.act] == nil {
			rep.outcomes[c.act] = map[string]int{}
		}
		rep.outcomes[c.act][final]++

		id, submitted := keys[string(c.uid)]
		req := byID[id]
		js := jobsOf[string(c.uid)]
		if len(js) > 1 {
			rep.bad[invMultiJob] = append(rep.bad[invMultiJob], c.name)
		}
		byRule := c.act == policyApprove || c.act == policyDeny
		if byRule && submitted {
			rep.bad[invPolicyAsked] = append(rep.bad[invPolicyAsked], fmt.Sprintf("%s (request %s)", c.name, id))
		}
		for _, j := range js {
			if byRule {
				// Only the Approve rule may have approved it, recorded as the decision's source, and
				// the Job was created while that approval was valid.
				d := tc.Status.Decision
				if err != nil || c.act != policyApprove || d == nil || d.Source != tg.DecisionSourcePolicy || d.Rule != "lookups" ||
					d.ExpiresAt == nil || !j.CreationTimestamp.Time.Before(d.ExpiresAt.Time) {
					rep.bad[invUnapprovedJob] = append(rep.bad[invUnapprovedJob], fmt.Sprintf("%s (action %s, decision %+v, job created %s)", c.name, c.act, d, j.CreationTimestamp.UTC().Format(time.RFC3339)))
				}
			} else {
				d := req.Decision
				if !submitted || req.Status != provider.StatusApproved || d == nil || d.ExpiresAt == nil ||
					!j.CreationTimestamp.Time.Before(*d.ExpiresAt) {
					rep.bad[invUnapprovedJob] = append(rep.bad[invUnapprovedJob], fmt.Sprintf("%s (request %s, job created %s)", c.name, req.Status, j.CreationTimestamp.UTC().Format(time.RFC3339)))
				}
			}
			// The Job runs the version of the Tool the call was accepted against, which is the one
			// the human (or the rule) approved.
			if problem := versions.check(j, tc, err == nil); problem != "" {
				rep.bad[invWrongVersion] = append(rep.bad[invWrongVersion], c.name+": "+problem)
			}
		}
		if final == string(tg.PhaseSucceeded) && len(js) != 1 {
			rep.bad[invJobLost] = append(rep.bad[invJobLost], c.name)
		}
		if final == string(tg.PhaseDenied) && (req.Status != provider.StatusDenied || c.act != deny) {
			rep.bad[invTimeoutDenied] = append(rep.bad[invTimeoutDenied], fmt.Sprintf("%s (request %s, action %s)", c.name, req.Status, c.act))
		}
		if submitted && req.Status == provider.StatusPending {
			rep.bad[invLeftPending] = append(rep.bad[invLeftPending], fmt.Sprintf("%s (%s)", c.name, final))
		}
	}
	// One request per key, and every key a ToolCall's UID.
	seen := map[string]string{}
	for key, id := range keys {
		if !uids[key] {
			rep.bad[invDuplicate] = append(rep.bad[invDuplicate], "request "+id+" has key "+key+", which is no ToolCall's UID")
		}
		if other, dup := seen[id]; dup {
			rep.bad[invDuplicate] = append(rep.bad[invDuplicate], "request "+id+" has keys "+key+" and "+other)
		}
		seen[id] = key
	}
	if len(requests) != len(keys) {
		rep.bad[invDuplicate] = append(rep.bad[invDuplicate], fmt.Sprintf("%d requests for %d keys", len(requests), len(keys)))
	}
	st := h.Provider.Stats()
	rep.faults = map[reference.FaultKind]int64{}
	for k, v := range st.Faults {
		rep.faults[k] = v
	}
	rep.replays = st.Replays
	return rep
}

func (r *report) print(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nChaos run against the %s provider profile: %d ToolCalls, %d manager kills (SIGKILL), %d Tool edits, seed %d, %d provider requests, %d replayed submissions\n", r.profile, r.calls, r.kills, r.edits, r.seed, r.requests, r.replays)
	kinds := make([]string, 0, len(r.faults))
	for k, v := range r.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "Faults injected: %s\n", strings.Join(kinds, ", "))
	fmt.Fprintf(&b, "ToolCalls that ended before any submission reached the provider (no human could act): %d\n\n", r.unsubmitted)
	fmt.Fprintf(&b, "| Invariant | Count |\n|---|---|\n")
	for _, k := range r.order {
		fmt.Fprintf(&b, "| %s | %d |\n", k, len(r.bad[k]))
	}
	fmt.Fprintf(&b, "\n| Action | ToolCalls | Outcomes |\n|---|---|---|\n")
	for _, m := range mix {
		o := r.outcomes[m.a]
		n := 0
		parts := []string{}
		for phase, c := range o {
			n += c
			parts = append(parts, fmt.Sprintf("%s %d", phase, c))
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "| %s | %d | %s |\n", m.a, n, strings.Join(parts, ", "))
	}
	for _, k := range r.order {
		for _, v := range r.bad[k] {
			fmt.Fprintf(&b, "VIOLATION %s: %s\n", k, v)
		}
	}
	t.Log(b.String())
}

// awaitDeadlines returns once the provider has no pending request, or once the latest deadline of
// those pending has passed by a few seconds (the audit then reports what is left).
func awaitDeadlines(t *testing.T, h *th.Harness) {
	pending, err := h.Provider.List(provider.StatusPending)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var latest time.Time
	for _, req := range pending {
		if req.DeadlineAt.After(latest) {
			latest = req.DeadlineAt
		}
	}
	if len(pending) == 0 {
		return
	}
	t.Logf("%d requests pending after convergence, the last deadline at %s", len(pending), latest.UTC().Format(time.RFC3339))
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for until := latest.Add(5 * time.Second); time.Now().Before(until); <-poll.C {
		if left, err := h.Provider.List(provider.StatusPending); err == nil && len(left) == 0 {
			return
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// versionEnv marks each version of a Tool's Job template (an env var of its container), so that a Job
// says which version of the Tool it was built from independently of what the controller records.
const versionEnv = "CHAOS_TOOL_VERSION"

// templateMark is the mark of a Job template; "" when it has none.
func templateMark(spec *corev1.PodSpec) string {
	for _, e := range spec.Containers[0].Env {
		if e.Name == versionEnv {
			return e.Value
		}
	}
	return ""
}

// setMark sets the mark of a Job template.
func setMark(spec *corev1.PodSpec, mark string) {
	c := &spec.Containers[0]
	for i := range c.Env {
		if c.Env[i].Name == versionEnv {
			c.Env[i].Value = mark
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: versionEnv, Value: mark})
}

// toolVersions follows the Tools' edits: for each Tool, the template mark of each generation.
type toolVersions struct {
	mu    sync.Mutex
	marks map[string]map[int64]string // Tool name -> generation -> mark
	edits int
}

func newToolVersions() *toolVersions {
	return &toolVersions{marks: map[string]map[int64]string{}}
}

// mark gives a new Tool's template its first mark.
func (v *toolVersions) mark(t *tg.Tool) {
	setMark(&t.Spec.JobTemplate.Spec.Template.Spec, t.Name+"-1")
}

// record remembers the mark of the Tool's current generation.
func (v *toolVersions) record(t *tg.Tool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.marks[t.Name] == nil {
		v.marks[t.Name] = map[int64]string{}
	}
	v.marks[t.Name][t.Generation] = templateMark(&t.Spec.JobTemplate.Spec.Template.Spec)
}

// edit changes the Tool's Job template (a new mark, so a new generation) and records it.
func (v *toolVersions) edit(ctx context.Context, h *th.Harness, name string) {
	t := &tg.Tool{}
	if err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: name}, t); err != nil {
		return
	}
	v.mu.Lock()
	v.edits++
	n := v.edits
	v.mu.Unlock()
	setMark(&t.Spec.JobTemplate.Spec.Template.Spec, fmt.Sprintf("%s-%d", name, n+1))
	if err := h.K8s.Update(ctx, t); err != nil {
		return // a conflict: the next edit tries again
	}
	v.record(t)
}

// check says what is wrong with the version a Job was built from: its template must be the one of the
// generation the Job names, which must be the generation its ToolCall (when it still exists) was
// accepted against.
func (v *toolVersions) check(j batchv1.Job, tc *tg.ToolCall, tcExists bool) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	gen, err := strconv.ParseInt(j.Annotations[tg.AnnotationToolGeneration], 10, 64)
	if err != nil {
		return fmt.Sprintf("Job %s does not say which generation of the Tool it was built from", j.Name)
	}
	mark := templateMark(&j.Spec.Template.Spec)
	var tool string
	for name, marks := range v.marks {
		for _, m := range marks {
			if m == mark {
				tool = name
			}
		}
	}
	if want, ok := v.marks[tool][gen]; !ok || want != mark {
		return fmt.Sprintf("Job %s was built from template %q, which is not generation %d of Tool %s (%q)", j.Name, mark, gen, tool, want)
	}
	if tcExists && tc.Annotations[tg.AnnotationToolGeneration] != strconv.FormatInt(gen, 10) {
		return fmt.Sprintf("Job %s was built from generation %d, the ToolCall was accepted against %s", j.Name, gen, tc.Annotations[tg.AnnotationToolGeneration])
	}
	return ""
}
