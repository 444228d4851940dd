package toolcalls_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// The synchronous flow: submit, poll whilst pending, apply an approval that is still valid, run the tool,
// return its result.
func TestApprovedCallRunsOnceAndReturnsItsResult(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	succeeded := th.MetricValue("toolgate_toolcalls_total", map[string]string{"outcome": "Succeeded"})
	waits := th.MetricValue("toolgate_approval_wait_seconds", nil)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	tc := h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))

	req := h.PendingRequest("refund")
	g.Expect(req.Tool).To(Equal("issue_refund"))
	g.Expect(req.Timeout).To(Equal("1m"))
	g.Expect(req.Arguments).To(MatchJSON(th.RefundArgs))
	g.Expect(req.Status).To(Equal(provider.StatusPending))
	g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1))
	awaiting := h.Get("refund")
	g.Expect(awaiting.Finalizers).To(ContainElement(tg.Finalizer))
	g.Expect(awaiting.Status.DeadlineAt.Time).To(BeTemporally("~", req.DeadlineAt, time.Second))
	g.Expect(meta.FindStatusCondition(awaiting.Status.Conditions, tg.ConditionApproved).Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(h.Jobs()).To(BeEmpty())

	h.Approve(req.ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.JobName).To(Equal(toolcalls.JobName(tc)))
	g.Expect(running.Status.Decision.Status).To(Equal(provider.StatusApproved))
	g.Expect(running.Status.Decision.Note).To(Equal("The duplicate charge has been confirmed."))
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	// The decision as the provider recorded it (Approve asked for now + 5m), to the second a status holds.
	decided, err := h.Provider.Get(req.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(decided.Decision).NotTo(BeNil())
	g.Expect(decided.Decision.DecidedAt).NotTo(BeNil())
	g.Expect(decided.Decision.ExpiresAt).NotTo(BeNil())
	g.Expect(decided.Decision.ExpiresAt.Sub(*decided.Decision.DecidedAt)).To(BeNumerically("~", 5*time.Minute, time.Second))
	g.Expect(running.Status.Decision.DecidedAt).NotTo(BeNil())
	g.Expect(running.Status.Decision.DecidedAt.Time).To(BeTemporally("==", decided.Decision.DecidedAt.Truncate(time.Second)))
	g.Expect(running.Status.Decision.ExpiresAt).NotTo(BeNil())
	g.Expect(running.Status.Decision.ExpiresAt.Time).To(BeTemporally("==", decided.Decision.ExpiresAt.Truncate(time.Second)))
	// The finalizer goes in the write after the Running status: an approved request can no longer be pending.
	g.Eventually(func() []string { return h.Get("refund").Finalizers }).ShouldNot(ContainElement(tg.Finalizer))

	jobs := h.Jobs()
	g.Expect(jobs).To(HaveLen(1))
	job := jobs[0]
	g.Expect(job.Name).To(Equal(running.Status.JobName))
	g.Expect(job.Labels).To(HaveKeyWithValue(tg.LabelToolCallUID, string(tc.UID)))
	g.Expect(job.Spec.Template.Labels).To(HaveKeyWithValue(tg.LabelToolCallUID, string(tc.UID)))
	g.Expect(job.OwnerReferences).To(ConsistOf(HaveField("UID", tc.UID)))
	g.Expect(*job.OwnerReferences[0].Controller).To(BeTrue())
	g.Expect(*job.Spec.BackoffLimit).To(BeEquivalentTo(0))
	// activeDeadlineSeconds: time left until creation+waitingLimit-returnMargin, capped by executionTimeout (5s).
	g.Expect(*job.Spec.ActiveDeadlineSeconds).To(BeEquivalentTo(5))
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	g.Expect(env).To(HaveKeyWithValue("TOOL_NAME", "issue_refund"))
	g.Expect(env["TOOL_ARGUMENTS"]).To(MatchJSON(th.RefundArgs))
	g.Expect(env).To(HaveKeyWithValue("TOOLCALL_NAME", "refund"))
	g.Expect(env).To(HaveKeyWithValue("TOOLCALL_UID", string(tc.UID)))

	h.FinishJob(job.Name, true, `{"refund_id":"re_1"}`)
	done := h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(done.Status.Result).To(Equal(`{"refund_id":"re_1"}`))
	g.Expect(done.Status.Reason).To(Equal(tg.ReasonJobSucceeded))
	for _, ct := range []string{tg.ConditionApproved, tg.ConditionExecuted, tg.ConditionReady} {
		c := meta.FindStatusCondition(done.Status.Conditions, ct)
		g.Expect(c).NotTo(BeNil(), ct)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), ct)
		g.Expect(c.ObservedGeneration).To(Equal(done.Generation), ct)
	}
	// kstatus's conditions: no longer under way, and not stalled.
	for _, ct := range []string{tg.ConditionReconciling, tg.ConditionStalled} {
		c := meta.FindStatusCondition(done.Status.Conditions, ct)
		g.Expect(c).NotTo(BeNil(), ct)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse), ct)
		g.Expect(c.ObservedGeneration).To(Equal(done.Generation), ct)
	}
	g.Expect(done.Status.ObservedGeneration).To(Equal(done.Generation))
	g.Expect(h.Jobs()).To(HaveLen(1))
	g.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElements(
		tg.ReasonAwaitingApproval, tg.ReasonJobCreated, tg.ReasonJobSucceeded))
	st := h.Provider.Stats()
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Eventually(func() float64 {
		return th.MetricValue("toolgate_toolcalls_total", map[string]string{"outcome": "Succeeded"})
	}).Should(Equal(succeeded + 1))
	g.Expect(th.MetricValue("toolgate_approval_wait_seconds", nil)).To(BeNumerically(">", waits))
}

func TestFailedJobReportsItsMessage(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	h.FinishJob(running.Status.JobName, false, "card network declined the refund")
	failed := h.WaitPhase("refund", tg.PhaseFailed)
	h.G.Expect(failed.Status.Result).To(Equal("card network declined the refund"))
	h.G.Expect(failed.Status.Reason).To(Equal(tg.ReasonJobFailed))
}

// "The provider may return a terminal decision in the response to the initial request. In that case,
// the adapter applies the decision immediately and does not poll."
func TestDecisionInSubmitResponseIsAppliedWithoutPolling(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	// The controller never learns the request's id, so it cannot poll.
	req := h.UnansweredSubmission(h.Provider)
	// Approved under the ToolCall's idempotency key (its UID): the next POST, a replay, answers with
	// the approved request.
	h.Approve(req.ID, 5*time.Minute)
	h.Provider.ResetStats()
	h.Provider.Faults().Clear()

	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	g.Expect(running.Status.RequestID).To(Equal(req.ID))
	st := h.Provider.Stats()
	g.Expect(st.Gets).To(BeZero(), "no poll after a terminal POST response")
	g.Expect(st.Creates).To(BeZero())
	// A reconcile that read the cache before its own status write may replay the POST again: still
	// the same request, and still no poll.
	g.Expect(st.Replays).To(BeNumerically(">=", 1))
	g.Expect(h.Jobs()).To(HaveLen(1))
}

func TestDeniedCarriesTheNote(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	_, err := h.Provider.Decide(req.ID, provider.StatusDenied, "Not a duplicate.", nil)
	h.G.Expect(err).NotTo(HaveOccurred())
	denied := h.WaitPhase("refund", tg.PhaseDenied)
	h.G.Expect(denied.Status.Reason).To(Equal(tg.ReasonDenied))
	h.G.Expect(denied.Status.Decision.Note).To(Equal("Not a duplicate."))
	h.G.Expect(denied.Status.Message).To(ContainSubstring("Not a duplicate."))
	h.G.Expect(meta.IsStatusConditionFalse(denied.Status.Conditions, tg.ConditionExecuted)).To(BeTrue())
	h.G.Expect(h.Jobs()).To(BeEmpty())
	h.G.Eventually(func() []string { return h.Get("refund").Finalizers }).Should(BeEmpty())
}

func TestProviderCancelledIsCancelled(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err := h.Provider.Cancel(h.PendingRequest("refund").ID)
	h.G.Expect(err).NotTo(HaveOccurred())
	c := h.WaitPhase("refund", tg.PhaseCancelled)
	h.G.Expect(c.Status.Reason).To(Equal(tg.ReasonProviderCancelled))
	h.G.Expect(h.Jobs()).To(BeEmpty())
}

// Provider "expired" is ApprovalUnavailable, never Denied.
func TestProviderExpiryIsApprovalUnavailableNotDenied(t *testing.T) {
	h := th.New(t, env, th.WithPollWait(time.Second))
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Minute, ptr.To(2*time.Second))
	h.PendingRequest("refund")
	u := h.WaitPhase("refund", tg.PhaseApprovalUnavailable)
	h.G.Expect(u.Status.Reason).To(Equal(tg.ReasonProviderExpired))
	h.G.Expect(u.Status.Message).To(ContainSubstring("could not be obtained"))
	h.G.Expect(strings.ToLower(u.Status.Message)).NotTo(ContainSubstring("denied"))
	h.G.Expect(h.Jobs()).To(BeEmpty())
}

// Polling stops at deadline_at + margin; 5xx on every poll is retried and never read as expiry; at
// that point the call's own request is looked up to be cancelled (the idempotent submission under its
// key), and the provider's final state it holds (expired) is reported as approval unavailable.
func TestPollLimitCancelsTheRequestAndNeverClaimsDenial(t *testing.T) {
	h := th.New(t, env, th.WithPollWait(time.Second))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	// The provider fails every poll, so the controller never hears about the expiry from a poll.
	g.Expect(h.Provider.Faults().Set(faults.Rule{Op: faults.OpGet, Kind: faults.Error5xx, Status: 503, Probability: 1})).To(Succeed())
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Minute, ptr.To(3*time.Second))
	tc := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	// At deadline_at + final-state margin the controller gives up: the submission replayed to name
	// the request to cancel finds it expired, and nothing is left to cancel.
	u := h.WaitPhase("refund", tg.PhaseApprovalUnavailable)
	g.Expect(u.Status.Reason).To(Equal(tg.ReasonProviderExpired))
	g.Expect(u.Status.Message).To(ContainSubstring("could not be obtained"))
	g.Expect(strings.ToLower(u.Status.Message)).NotTo(ContainSubstring("denied"))
	ready := meta.FindStatusCondition(u.Status.Conditions, tg.ConditionReady)
	g.Expect(ready.LastTransitionTime.Time).To(BeTemporally(">=", tc.Status.DeadlineAt.Add(th.TestTiming().FinalStateMargin).Truncate(time.Second)))
	stalled := meta.FindStatusCondition(u.Status.Conditions, tg.ConditionStalled)
	g.Expect(stalled).NotTo(BeNil())
	g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue), "kstatus reports the call Failed, not Current")
	g.Expect(stalled.Reason).To(Equal(tg.ReasonProviderExpired))
	st := h.Provider.Stats()
	g.Expect(st.Faults[faults.Error5xx]).To(BeNumerically(">=", 1))
	g.Expect(st.Submits).To(BeNumerically(">=", 2), "the submission, and its replay at the give-up")
	g.Expect(st.Creates).To(BeEquivalentTo(1))
	g.Expect(h.Jobs()).To(BeEmpty())
}

// When the provider cannot be reached at all, the controller stops at its own limit and reports that
// approval could not be obtained.
func TestOwnLimitReachedOnAnUnreachableProvider(t *testing.T) {
	h := th.New(t, env, th.WithPollWait(time.Second))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	// limit = 14s - 5s exec - 1s return = 8s after creation; timeout 2s + final-state margin 2s
	// leaves 4s for the acceptance on a loaded machine.
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 14*time.Second, ptr.To(2*time.Second))
	tc := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	g.Expect(h.Provider.Faults().Set(
		faults.Rule{Op: faults.OpGet, Kind: faults.Error5xx, Status: 502, Probability: 1},
		faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Status: 502, Probability: 1},
		faults.Rule{Op: faults.OpCancel, Kind: faults.Error5xx, Status: 502, Probability: 1},
	)).To(Succeed())
	u := h.WaitPhase("refund", tg.PhaseApprovalUnavailable)
	g.Expect(u.Status.Reason).To(Equal(tg.ReasonWaitingLimitReached))
	g.Expect(u.Status.Message).To(ContainSubstring("could not be obtained"))
	g.Expect(strings.ToLower(u.Status.Message)).NotTo(ContainSubstring("denied"))
	ready := meta.FindStatusCondition(u.Status.Conditions, tg.ConditionReady)
	// The cancel (first the replayed submission that names the call's own request) keeps failing,
	// in both profiles, until the limit.
	g.Expect(ready.LastTransitionTime.Time).To(BeTemporally(">=", tc.CreationTimestamp.Add(8*time.Second)))
	g.Expect(h.Provider.Stats().Responses[faults.OpSubmit][http.StatusBadGateway]).To(BeNumerically(">=", 1))
	g.Expect(h.Jobs()).To(BeEmpty())
}

// Connection timeouts and resets on a poll are retried, never read as expiry.
func TestPollTimeoutsAreRetriedAndTheApprovalStillApplies(t *testing.T) {
	h := th.New(t, env, th.WithPollWait(time.Second))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	// Counters are global to the test binary: this test's timeouts are what it adds.
	timeouts := th.MetricValue("toolgate_provider_request_errors_total", map[string]string{"op": "wait", "code": provider.CodeTimeout})
	// The first poll hangs past the client's long-poll timeout (wait + 10s), the next two are reset.
	g.Expect(h.Provider.Faults().Set(
		faults.Rule{Op: faults.OpGet, Kind: faults.Delay, Delay: 12 * time.Second, Count: 1},
		faults.Rule{Op: faults.OpGet, Kind: faults.Reset, Count: 2},
	)).To(Succeed())
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	g.Eventually(func() int64 { return h.Provider.Stats().Faults[faults.Reset] }).WithTimeout(20 * time.Second).Should(BeEquivalentTo(2))
	g.Expect(h.Get("refund").Status.Phase).To(Equal(tg.PhaseAwaitingApproval), "a timeout is not an expiry")
	h.Approve(req.ID, 5*time.Minute)
	g.Expect(h.WaitPhase("refund", tg.PhaseRunning).Status.Reason).To(Equal(tg.ReasonJobCreated))
	g.Expect(h.Provider.Stats().Faults[faults.Delay]).To(BeEquivalentTo(1))
	g.Expect(th.MetricValue("toolgate_provider_request_errors_total", map[string]string{"op": "wait", "code": provider.CodeTimeout})).To(BeNumerically(">=", timeouts+1),
		"the hung poll is counted as a timeout")
	g.Expect(h.Jobs()).To(HaveLen(1))
}

func TestTimeoutThatDoesNotFitIsRejectedWithTheNumbers(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", "")
	// limit = 60s - 5s exec - 1s return = 54s; 53s + 2s final-state margin does not fit.
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Minute, ptr.To(53*time.Second))
	r := h.WaitPhase("refund", tg.PhaseRejected)
	h.G.Expect(r.Status.Reason).To(Equal(tg.ReasonTimeoutDoesNotFit))
	h.G.Expect(r.Status.Message).To(And(ContainSubstring("timeout 53s"), ContainSubstring("final-state margin 2s"), ContainSubstring("spec.timeout")))
	h.G.Expect(h.Provider.Stats().Submits).To(BeZero())
}

func TestBadInputIsRejectedBeforeAnyHumanIsAsked(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.Tool("dup-a", "restart_service", "")
	h.Tool("dup-b", "restart_service", "")
	h.Tool("broken", "broken_tool", "", func(tool *tg.Tool) {
		tool.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	})
	cases := []struct {
		name, tool, args, reason, message string
	}{
		{"unknown", "no_such_tool", `{}`, tg.ReasonUnknownTool, `no Tool in namespace`},
		{"ambiguous", "restart_service", `{}`, tg.ReasonAmbiguousTool, `dup-a, dup-b`},
		{"schema", "issue_refund", `{"payment_id":"p","amount":0,"currency":"JPY"}`, tg.ReasonInvalidArguments, `at /amount`},
		{"extra-field", "issue_refund", `{"payment_id":"p","amount":1,"currency":"GBP","admin":true}`, tg.ReasonInvalidArguments, `argumentsSchema`},
		{"too-large", "restart_service-x", `{"blob":"` + strings.Repeat("x", tg.MaxArgumentsBytes) + `"}`, tg.ReasonArgumentsTooLarge, `64 KiB`},
		{"too-deep", "broken_tool-x", strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40), tg.ReasonInvalidArguments, `levels deep`},
		{"bad-job-template", "broken_tool", `{}`, tg.ReasonInvalidTool, `spec.jobTemplate`},
	}
	h.Tool("x1", "restart_service-x", "")
	h.Tool("x2", "broken_tool-x", "")
	for _, c := range cases {
		h.ToolCall(c.name, c.tool, c.args, 2*time.Minute, nil)
	}
	for _, c := range cases {
		r := h.WaitPhase(c.name, tg.PhaseRejected)
		h.G.Expect(r.Status.Reason).To(Equal(c.reason), c.name)
		h.G.Expect(r.Status.Message).To(ContainSubstring(c.message), c.name)
		h.G.Expect(r.Finalizers).To(BeEmpty(), c.name)
	}
	h.G.Expect(h.Provider.Stats().Submits).To(BeZero(), "no request is sent for bad input")
}

// "check decision.expires_at immediately before allowing the call to start", with the injected clock.
func TestExpiredApprovalNeverRuns(t *testing.T) {
	h, clk := th.NewClocked(t, env)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
	req := h.PendingRequest("refund")
	// Valid for 5 minutes by the provider's clock; the controller's clock says 6 minutes have passed.
	h.Approve(req.ID, 5*time.Minute)
	clk.SetTime(clk.Now().Add(6 * time.Minute))
	e := h.WaitPhase("refund", tg.PhaseExpired)
	h.G.Expect(e.Status.Reason).To(Equal(tg.ReasonApprovalExpired))
	h.G.Expect(e.Status.Decision.Status).To(Equal(provider.StatusApproved))
	h.G.Expect(h.Jobs()).To(BeEmpty())
}

func TestApprovalExpiringWithinTheSkewMarginNeverRuns(t *testing.T) {
	h, clk := th.NewClocked(t, env)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
	req := h.PendingRequest("refund")
	// The provider stamps the request with its own (real) clock; an approval must expire after the
	// request was created. The controller's clock is put at that instant: the approval expires 500ms
	// later, inside the 1s skew margin.
	clk.SetTime(req.CreatedAt)
	exp := req.CreatedAt.Add(500 * time.Millisecond)
	_, err := h.Provider.Decide(req.ID, provider.StatusApproved, "", &exp)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(h.WaitPhase("refund", tg.PhaseExpired).Status.Reason).To(Equal(tg.ReasonApprovalExpired))
	h.G.Expect(h.Jobs()).To(BeEmpty())
}

// "This also applies to approvals recovered through a retry": the approval arrives while the manager
// is down, and the new manager checks expiry against its clock before creating the Job.
func TestApprovalRecoveredAfterRestartIsCheckedAgain(t *testing.T) {
	h, clk := th.NewClocked(t, env)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
	h.ToolCall("refund-valid", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
	stale := h.PendingRequest("refund")
	valid := h.PendingRequest("refund-valid")
	h.StopManager()
	h.Approve(stale.ID, 2*time.Minute)
	h.Approve(valid.ID, 30*time.Minute)
	clk.SetTime(clk.Now().Add(3 * time.Minute))
	h.Start()
	h.G.Expect(h.WaitPhase("refund", tg.PhaseExpired).Status.Reason).To(Equal(tg.ReasonApprovalExpired))
	h.G.Expect(h.WaitPhase("refund-valid", tg.PhaseRunning).Status.Reason).To(Equal(tg.ReasonJobCreated))
	h.G.Expect(h.Jobs()).To(HaveLen(1))
}

// Restart safety: the manager dies at each crash-sensitive step and a new one takes over.
func TestRestartAtEachStepNeverDuplicates(t *testing.T) {
	for _, window := range []string{afterSubmit, beforeJobCreate, afterJobCreate} {
		t.Run(window, func(t *testing.T) {
			h := th.New(t, env)
			g := h.G
			// This manager dies in the window: the write that ends it, and every write after it, fail.
			crashed := crashAt(h, window)
			h.StopManager()
			h.Start()

			h.Tool("issue-refund", "issue_refund", "")
			h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			if window != afterSubmit {
				req := h.PendingRequest("refund")
				h.Approve(req.ID, 5*time.Minute)
			}
			g.Eventually(crashed).WithTimeout(20 * time.Second).Should(BeClosed())
			// The new manager starts from what the dead one wrote before the window.
			atCrash := h.Get("refund").Status
			if window == afterSubmit {
				g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1), "the provider holds the request")
				g.Expect(atCrash.RequestID).To(BeEmpty())
			} else {
				g.Expect(atCrash.Phase).To(Equal(tg.PhaseAwaitingApproval))
			}
			if window == afterJobCreate {
				g.Expect(h.Jobs()).To(HaveLen(1), "the Job was created")
			} else {
				g.Expect(h.Jobs()).To(BeEmpty())
			}
			h.Restart()

			if window == afterSubmit {
				// The new manager's POST replays the same request, then waits for the decision.
				h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
			}
			running := h.WaitPhase("refund", tg.PhaseRunning, 30*time.Second)
			g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
			g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1), "one provider request per ToolCall")
			g.Expect(h.Jobs()).To(HaveLen(1), "one Job per ToolCall")
			h.FinishJob(running.Status.JobName, true, "ok")
			g.Expect(h.WaitPhase("refund", tg.PhaseSucceeded).Status.Reason).To(Equal(tg.ReasonJobSucceeded))
			g.Expect(h.Jobs()).To(HaveLen(1))
		})
	}
}

// A Job that exists is the record that the tool started: never re-created, and never reported as not
// run, whatever changed while the manager was down.
func TestExistingJobIsNeverRecheckedOrRecreated(t *testing.T) {
	cases := []struct {
		name      string
		validFor  time.Duration // of the approval
		whileDown func(h *th.Harness, clk *clocktesting.FakePassiveClock)
	}{
		{"the approval expired", 2 * time.Minute, func(_ *th.Harness, clk *clocktesting.FakePassiveClock) {
			clk.SetTime(clk.Now().Add(10 * time.Minute))
		}},
		{"the Tool was deleted", 2 * time.Minute, func(h *th.Harness, _ *clocktesting.FakePassiveClock) {
			h.G.Expect(h.K8s.Delete(context.Background(), &tg.Tool{ObjectMeta: metav1.ObjectMeta{Name: "issue-refund", Namespace: h.NS}})).To(Succeed())
		}},
		{"the waiting limit passed", 3 * time.Hour, func(_ *th.Harness, clk *clocktesting.FakePassiveClock) {
			clk.SetTime(clk.Now().Add(2 * time.Hour))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, clk := th.NewClocked(t, env)
			g := h.G
			// The manager dies after the Job create, before its status write, so the next manager
			// starts from AwaitingApproval with the Job in place.
			crashed := crashAt(h, afterJobCreate)
			h.StopManager()
			h.Start()
			h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
			req := h.PendingRequest("refund")
			g.Expect(h.WaitPhase("refund", tg.PhaseAwaitingApproval).Status.Reason).To(Equal(tg.ReasonAwaitingApproval))
			h.Approve(req.ID, c.validFor)
			g.Eventually(crashed).WithTimeout(20 * time.Second).Should(BeClosed())
			h.StopManager()
			g.Expect(h.Jobs()).To(HaveLen(1))
			g.Expect(h.Get("refund").Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
			c.whileDown(h, clk)
			h.Restart()
			running := h.WaitPhase("refund", tg.PhaseRunning)
			g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
			g.Expect(h.Jobs()).To(HaveLen(1))
		})
	}
}

// The reconciler never blocks a worker on a long poll: with one worker and 30s polls, many
// ToolCalls are all submitted and all waited on at once.
func TestOneWorkerServesManyPendingToolCalls(t *testing.T) {
	// The gauge is global to the test binary: what this manager's waiters add to what was there.
	waiters := th.MetricValue("toolgate_pending_waiters", nil)
	h := th.New(t, env, th.WithWorkers(1), th.WithPollWait(30*time.Second))
	h.Tool("issue-refund", "issue_refund", "")
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, n := range names {
		h.ToolCall(n, "issue_refund", th.RefundArgs, 5*time.Minute, nil)
	}
	for _, n := range names {
		h.G.Expect(h.WaitPhase(n, tg.PhaseAwaitingApproval, 10*time.Second).Status.Reason).To(Equal(tg.ReasonAwaitingApproval))
	}
	h.G.Eventually(func() int64 { return h.Provider.Stats().Waiting }).Should(BeEquivalentTo(len(names)))
	h.G.Expect(th.MetricValue("toolgate_pending_waiters", nil) - waiters).To(BeEquivalentTo(len(names)))
	// A decision on the last one is applied while the other five are still held open by the provider.
	h.Approve(h.PendingRequest("f").ID, 5*time.Minute)
	h.G.Expect(h.WaitPhase("f", tg.PhaseRunning, 10*time.Second).Status.Reason).To(Equal(tg.ReasonJobCreated))
}

// Each completed poll that still says pending is followed by another, and writes nothing.
func TestUnchangedPollsWriteNothing(t *testing.T) {
	h := th.New(t, env, th.WithPollWait(time.Second))
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	first := h.PendingRequest("refund")
	before := h.Get("refund").ResourceVersion
	gets := h.Provider.Stats().Gets
	h.G.Eventually(func() int64 { return h.Provider.Stats().Gets }).WithTimeout(15 * time.Second).Should(BeNumerically(">=", gets+3))
	after := h.Get("refund")
	h.G.Expect(after.ResourceVersion).To(Equal(before))
	h.G.Expect(after.Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
	h.G.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1), "a poll never creates a request")
	now, err := h.Provider.Get(first.ID)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(now.DeadlineAt).To(Equal(first.DeadlineAt), "a poll never extends the deadline")
}

// What a human approved is what runs: the apiserver refuses any change to spec, a top-level key of
// spec.arguments replaced by another included. The CRD's rule compares spec.arguments key by key and
// lets that one by; config/admission's toolcall-spec-immutable policy, which the harness installs as
// a cluster running Toolgate has it, refuses it. The approved call then runs exactly the arguments
// that were approved.
func TestApprovalNeverCoversChangedArguments(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	tc := h.Get("refund")
	tc.Spec.Arguments.Raw = []byte(`{"payment_id":"payment_123","amount":4900,"refund_to":"acct_999"}`)
	err := env.Client.Update(context.Background(), tc)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "the apiserver must refuse the changed arguments (422 Invalid), got %v", err)
	g.Expect(err.Error()).To(HaveSuffix("ValidatingAdmissionPolicy 'toolcall-spec-immutable' with binding 'toolcall-spec-immutable' denied request: " +
		"spec is immutable: what a human approved is what runs; create a new ToolCall instead (changed: spec.arguments)"))
	g.Expect(h.Get("refund").Spec.Arguments.Raw).To(MatchJSON(th.RefundArgs))

	h.Approve(req.ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	g.Expect(running.Spec.Arguments.Raw).To(MatchJSON(th.RefundArgs))
	jobs := h.Jobs()
	g.Expect(jobs).To(HaveLen(1))
	g.Expect(jobs[0].Spec.Template.Spec.Containers[0].Env).To(ContainElement(And(
		HaveField("Name", "TOOL_ARGUMENTS"), HaveField("Value", MatchJSON(th.RefundArgs)))))
}
