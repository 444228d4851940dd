// Package chaos runs many ToolCalls through Toolgate while the approvals provider misbehaves and the
// manager process is killed (SIGKILL) and restarted every few seconds, some calls are decided by a
// Tool's approval rules and an admin keeps editing the Tools, then audits the end state against the
// guarantees in docs/reliability.md: safety (nothing runs without a valid approval, nothing twice,
// nothing reported as what it was not) and liveness (what had time to run ran, everything else is
// explained, every abandoned request ends cancelled at the provider).
//
// It runs once per entry of -chaos.profiles (default full,seed; make chaos adds async; one after the
// other unless -chaos.parallel, which shares the control plane and, on two cores, the CPU): a
// reference provider profile, "full" (ErrorResponse bodies, agent_reasoning and context echoed) or
// "seed" (the fewest fields AAP allows, plain-text errors), both AAP v1 providers that cancel with
// DELETE, in synchronous mode (long polls), or with -async ("async" is full-async) in asynchronous
// mode: notifications delivered to the manager's webhook receiver, under delivery faults (see
// async_test.go). It prints the tables of each. The default size is the short run `make test`
// includes. The full run:
//
//	go test ./test/chaos/ -run TestChaos -v -args -chaos.calls=500
//
// (`make chaos`). Everything runs on loopback: envtest's apiserver, the reference provider, the manager.
// A run is reproducible from its printed seed (-chaos.seed) as far as its choices go: see newSource.
//
// The files: chaos_test.go runs it, actions_test.go is what the agent, the humans and the provider do,
// versions_test.go follows the Tools' edits, startup_test.go measures the managers' starts,
// audit_test.go checks the invariants, liveness_test.go holds the liveness bounds and their
// reasoning, report_test.go prints the tables, debuglog_test.go keeps the logs (-chaos.logs),
// async_test.go sets up the asynchronous mode.
package chaos

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

var (
	calls    = flag.Int("chaos.calls", 80, "ToolCalls in the chaos run")
	seed     = flag.Uint64("chaos.seed", 0, "random seed (0: from the clock; the seed is printed)")
	killMin  = flag.Duration("chaos.kill-min", 2*time.Second, "shortest manager lifetime between kills")
	killMax  = flag.Duration("chaos.kill-max", 5*time.Second, "longest manager lifetime between kills")
	spreadOf = flag.Duration("chaos.spread", 0, "time over which ToolCalls are created (0: 40ms per call, at least 5s)")
	profiles = flag.String("chaos.profiles", "full,seed", "runs, comma-separated: a reference provider profile (full, seed) in synchronous mode, or with -async in asynchronous mode (async is full-async)")
	parallel = flag.Bool("chaos.parallel", false, "run the profiles side by side (they share the control plane) rather than one after the other")
	logsTo   = flag.String("chaos.logs", "", "directory to keep the run's logs in: every manager process's (at debug level), the provider's, and an access log of the provider API (empty: none)")
)

var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }

func TestChaos(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	if *killMin <= 0 || *killMax < *killMin {
		t.Fatalf("-chaos.kill-min (%s) must be positive and at most -chaos.kill-max (%s)", *killMin, *killMax)
	}
	for _, name := range strings.Split(*profiles, ",") {
		v, err := parseVariant(strings.TrimSpace(name))
		if err != nil {
			t.Fatalf("-chaos.profiles: %v", err)
		}
		t.Run(v.name, func(t *testing.T) {
			if *parallel {
				t.Parallel()
			}
			runChaos(t, v, s)
		})
	}
}

func runChaos(t *testing.T, v variant, s uint64) {
	g := NewWithT(t)
	t.Logf("chaos: %d ToolCalls, seed %d (rerun with -chaos.seed=%d), provider profile %s, %s", *calls, s, s, v.profile, v.mode())

	opts := []th.Option{th.WithoutManager(), th.WithProfile(v.profile), th.WithProvider(func(o *reference.Options) { o.Faults = faults.New(s) }),
		th.WithProvider(debugProvider(t, v.name))}
	var recv *receiver // the manager's webhook receiver, in asynchronous mode
	token := th.Credential
	if v.async {
		recv = newReceiver(t)
		opts = append(opts, th.WithProvider(recv.providerOptions))
		token = provisionerToken
	}
	h := th.New(t, env, opts...)
	debugFront(t, h, v.name)
	h.Opts.CancelGiveUp = 20 * time.Second
	versions := newToolVersions()
	versions.record(h.Tool("issue-refund", "issue_refund", th.RefundSchema, versions.mark))
	versions.record(h.Tool("export-report", "export_report", "", versions.mark))
	versions.record(h.Tool("lookup", "lookup_order", "", versions.mark, func(t *tg.Tool) {
		t.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{
			{Name: "never-blocked", Expression: `has(arguments.blocked) && arguments.blocked`, Action: tg.ActionDeny},
			{Name: "lookups", Expression: `true`, Action: tg.ActionApprove},
		}}
	}))
	rules := faultRules()
	if v.async {
		// The faults start once the instance is provisioned and its delivery registered (below): a
		// failed provisioning or registration is retried every 10s, which would only delay the run.
		rules = append(rules, deliveryFaultRules()...)
		asyncProvider(g, h, recv)
	} else {
		g.Expect(h.Provider.Faults().Set(rules...)).To(Succeed())
		namespaceProvider(g, h)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	watched, err := watchReceipts(ctx, h) // every receipt, those of deleted ToolCalls included
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()

	// The manager: killed and restarted until the chaos window ends.
	var kills int
	starts := newStarts()
	managers := &fleet{} // every manager process, whose logs hold the receipts of deleted ToolCalls
	begin := func() *th.Process {
		at := time.Now()
		p := managers.add(startManager(h, recv.flags()...))
		starts.watch(p, at)
		return p
	}
	// The calls are accepted with the namespace's provider once a manager has checked it; that one
	// is not one of the run's (its start would count the wait for the first call).
	setup := managers.add(startManager(h, recv.flags()...))
	waitProviderReady(g, h)
	var instances []string // the provisioned instance, in asynchronous mode
	if v.async {
		instances = append(instances, waitDeliveryRegistered(g, h, ""))
	}
	keys := keysOf(h, instances)
	setup.Kill()
	if v.async {
		g.Expect(h.Provider.Faults().Set(rules...)).To(Succeed())
	}
	// The liveness bound, from the longest manager start so far (liveness_test.go), with asynchronous
	// mode's allowance for the delivery of the notification.
	bound := func() time.Duration {
		b := liveBound(starts.longestStart())
		if v.async {
			b += deliveryAllowance()
		}
		return b
	}
	proc := begin()
	chaosOver := make(chan struct{})
	managerDone := make(chan struct{})
	killer := newSource(s, streamKiller)
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
			keepLog(t, v.name, kills, proc)
			kills++
			proc = begin()
		}
	}()

	// The kubelet: every Job created runs and succeeds.
	go simulateKubelet(ctx, h)

	// The agent: creates the ToolCalls over the spread, deleting some at once.
	spread := *spreadOf
	if spread == 0 {
		spread = max(5*time.Second, time.Duration(*calls)*40*time.Millisecond)
	}
	// The humans act on each request once it exists, after the call's delay (below).
	all := make([]*call, *calls)
	for i := range all {
		all[i] = &call{name: fmt.Sprintf("call-%04d", i), tool: "issue-refund", plan: planFor(s, i)}
	}
	humans := newHumans(all)
	// The admin: edits the rules' Tool every few seconds (a new generation each time) until the chaos
	// window ends; the report Tool once, when half of its calls are approved, while the others await
	// their decisions or their Jobs (those approved before the edit run, the others were approved for
	// a version that is gone, or are withdrawn); and the refund Tool once, late: after the agent's last
	// call, once the humans had the liveness bound to see their decisions run, while the slowest calls
	// (the manager down, the provider failing) and the undecided ones still await their decisions. The
	// edits withdraw the requests that await decisions (DELETE, under the cancellation faults).
	editor := newSource(s, streamEditor)
	rotations := 0 // of the provider object's credential Secret, with each edit of the rules' Tool
	editsDone := make(chan struct{})
	agentDone := make(chan struct{})
	go func() {
		defer close(editsDone)
		reportEdit, agent := humans.halfEdited, agentDone
		var refundEdit <-chan time.Time
		// Halfway through the agent's calls, the namespace's provider object is deleted: it serves the
		// calls accepted with it until they end, and the later calls go to the manager's own provider.
		// In asynchronous mode its delivery is rotated instead (async_test.go says why).
		providerDelete := time.After(spread / 2)
		refundAfter := time.Duration(editor.Int64N(int64(4 * time.Second)))
		for {
			select {
			case <-chaosOver:
				return
			case <-agent:
				refundEdit = time.After(maxHumanDelay + bound() + refundAfter)
				agent = nil
			case <-reportEdit:
				versions.edit(ctx, h, "export-report")
				reportEdit = nil
			case <-providerDelete:
				if v.async {
					rotateDelivery(ctx, h) // async_test.go: why not a deletion
				} else {
					deleteNamespaceProvider(ctx, h)
				}
				providerDelete = nil
			case <-refundEdit:
				versions.edit(ctx, h, "issue-refund")
				refundEdit = nil
			case <-time.After(2*time.Second + time.Duration(editor.Int64N(int64(4*time.Second)))):
				versions.edit(ctx, h, "lookup")
				if rotateCredential(ctx, h, rotations, token) {
					rotations++
				}
			}
		}
	}()
	pace := time.NewTicker(spread / time.Duration(*calls)) // the agent's request rate
	defer pace.Stop()
	for i, c := range all {
		<-pace.C
		toolName, args := "issue_refund", fmt.Sprintf(`{"payment_id":"p-%d","amount":%d,"currency":"GBP"}`, i, 1+i)
		switch c.act {
		case approveEdited:
			c.tool, toolName, args = "export-report", "export_report", fmt.Sprintf(`{"report":"r-%d"}`, i)
		case policyApprove:
			c.tool, toolName, args = "lookup", "lookup_order", fmt.Sprintf(`{"order":"o-%d"}`, i)
		case policyDeny:
			c.tool, toolName, args = "lookup", "lookup_order", fmt.Sprintf(`{"order":"o-%d","blocked":true}`, i)
		}
		c.args = args
		tc := h.ToolCall(c.name, toolName, args, c.limit, nil)
		c.uid, c.created = tc.UID, tc.CreationTimestamp.Time
		if c.act == deleteAtOnce {
			c.deletedAt = time.Now()
			g.Expect(client.IgnoreNotFound(h.K8s.Delete(ctx, tc))).To(Succeed())
			c.goneAtOnce = apierrors.IsNotFound(h.K8s.Get(ctx, client.ObjectKeyFromObject(tc), &tg.ToolCall{}))
		}
	}

	lastCreated := time.Now()
	close(agentDone)
	t.Logf("the agent created %d ToolCalls in %s", len(all), lastCreated.Sub(start).Round(time.Millisecond))

	// The humans: act on each request once it exists, after the call's delay.
	acted := map[types.UID]bool{}
	for _, c := range all {
		if !c.act.byHuman() {
			acted[c.uid] = true
		}
	}
	// Whether a call without a request ended is read from the apiserver at most once a second (one
	// List), so that the humans' loop keeps its pace with hundreds of calls waiting.
	var lastEnded time.Time
	g.Eventually(func() int {
		keys, err := keys()
		if err != nil {
			return -1
		}
		var running map[string]bool
		if time.Since(lastEnded) >= time.Second {
			lastEnded = time.Now()
			running = unfinishedCalls(ctx, h)
		}
		waiting := 0
		for _, c := range all {
			if acted[c.uid] {
				continue
			}
			id, ok := keys[string(c.uid)]
			if !ok && running != nil && !running[c.name] {
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
			humans.after(ctx, h, c, id)
		}
		return waiting
	}).WithTimeout(2*time.Minute).WithPolling(100*time.Millisecond).Should(BeZero(), "ToolCalls whose approval request never appeared")

	// The chaos window lasts until every waiting limit has passed; then the manager is left running.
	<-time.After(time.Until(lastCreated.Add(maxWaitingLimit + 5*time.Second)))
	close(chaosOver)
	<-managerDone
	<-editsDone
	// The provider's counts while the faults were set: what the audit expects the faults to have hit.
	duringChaos := h.Provider.Stats()
	h.Provider.Faults().Clear()
	window := time.Since(start)
	t.Logf("chaos window over after %s, %d kills, %d Tool edits and %d rotations of the provider's credential Secret; letting the last manager converge",
		window.Round(time.Second), kills, versions.edits, rotations)

	// Convergence: every ToolCall terminal or gone.
	g.Eventually(func() []string {
		return unfinished(ctx, h, all)
	}).WithTimeout(3*time.Minute).WithPolling(500*time.Millisecond).Should(BeEmpty(), func() string {
		return "manager log tail:\n" + tail(proc.Log(), 40)
	})
	humans.wait()
	// Receipts: each ended ToolCall holds one before the audit reads them (receiptWait says why the
	// bound suffices).
	g.Eventually(func() []string {
		return withoutReceipt(ctx, h, all)
	}).WithTimeout(receiptWait).WithPolling(500*time.Millisecond).Should(BeEmpty(), func() string {
		return "ended ToolCalls without their receipt; manager log tail:\n" + tail(proc.Log(), 40)
	})
	keepLog(t, v.name, kills, proc)
	byProvider := map[string]int{}
	g.Expect(acceptedElsewhere(ctx, h, byProvider)).To(BeEmpty(), "every call is accepted with the namespace's ApprovalProvider, or the manager's own once it was deleted")
	if v.async {
		t.Logf("calls accepted with the namespace's ApprovalProvider: %d (kept, its delivery rotated); with the manager's own provider: %d",
			byProvider[tg.KindApprovalProvider+"/"+tg.DefaultProviderName], byProvider[""])
	} else {
		t.Logf("calls accepted with the namespace's ApprovalProvider: %d; with the manager's own provider after its deletion: %d",
			byProvider[tg.KindApprovalProvider+"/"+tg.DefaultProviderName], byProvider[""])
	}
	g.Expect(byProvider[tg.KindApprovalProvider+"/"+tg.DefaultProviderName]).To(BeNumerically(">", 0))
	if v.async {
		waitDeliveryRegistered(g, h, rotatedDelivery) // the rotation went through
	} else {
		providerGone(g, h)
	}
	g.Expect(rotations).To(BeNumerically(">", 0), "the provider's credential Secret was rotated during the run")

	rep := audit(ctx, t, h, all, versions, bound(), keys)
	rep.starts = starts.String()
	rep.kills, rep.window, rep.edits = kills, window, versions.edits
	rep.seed, rep.variant = s, v
	if v.async {
		rep.notified = notified(ctx, h)
	}
	rep.evidence(rules, duringChaos)
	g.Expect(rep.receipts(ctx, h, all, managers.logs(), watched)).To(Succeed())
	rep.print(t)
	g.Expect(rep.violations()).To(BeEmpty(), "invariant violations")
}
