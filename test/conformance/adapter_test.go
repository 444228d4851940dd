package conformance

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/aapstrict"
	th "toolgate.dev/toolgate/test/testharness"
)

var durationPattern = regexp.MustCompile(`^[1-9][0-9]*(s|m|h)$`)

// 1. "Authenticate as an instance and submit the intercepted tool call accurately."
// Each ToolCall reaches the provider under the instance credential as exactly its tool, its arguments
// (any JSON, unchanged), its requested timeout as one duration the contract accepts (90m, never
// 1h30m), and the agent's reason as agent_reasoning; a ToolCall without spec.timeout gets a default
// the provider accepts too.
func TestAdapter1_AuthenticatesAsTheInstanceAndSubmitsTheCallAccurately(t *testing.T) {
	w := newWorld(t, nil)
	g := w.G
	w.Tool("lookup-order", "lookup_order", "")
	richArgs := `{"query":"naïve café ☕ \"quoted\" <tag>","limit":10,"ratio":0.25,"big":9007199254740991,"nested":{"B":[1,"two",null,true,{"x":[]}],"a":{}}}`
	cases := []struct {
		name, tool, args string
		timeout          *time.Duration
		// want is the timeout the provider must receive; "" is a default that fits the waiting limit.
		want string
	}{
		{"timeout-90m", "issue_refund", th.RefundArgs, ptr.To(90 * time.Minute), "90m"},
		{"timeout-44m", "issue_refund", th.RefundArgs, ptr.To(44 * time.Minute), "44m"},
		{"timeout-90s", "issue_refund", th.RefundArgs, ptr.To(90 * time.Second), "90s"},
		{"timeout-1h", "issue_refund", th.RefundArgs, ptr.To(time.Hour), "1h"},
		{"rich-arguments", "lookup_order", richArgs, ptr.To(30 * time.Minute), "30m"},
		{"no-timeout", "issue_refund", th.RefundArgs, nil, ""},
	}
	const waitingLimit = 2 * time.Hour
	reasons := map[string]string{}
	for _, c := range cases {
		reasons[c.name] = w.toolCallWithReason(c.name, c.tool, c.args, waitingLimit, c.timeout, "The customer was charged twice for order "+c.name+".")
	}
	for _, c := range cases {
		tc := w.WaitPhase(c.name, tg.PhaseAwaitingApproval)
		req := w.pending(c.name)
		g.Expect(req.Tool).To(Equal(c.tool), c.name)
		g.Expect(req.Arguments).To(MatchJSON(c.args), c.name)
		if c.want != "" {
			g.Expect(req.Timeout).To(Equal(c.want), c.name)
		} else {
			g.Expect(req.Timeout).To(MatchRegexp(durationPattern.String()), c.name)
			d, err := time.ParseDuration(req.Timeout)
			g.Expect(err).NotTo(HaveOccurred())
			// The largest that fits: the waiting limit less the Tool's 5s and the margins.
			g.Expect(d).To(BeNumerically("<=", waitingLimit-5*time.Second-th.TestTiming().ReturnMargin-th.TestTiming().FinalStateMargin), c.name)
			g.Expect(d).To(BeNumerically(">=", time.Hour), c.name)
		}
		if reasons[c.name] == "" {
			g.Expect(req.AgentReasoning).To(BeNil(), "%s: no spec.reason, no agent_reasoning", c.name)
		} else {
			g.Expect(req.AgentReasoning).To(HaveValue(Equal(reasons[c.name])), c.name)
		}
		if req.Context != nil {
			g.Expect(string(req.Context)).NotTo(ContainSubstring(credential), "%s: context carries no credential", c.name)
		}
		g.Expect(tc.Status.DeadlineAt.Time).To(BeTemporally("==", req.DeadlineAt), "%s: the provider's deadline_at is recorded", c.name)
	}
	for _, ex := range w.P.Log() {
		g.Expect(ex.Status).NotTo(Equal(http.StatusUnauthorized), "every request carries the instance credential: %s", describe(ex))
	}
	g.Expect(w.P.List()).To(HaveLen(len(cases)), "one request per ToolCall")
	g.Expect(w.Jobs()).To(BeEmpty(), "nothing runs while pending")
}

// 2. "Retain the same idempotency key when recovering the same request."
// A lost response, a manager restart in the middle of a submission, and 503s with Retry-After are all
// recovered by resubmitting under the original key (the ToolCall's UID): one request, one Job.
func TestAdapter2_KeepsTheIdempotencyKeyWhenRecovering(t *testing.T) {
	t.Run("after-a-lost-response", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.P.DropNextResponse(1)
		tc := w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		req := w.pending("refund")
		posts := methods(w.exchanges(string(tc.UID), ""), http.MethodPost)
		g.Expect(len(posts)).To(BeNumerically(">=", 2), "the lost submission was repeated")
		g.Expect(posts[0].Dropped).To(BeTrue())
		g.Expect(posts[0].Status).To(Equal(http.StatusCreated))
		for _, p := range posts[1:] {
			g.Expect(p.Status).To(Equal(http.StatusOK), "a replay under the same key: %s", describe(p))
		}
		g.Expect(w.P.List()).To(HaveLen(1), "recovered, not created again")
		w.approve(req.ID, 5*time.Minute)
		g.Expect(w.WaitPhase("refund", tg.PhaseRunning).Status.Reason).To(Equal(tg.ReasonJobCreated))
		g.Expect(w.Jobs()).To(HaveLen(1))
	})

	t.Run("after-a-manager-restart", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		// Every answer is lost while the first manager runs: it never learns the request's id.
		w.P.DropNextResponse(1 << 30)
		tc := w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		g.Eventually(func() int { return len(methods(w.exchanges(string(tc.UID), ""), http.MethodPost)) }).
			WithTimeout(20 * time.Second).Should(BeNumerically(">=", 2))
		w.StopManager()
		g.Expect(w.Get("refund").Status.RequestID).To(BeEmpty(), "the first manager never recorded the request")
		w.P.DropNextResponse(0)
		before := len(w.P.Log())
		w.Start()
		req := w.pending("refund")
		after := methods(w.exchanges(string(tc.UID), ""), http.MethodPost)
		g.Expect(len(after)).To(BeNumerically(">", 0))
		for _, p := range w.P.Log()[before:] {
			if p.Method == http.MethodPost {
				g.Expect(p.IdempotencyKey).To(Equal(string(tc.UID)), "the new manager resubmits under the original key")
				g.Expect(p.Status).To(Equal(http.StatusOK), "a replay: %s", describe(p))
			}
		}
		g.Expect(w.P.List()).To(HaveLen(1))
		g.Expect(w.P.List()[0].ID).To(Equal(req.ID))
		w.approve(req.ID, 5*time.Minute)
		running := w.WaitPhase("refund", tg.PhaseRunning)
		g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
		w.FinishJob(running.Status.JobName, true, "ok")
		w.WaitPhase("refund", tg.PhaseSucceeded)
		g.Expect(w.Jobs()).To(HaveLen(1))
	})

	t.Run("after-503-with-retry-after", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		const retryAfter = 2 * time.Second
		w.P.FailNext(1, http.StatusServiceUnavailable, retryAfter)
		tc := w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		req := w.pending("refund")
		posts := methods(w.exchanges(string(tc.UID), ""), http.MethodPost)
		g.Expect(len(posts)).To(BeNumerically(">=", 2))
		g.Expect(posts[0].Status).To(Equal(http.StatusServiceUnavailable))
		g.Expect(posts[1].Status).To(Equal(http.StatusCreated), "retried under the same key, created once")
		g.Expect(posts[1].At.Sub(posts[0].Answered)).To(BeNumerically(">=", retryAfter), "Retry-After is respected before the submission is repeated")

		// The same on a poll: the next read after a 503 waits Retry-After.
		polled := len(methods(w.exchanges("", req.ID), http.MethodGet))
		g.Eventually(func() int { return len(methods(w.exchanges("", req.ID), http.MethodGet)) }).
			WithTimeout(10 * time.Second).Should(BeNumerically(">", polled))
		w.P.FailNext(1, http.StatusServiceUnavailable, retryAfter)
		g.Eventually(func() []aapstrict.Exchange { return failedThenRetried(w.exchanges("", req.ID)) }).
			WithTimeout(20 * time.Second).Should(HaveLen(2))
		pair := failedThenRetried(w.exchanges("", req.ID))
		g.Expect(pair[1].At.Sub(pair[0].Answered)).To(BeNumerically(">=", retryAfter), "Retry-After is respected before the read is repeated")
		w.approve(req.ID, 5*time.Minute)
		g.Expect(w.WaitPhase("refund", tg.PhaseRunning).Status.Reason).To(Equal(tg.ReasonJobCreated))
		g.Expect(w.P.List()).To(HaveLen(1))
		g.Expect(w.Jobs()).To(HaveLen(1))
	})
}

// failedThenRetried returns the first 503 among exs and the exchange after it, or nil.
func failedThenRetried(exs []aapstrict.Exchange) []aapstrict.Exchange {
	for i, ex := range exs {
		if ex.Status == http.StatusServiceUnavailable && i+1 < len(exs) {
			return []aapstrict.Exchange{ex, exs[i+1]}
		}
	}
	return nil
}

// 3. "Handle both immediate decisions and requests that require polling."
// A decision in the POST response is applied at once, with no GET; a pending request is long-polled
// with ?wait= of at most 30s until its decision arrives.
func TestAdapter3_HandlesImmediateDecisionsAndPolling(t *testing.T) {
	t.Run("approval-in-the-post-response", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.P.SetRule(func(aapstrict.Request) *aapstrict.Verdict {
			return &aapstrict.Verdict{Status: aapstrict.StatusApproved, Note: approvalNote, Validity: 5 * time.Minute}
		})
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		running := w.WaitPhase("refund", tg.PhaseRunning)
		g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
		g.Expect(running.Status.Decision.Note).To(Equal(approvalNote))
		w.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)
		done := w.WaitPhase("refund", tg.PhaseSucceeded)
		g.Expect(done.Status.Result).To(Equal(`{"refund_id":"re_1"}`))
		g.Expect(methods(w.P.Log(), http.MethodGet)).To(BeEmpty(), "no poll after a terminal POST response")
		g.Expect(w.Jobs()).To(HaveLen(1))
	})

	t.Run("denial-in-the-post-response", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.P.SetRule(func(aapstrict.Request) *aapstrict.Verdict {
			return &aapstrict.Verdict{Status: aapstrict.StatusDenied, Note: "Refunds are paused."}
		})
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		denied := w.WaitPhase("refund", tg.PhaseDenied)
		g.Expect(denied.Status.Decision.Note).To(Equal("Refunds are paused."))
		g.Expect(methods(w.P.Log(), http.MethodGet)).To(BeEmpty(), "no poll after a terminal POST response")
		g.Expect(w.Jobs()).To(BeEmpty())
	})

	t.Run("pending-then-polled", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		req := w.pending("refund")
		// Several polls complete with the request still pending; the adapter polls again.
		g.Eventually(func() int { return len(methods(w.exchanges("", req.ID), http.MethodGet)) }).
			WithTimeout(20 * time.Second).Should(BeNumerically(">=", 2))
		g.Expect(w.Get("refund").Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
		g.Eventually(func() int { return w.P.Waiting(req.ID) }).WithTimeout(10*time.Second).Should(Equal(1), "a long poll is held")
		w.approve(req.ID, 5*time.Minute)
		g.Expect(w.WaitPhase("refund", tg.PhaseRunning).Status.Reason).To(Equal(tg.ReasonJobCreated))
		for _, ex := range methods(w.exchanges("", req.ID), http.MethodGet) {
			q, err := url.ParseQuery(ex.Query)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(q["wait"]).To(HaveLen(1), "a long poll: %s", describe(ex))
			g.Expect(q.Get("wait")).To(MatchRegexp(durationPattern.String()))
			d, err := time.ParseDuration(q.Get("wait"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d).To(BeNumerically("<=", aapstrict.MaxWait), "wait is at most 30s: %s", describe(ex))
		}
		g.Expect(w.P.List()).To(HaveLen(1), "polling creates nothing")
		g.Expect(w.Jobs()).To(HaveLen(1))
	})
}

// 4. "Enforce the terminal outcome, check approval validity immediately before execution and keep
// the approved arguments unchanged."
func TestAdapter4_EnforcesTheOutcomeChecksValidityAndKeepsTheArguments(t *testing.T) {
	t.Run("approval-runs-the-approved-call-once", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		tc := w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		req := w.pending("refund")
		g.Expect(w.Jobs()).To(BeEmpty())
		approved := w.approve(req.ID, 5*time.Minute)
		g.Expect(approved.Decision.ExpiresAt).NotTo(BeNil())
		g.Expect(approved.Decision.ExpiresAt.Sub(approved.Decision.DecidedAt)).To(Equal(5 * time.Minute))
		running := w.WaitPhase("refund", tg.PhaseRunning)
		g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
		g.Expect(running.Status.Decision.Status).To(Equal(aapstrict.StatusApproved))
		g.Expect(running.Status.Decision.DecidedAt).NotTo(BeNil())
		g.Expect(running.Status.Decision.DecidedAt.Time).To(BeTemporally("==", approved.Decision.DecidedAt), "decided_at as the provider sent it")
		g.Expect(running.Status.Decision.ExpiresAt).NotTo(BeNil())
		g.Expect(running.Status.Decision.ExpiresAt.Time).To(BeTemporally("==", *approved.Decision.ExpiresAt), "expires_at as the provider sent it")
		e := jobEnv(w, running.Status.JobName)
		g.Expect(e).To(HaveKeyWithValue("TOOL_NAME", req.Tool))
		g.Expect(e["TOOL_ARGUMENTS"]).To(MatchJSON(req.Arguments), "the approved arguments run, unchanged")
		g.Expect(e).To(HaveKeyWithValue("TOOLCALL_UID", string(tc.UID)))
		w.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)
		w.WaitPhase("refund", tg.PhaseSucceeded)
		g.Expect(w.Jobs()).To(HaveLen(1))
	})

	t.Run("approval-past-expires-at-never-runs", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(time.Now())
		w := newWorld(t, nil, th.WithClock(clk))
		g := w.G
		w.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
		req := w.pending("refund")
		// By the manager's clock two minutes pass; the approval is valid for one.
		clk.SetTime(clk.Now().Add(2 * time.Minute))
		approved := w.approve(req.ID, time.Minute)
		g.Expect(approved.Decision.ExpiresAt.Before(clk.Now())).To(BeTrue())
		e := w.WaitPhase("refund", tg.PhaseExpired)
		g.Expect(e.Status.Reason).To(Equal(tg.ReasonApprovalExpired))
		g.Expect(e.Status.Decision.Status).To(Equal(aapstrict.StatusApproved))
		g.Expect(strings.ToLower(e.Status.Message)).NotTo(ContainSubstring("denied"))
		g.Expect(w.Jobs()).To(BeEmpty())
	})

	t.Run("approval-recovered-after-a-restart-is-checked-again", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(time.Now())
		w := newWorld(t, nil, th.WithClock(clk))
		g := w.G
		w.ToolCall("stale", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
		w.ToolCall("valid", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
		stale, valid := w.pending("stale"), w.pending("valid")
		w.StopManager()
		w.approve(stale.ID, time.Minute)
		w.approve(valid.ID, 30*time.Minute)
		clk.SetTime(clk.Now().Add(2 * time.Minute))
		w.Start()
		w.WaitPhase("stale", tg.PhaseExpired)
		running := w.WaitPhase("valid", tg.PhaseRunning)
		g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
		g.Expect(w.Jobs()).To(ConsistOf(HaveField("Name", running.Status.JobName)))
	})
}

// 5. "Prevent execution when no valid approval has been obtained."
func TestAdapter5_NoExecutionWithoutAValidApproval(t *testing.T) {
	t.Run("no-decision-before-the-provider-deadline", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.ToolCall("refund", "issue_refund", th.RefundArgs, time.Minute, ptr.To(3*time.Second))
		req := w.pending("refund")
		u := w.WaitPhase("refund", tg.PhaseApprovalUnavailable)
		g.Expect(u.Status.Reason).To(Equal(tg.ReasonProviderExpired))
		g.Expect(meta.IsStatusConditionTrue(u.Status.Conditions, tg.ConditionApproved)).To(BeFalse())
		g.Expect(meta.IsStatusConditionTrue(u.Status.Conditions, tg.ConditionExecuted)).To(BeFalse())
		got, _ := w.P.Get(req.ID)
		g.Expect(got.Status).To(Equal(aapstrict.StatusExpired))
		g.Expect(w.Jobs()).To(BeEmpty())
	})

	t.Run("provider-failing-until-the-waiting-limit", func(t *testing.T) {
		w := newWorld(t, nil, th.WithPollWait(time.Second))
		g := w.G
		// Our limit: 12s - the Tool's 5s - the 1s return margin = 6s after creation.
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 12*time.Second, ptr.To(2*time.Second))
		req := w.pending("refund")
		w.P.FailNext(1<<30, http.StatusInternalServerError, 0)
		u := w.WaitPhase("refund", tg.PhaseApprovalUnavailable)
		g.Expect(u.Status.Reason).To(Equal(tg.ReasonWaitingLimitReached))
		g.Expect(meta.IsStatusConditionTrue(u.Status.Conditions, tg.ConditionExecuted)).To(BeFalse())
		g.Expect(w.Jobs()).To(BeEmpty())
		got, _ := w.P.Get(req.ID)
		g.Expect(got.Status).NotTo(Equal(aapstrict.StatusApproved))
	})
}

// 6. "Distinguish a denial from expiry, cancellation or failure to obtain a decision."
func TestAdapter6_TellsADenialFromExpiryCancellationAndFailure(t *testing.T) {
	t.Run("denied-cancelled-expired", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		w := newWorld(t, func(o *aapstrict.Options) { o.Clock = clk })
		g := w.G
		for _, name := range []string{"denied", "cancelled", "expired"} {
			w.ToolCall(name, "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
		}
		_, err := w.P.Deny(w.pending("denied").ID, "Not a duplicate.")
		g.Expect(err).NotTo(HaveOccurred())
		_, err = w.P.Cancel(w.pending("cancelled").ID)
		g.Expect(err).NotTo(HaveOccurred())
		w.pending("expired")
		clk.Step(10 * time.Minute) // the provider's deadline passes with the request pending

		denied := w.WaitPhase("denied", tg.PhaseDenied)
		g.Expect(denied.Status.Reason).To(Equal(tg.ReasonDenied))
		g.Expect(denied.Status.Decision.Status).To(Equal(aapstrict.StatusDenied))
		g.Expect(denied.Status.Decision.Note).To(Equal("Not a duplicate."))
		g.Expect(denied.Status.Message).To(ContainSubstring("Not a duplicate."))

		cancelled := w.WaitPhase("cancelled", tg.PhaseCancelled)
		g.Expect(cancelled.Status.Reason).To(Equal(tg.ReasonProviderCancelled))
		g.Expect(strings.ToLower(cancelled.Status.Message)).NotTo(ContainSubstring("denied"))

		expired := w.WaitPhase("expired", tg.PhaseApprovalUnavailable)
		g.Expect(expired.Status.Reason).To(Equal(tg.ReasonProviderExpired))
		g.Expect(expired.Status.Message).To(ContainSubstring("could not be obtained"))
		g.Expect(strings.ToLower(expired.Status.Message)).NotTo(ContainSubstring("denied"))
		g.Expect(w.Jobs()).To(BeEmpty())
	})

	t.Run("failure-to-obtain-a-decision", func(t *testing.T) {
		w := newWorld(t, nil, th.WithPollWait(time.Second))
		g := w.G
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 12*time.Second, ptr.To(2*time.Second))
		w.pending("refund")
		w.P.FailNext(1<<30, http.StatusServiceUnavailable, 0)
		u := w.WaitPhase("refund", tg.PhaseApprovalUnavailable)
		g.Expect(u.Status.Reason).To(Equal(tg.ReasonWaitingLimitReached))
		g.Expect(u.Status.Message).To(ContainSubstring("could not be obtained"))
		g.Expect(strings.ToLower(u.Status.Message)).NotTo(ContainSubstring("denied"))
		g.Expect(u.Status.Decision).To(Or(BeNil(), HaveField("Status", Not(Equal(aapstrict.StatusDenied)))))
		g.Expect(w.Jobs()).To(BeEmpty())
	})
}

// 7. "Avoid executing a call again when the same approval is retrieved more than once."
func TestAdapter7_NeverExecutesTwiceWhenTheSameApprovalIsReadAgain(t *testing.T) {
	t.Run("immediate-approval-whose-answer-was-lost", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.P.SetRule(func(aapstrict.Request) *aapstrict.Verdict {
			return &aapstrict.Verdict{Status: aapstrict.StatusApproved, Note: approvalNote, Validity: 5 * time.Minute}
		})
		w.P.DropNextResponse(1)
		tc := w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		running := w.WaitPhase("refund", tg.PhaseRunning)
		g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
		posts := methods(w.exchanges(string(tc.UID), ""), http.MethodPost)
		g.Expect(len(posts)).To(BeNumerically(">=", 2), "the approval was read again by the repeated submission")
		g.Expect(posts[0].Dropped).To(BeTrue())
		w.FinishJob(running.Status.JobName, true, "ok")
		w.WaitPhase("refund", tg.PhaseSucceeded)
		g.Expect(w.Jobs()).To(HaveLen(1))
	})

	t.Run("approval-read-again-after-a-restart", func(t *testing.T) {
		w := newWorld(t, nil, th.WithoutManager())
		g := w.G
		// The first manager creates the Job and then cannot write any ToolCall status, as if it died
		// right after the create: it and the next manager each read the approval again.
		var jobCreated atomic.Bool
		w.NewClient = func(cfg *rest.Config, o client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, o)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					err := c.Create(ctx, obj, opts...)
					if _, job := obj.(*batchv1.Job); job && err == nil && !dryRun(opts) {
						jobCreated.Store(true)
					}
					return err
				},
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if _, isCall := obj.(*tg.ToolCall); isCall && jobCreated.Load() {
						return errors.New("the manager died after creating the Job")
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			}), nil
		}
		w.Start()
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		req := w.pending("refund")
		approvedAt := time.Now()
		w.approve(req.ID, 5*time.Minute)
		g.Eventually(jobCreated.Load).WithTimeout(10 * time.Second).Should(BeTrue())
		g.Expect(w.Get("refund").Status.Phase).To(Equal(tg.PhaseAwaitingApproval), "Running was never written")
		w.Restart()
		running := w.WaitPhase("refund", tg.PhaseRunning)
		g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
		reads := 0
		for _, ex := range w.exchanges(string(running.UID), req.ID) {
			if ex.Status == http.StatusOK && ex.Answered.After(approvedAt) {
				reads++
			}
		}
		g.Expect(reads).To(BeNumerically(">=", 2), "the approval was retrieved more than once")
		g.Consistently(func() []batchv1.Job { return w.Jobs() }).WithTimeout(2 * time.Second).Should(HaveLen(1))
		w.FinishJob(running.Status.JobName, true, "ok")
		w.WaitPhase("refund", tg.PhaseSucceeded)
		g.Expect(w.Jobs()).To(HaveLen(1), "one Job for one approval")
	})
}

// dryRun reports whether a create only checks the object (the manager dry-runs a Tool's Job template).
func dryRun(opts []client.CreateOption) bool {
	o := &client.CreateOptions{}
	o.ApplyOptions(opts)
	return len(o.DryRun) > 0
}

// 8. "Attempt to cancel pending requests when execution is abandoned."
func TestAdapter8_CancelsPendingRequestsWhenExecutionIsAbandoned(t *testing.T) {
	t.Run("deleted-while-pending", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		req := w.pending("refund")
		g.Expect(w.K8s.Delete(context.Background(), w.Get("refund"))).To(Succeed())
		w.WaitGone("refund", 20*time.Second)
		got, _ := w.P.Get(req.ID)
		g.Expect(got.Status).To(Equal(aapstrict.StatusCancelled), "the request was withdrawn")
		g.Expect(methods(w.exchanges("", req.ID), http.MethodDelete)).To(ContainElement(HaveField("Status", http.StatusOK)), "by DELETE /v1/requests/{id}")
		g.Expect(w.Jobs()).To(BeEmpty())
	})

	t.Run("tool-changed-while-pending", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		req := w.pending("refund")
		// A new generation of the Tool: an approval would cover the accepted version only.
		tool := &tg.Tool{}
		g.Expect(w.K8s.Get(context.Background(), client.ObjectKey{Namespace: w.NS, Name: "issue-refund"}, tool)).To(Succeed())
		tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: 2 * time.Minute}
		g.Expect(w.K8s.Update(context.Background(), tool)).To(Succeed())
		end := w.WaitPhase("refund", tg.PhaseCancelled, 20*time.Second)
		g.Expect(end.Status.Reason).To(Equal(tg.ReasonToolChanged))
		got, _ := w.P.Get(req.ID)
		g.Expect(got.Status).To(Equal(aapstrict.StatusCancelled), "the request was withdrawn")
		g.Expect(methods(w.exchanges("", req.ID), http.MethodDelete)).To(ContainElement(HaveField("Status", http.StatusOK)), "by DELETE /v1/requests/{id}")
		g.Expect(w.Jobs()).To(BeEmpty())
	})

	t.Run("pending-at-the-waiting-limit", func(t *testing.T) {
		// The provider's clock stands still: the request is still pending, never expired by the
		// provider, when the manager stops waiting at deadline_at + the final-state margin.
		clk := clocktesting.NewFakeClock(time.Now())
		w := newWorld(t, func(o *aapstrict.Options) { o.Clock = clk })
		g := w.G
		clk.SetTime(time.Now())
		// Our limit: 20s - the Tool's 5s - the 1s return margin = 14s after creation, room for the
		// 5s timeout and the 2s final-state margin.
		w.ToolCall("refund", "issue_refund", th.RefundArgs, 20*time.Second, ptr.To(5*time.Second))
		req := w.pending("refund")
		u := w.WaitPhase("refund", tg.PhaseApprovalUnavailable)
		g.Expect(u.Status.Reason).To(Equal(tg.ReasonWaitingLimitReached))
		g.Expect(u.Status.Message).To(ContainSubstring("no decision arrived before the waiting limit, so the request was withdrawn"))
		got, _ := w.P.Get(req.ID)
		g.Expect(got.Status).To(Equal(aapstrict.StatusCancelled), "withdrawn while still pending")
		deletes := methods(w.exchanges("", req.ID), http.MethodDelete)
		g.Expect(deletes).To(HaveLen(1))
		g.Expect(deletes[0].Status).To(Equal(http.StatusOK), "by DELETE /v1/requests/{id}")
		g.Expect(deletes[0].At).To(BeTemporally(">=", req.DeadlineAt.Add(th.TestTiming().FinalStateMargin)), "not before the limit")
		g.Expect(w.Jobs()).To(BeEmpty())
	})

	t.Run("deleted-before-the-request-id-was-recorded", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.P.DropNextResponse(1 << 30)
		tc := w.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
		g.Eventually(func() []aapstrict.Request { return w.P.List() }).WithTimeout(10 * time.Second).Should(HaveLen(1))
		g.Expect(w.K8s.Delete(context.Background(), w.Get("refund"))).To(Succeed())
		w.P.DropNextResponse(0)
		w.WaitGone("refund", 30*time.Second)
		all := w.P.List()
		g.Expect(all).To(HaveLen(1), "recovered with the same key, not created again")
		g.Expect(all[0].Key).To(Equal(string(tc.UID)))
		g.Expect(all[0].Status).To(Equal(aapstrict.StatusCancelled))
		g.Expect(methods(w.exchanges("", all[0].ID), http.MethodDelete)).To(ContainElement(HaveField("Status", http.StatusOK)))
		g.Expect(w.Jobs()).To(BeEmpty())
	})
}
