package toolcalls_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// withRules gives a harness Tool approval rules.
func withRules(rules ...tg.ApprovalRule) func(*tg.Tool) {
	return func(t *tg.Tool) { t.Spec.Approval = &tg.ApprovalPolicy{Rules: rules} }
}

// refundRules are docs/policies.md's worked example.
var refundRules = withRules(
	tg.ApprovalRule{Name: "never-prod", Expression: `has(arguments.account) && arguments.account.startsWith("prod-")`, Action: tg.ActionDeny},
	tg.ApprovalRule{Name: "small-gbp-refunds", Expression: `arguments.currency == "GBP" && arguments.amount < 5000`, Action: tg.ActionApprove},
)

func policyDecisions(action string) float64 {
	return th.MetricValue("toolgate_policy_decisions_total", map[string]string{"action": action})
}

// An Approve rule runs the call without a human: no request reaches the provider, the rule is the
// decision's source, the approval carries a validity window and the Job is created.
func TestApproveRuleRunsTheCallWithoutAHuman(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	approvals := policyDecisions("Approve")
	waits := th.MetricValue("toolgate_approval_wait_seconds", nil)
	tool := h.Tool("issue-refund", "issue_refund", th.RefundSchema, refundRules)
	tc := h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)

	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	g.Expect(running.Status.JobName).To(Equal(toolcalls.JobName(tc)))
	d := running.Status.Decision
	g.Expect(d).NotTo(BeNil())
	g.Expect(d.Status).To(Equal(provider.StatusApproved))
	g.Expect(d.Source).To(Equal(tg.DecisionSourcePolicy))
	g.Expect(d.Rule).To(Equal("small-gbp-refunds"))
	g.Expect(d.DecidedAt).NotTo(BeNil())
	g.Expect(d.ExpiresAt).NotTo(BeNil())
	g.Expect(d.ExpiresAt.Time).To(BeTemporally(">", d.DecidedAt.Time))
	// Never past the room the waiting limit leaves to run the tool (2m - 5s execution - 1s return margin).
	g.Expect(d.ExpiresAt.Time).NotTo(BeTemporally(">", running.CreationTimestamp.Add(2*time.Minute-6*time.Second)))
	g.Expect(running.Status.RequestID).To(BeEmpty())
	approved := meta.FindStatusCondition(running.Status.Conditions, tg.ConditionApproved)
	g.Expect(approved.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(approved.Reason).To(Equal(tg.ReasonPolicyApproved))
	g.Expect(approved.Message).To(ContainSubstring("small-gbp-refunds"))
	g.Expect(running.Annotations).To(HaveKeyWithValue(tg.AnnotationToolUID, string(tool.UID)))
	g.Expect(running.Annotations).To(HaveKeyWithValue(tg.AnnotationToolGeneration, "1"))

	st := h.Provider.Stats()
	g.Expect(st.Submits).To(BeZero(), "no request is sent for a call a rule approved")
	g.Expect(h.Jobs()).To(HaveLen(1))
	g.Eventually(func() []string { return h.Get("refund").Finalizers }).ShouldNot(ContainElement(tg.Finalizer))
	g.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElements(tg.ReasonPolicyApproved, tg.ReasonJobCreated))
	g.Expect(policyDecisions("Approve")).To(Equal(approvals + 1))
	g.Expect(th.MetricValue("toolgate_approval_wait_seconds", nil)).To(Equal(waits), "no provider answer was waited for")

	h.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)
	done := h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(done.Status.Reason).To(Equal(tg.ReasonJobSucceeded))
	g.Expect(done.Status.Decision.Rule).To(Equal("small-gbp-refunds"))
	g.Expect(policyDecisions("Approve")).To(Equal(approvals+1), "counted once")
}

// A Deny rule ends the call Rejected, naming the rule; nothing reaches the provider and no Job runs.
func TestDenyRuleRejectsTheCallWithoutARequest(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	denials := policyDecisions("Deny")
	h.Tool("issue-refund", "issue_refund", "", refundRules)
	h.ToolCall("refund", "issue_refund", `{"account": "prod-eu", "amount": 100, "currency": "GBP"}`, 2*time.Minute, nil)

	rejected := h.WaitPhase("refund", tg.PhaseRejected)
	g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonPolicyDenied))
	g.Expect(rejected.Status.Message).To(Equal("Rule never-prod of Tool issue-refund denied the call (spec.approval); no human was asked. The call did not run."))
	g.Expect(rejected.Status.Decision).To(Equal(&tg.Decision{Status: provider.StatusDenied, Source: tg.DecisionSourcePolicy, Rule: "never-prod"}))
	g.Expect(rejected.Finalizers).NotTo(ContainElement(tg.Finalizer))
	g.Expect(meta.FindStatusCondition(rejected.Status.Conditions, tg.ConditionExecuted).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(h.Provider.Stats().Submits).To(BeZero())
	g.Expect(h.Jobs()).To(BeEmpty())
	g.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElement(tg.ReasonPolicyDenied))
	g.Eventually(func() float64 { return policyDecisions("Deny") }).Should(Equal(denials + 1))
	g.Consistently(func() float64 { return policyDecisions("Deny") }, time.Second).Should(Equal(denials+1), "counted once")
}

// Require (or no rule matching, or a rule that cannot be evaluated) asks the provider as if the Tool
// had no rules, and the decision is the provider's.
func TestRequireNoMatchAndErrorsAskAHuman(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "", withRules(
		tg.ApprovalRule{Name: "euro-needs-a-human", Expression: `arguments.currency == "EUR"`, Action: tg.ActionRequire},
		tg.ApprovalRule{Name: "never-prod", Expression: `arguments.account.startsWith("prod-")`, Action: tg.ActionDeny},
		tg.ApprovalRule{Name: "small", Expression: `arguments.amount < 5000`, Action: tg.ActionApprove},
	))
	h.ToolCall("require", "issue_refund", `{"account": "a", "amount": 100, "currency": "EUR"}`, 2*time.Minute, nil)
	h.ToolCall("nomatch", "issue_refund", `{"account": "a", "amount": 9000, "currency": "GBP"}`, 2*time.Minute, nil)
	// No account: never-prod cannot be evaluated, so the later Approve rule is not reached either.
	h.ToolCall("error", "issue_refund", `{"amount": 100, "currency": "GBP"}`, 2*time.Minute, nil)

	for _, name := range []string{"require", "nomatch", "error"} {
		req := h.PendingRequest(name)
		g.Expect(h.Get(name).Status.Decision).To(BeNil(), name)
		h.Approve(req.ID, 5*time.Minute)
		running := h.WaitPhase(name, tg.PhaseRunning)
		g.Expect(running.Status.Decision.Source).To(Equal(tg.DecisionSourceProvider), name)
		g.Expect(running.Status.Decision.Rule).To(BeEmpty(), name)
		g.Expect(meta.FindStatusCondition(running.Status.Conditions, tg.ConditionApproved).Reason).To(Equal(tg.ReasonApproved), name)
	}
	g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(3))
	g.Eventually(func() []string { return h.EventReasons("error") }).Should(ContainElement(tg.ReasonPolicyEvaluationFailed))
	g.Expect(h.EventReasons("require")).NotTo(ContainElement(tg.ReasonPolicyEvaluationFailed))
}

// A Tool whose rules do not compile says so in its status, with the compiler's message, and its calls
// end Rejected with that message; nothing is sent. Fixing the Tool clears the condition.
func TestRulesThatDoNotCompileRejectEveryCall(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	tool := h.Tool("issue-refund", "issue_refund", "", withRules(
		tg.ApprovalRule{Name: "office-hours", Expression: `now.getHours() < 18`, Action: tg.ActionApprove},
	))
	wantProblem := "spec.approval.rules[0] (office-hours): expression does not compile: at 1:1: undeclared reference to 'now'"

	var cond *metav1.Condition
	g.Eventually(func(g Gomega) {
		got := &tg.Tool{}
		g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(tool), got)).To(Succeed())
		cond = meta.FindStatusCondition(got.Status.Conditions, tg.ConditionApprovalRulesReady)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(cond.Reason).To(Equal(tg.ReasonInvalidApprovalRules))
	g.Expect(cond.Message).To(ContainSubstring(wantProblem))
	g.Expect(cond.ObservedGeneration).To(BeEquivalentTo(1))

	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	rejected := h.WaitPhase("refund", tg.PhaseRejected)
	g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonInvalidApprovalRules))
	g.Expect(rejected.Status.Message).To(ContainSubstring(wantProblem))
	g.Expect(rejected.Status.Message).To(HavePrefix("Tool issue-refund: its spec.approval does not compile"))
	g.Expect(h.Provider.Stats().Submits).To(BeZero())
	g.Expect(h.Jobs()).To(BeEmpty())

	// The admin fixes the rule: a new generation, a new condition.
	g.Eventually(func() error {
		got := &tg.Tool{}
		if err := h.K8s.Get(ctx, client.ObjectKeyFromObject(tool), got); err != nil {
			return err
		}
		got.Spec.Approval.Rules[0].Expression = `arguments.amount < 100`
		return h.K8s.Update(ctx, got)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := &tg.Tool{}
		g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(tool), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, tg.ConditionApprovalRulesReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(tg.ReasonApprovalRulesCompiled))
		g.Expect(c.ObservedGeneration).To(BeEquivalentTo(2))
		g.Expect(got.Status.ObservedGeneration).To(BeEquivalentTo(2))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	h.ToolCall("refund-2", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.PendingRequest("refund-2")
}

// toolChanges are the ways a Tool stops being the version a ToolCall was accepted against, with what
// the ToolCall's message then says.
var toolChanges = []struct {
	name    string
	change  func(h *th.Harness, tool *tg.Tool)
	message string
}{
	{"edited", func(h *th.Harness, tool *tg.Tool) {
		h.G.Eventually(func() error {
			got := &tg.Tool{}
			if err := h.K8s.Get(context.Background(), client.ObjectKeyFromObject(tool), got); err != nil {
				return err
			}
			got.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "echo something else"}
			return h.K8s.Update(context.Background(), got)
		}).Should(Succeed())
	}, "Tool issue-refund was changed after the ToolCall was accepted (generation 2, accepted against 1)"},
	{"deleted and created again", func(h *th.Harness, tool *tg.Tool) {
		// While the manager is down, so that it never sees the Tool missing; it sees the new one
		// when it starts again.
		h.StopManager()
		deleteTool(h, tool)
		h.Tool("issue-refund", "issue_refund", "")
		h.Start()
	}, "Tool issue-refund was deleted and created again after the ToolCall was accepted"},
	{"deleted", deleteTool, "the Tool with toolName issue_refund that the ToolCall was accepted against was deleted"},
}

func deleteTool(h *th.Harness, tool *tg.Tool) {
	h.G.Expect(h.K8s.Delete(context.Background(), tool)).To(Succeed())
	h.G.Eventually(func() error {
		return h.K8s.Get(context.Background(), client.ObjectKeyFromObject(tool), &tg.Tool{})
	}).Should(Satisfy(apierrors.IsNotFound))
}

// An approval covers the version of the Tool the call was accepted against. A Tool that changes while
// its call awaits a decision (edited, deleted, or deleted and created again) withdraws the request at
// once, so no human reviews a call whose approval could never run: Cancelled with ToolChanged, never
// Denied, and no Job. A provider without cancellation (501 on DELETE) keeps the request until its
// deadline; the call ends all the same, and approving the request then runs nothing.
func TestToolChangedWhileAwaitingApprovalWithdrawsTheRequest(t *testing.T) {
	for _, c := range toolChanges {
		for _, canCancel := range []bool{true, false} {
			name := c.name
			if !canCancel {
				name += ", provider without cancellation"
			}
			t.Run(name, func(t *testing.T) { toolChangedWhileAwaitingApproval(t, c.change, c.message, canCancel) })
		}
	}
}

func toolChangedWhileAwaitingApproval(t *testing.T, change func(*th.Harness, *tg.Tool), message string, canCancel bool) {
	h := th.New(t, env)
	g := h.G
	tool := h.Tool("issue-refund", "issue_refund", "")
	if !canCancel {
		g.Expect(h.Provider.Faults().Set(faults.Rule{Op: faults.OpCancel, Kind: faults.Error5xx, Status: http.StatusNotImplemented, Probability: 1})).To(Succeed())
	}
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	change(h, tool)

	cancelled := h.WaitPhase("refund", tg.PhaseCancelled)
	g.Expect(cancelled.Status.Reason).To(Equal(tg.ReasonToolChanged))
	g.Expect(cancelled.Status.Message).To(ContainSubstring(message))
	g.Expect(cancelled.Status.Message).To(HaveSuffix("The call did not run."))
	g.Expect(cancelled.Status.Message).NotTo(ContainSubstring("denied"))
	g.Expect(cancelled.Status.JobName).To(BeEmpty())
	g.Expect(meta.FindStatusCondition(cancelled.Status.Conditions, tg.ConditionExecuted).Status).To(Equal(metav1.ConditionFalse))
	got, err := h.Provider.Get(req.ID)
	g.Expect(err).NotTo(HaveOccurred())
	if canCancel {
		g.Expect(got.Status).To(Equal(provider.StatusCancelled), "the request is withdrawn when the provider can cancel it")
	} else {
		g.Expect(got.Status).To(Equal(provider.StatusPending), "a provider without cancellation keeps it until its deadline")
	}
	// Events are written asynchronously (the recorder's broadcaster): they arrive after the status.
	g.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElement(tg.ReasonToolChanged))
	if !canCancel {
		g.Expect(cancelled.Status.Message).To(ContainSubstring("the provider cannot withdraw the request"))
		g.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElement(tg.ReasonCancelFailed))
		h.Approve(req.ID, 5*time.Minute)
	}
	g.Consistently(func(g Gomega) {
		g.Expect(h.Jobs()).To(BeEmpty())
		got := h.Get("refund")
		g.Expect(got.Status.Phase).To(Equal(tg.PhaseCancelled))
		g.Expect(got.Status.Reason).To(Equal(tg.ReasonToolChanged))
	}, time.Second).Should(Succeed())
}

// A decision a human made before the Tool changed is reported as that decision, also when the manager
// learns of it only when it goes to withdraw the request (it was down meanwhile): a denial stays
// Denied, an approval ends Failed (ToolChanged) at the run gate: the withdrawal's DELETE answers 409
// already_terminal, and the manager reads the decision the request holds.
func TestToolChangedAfterADecisionKeepsTheDecision(t *testing.T) {
	for _, status := range []string{provider.StatusDenied, provider.StatusApproved} {
		t.Run(status, func(t *testing.T) {
			h := th.New(t, env)
			g := h.G
			tool := h.Tool("issue-refund", "issue_refund", "")
			h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			req := h.PendingRequest("refund")
			h.StopManager()
			exp := time.Now().Add(5 * time.Minute)
			_, err := h.Provider.Decide(req.ID, status, "Decided before the Tool changed.", &exp)
			g.Expect(err).NotTo(HaveOccurred())
			toolChanges[0].change(h, tool)
			h.Start()

			if status == provider.StatusDenied {
				denied := h.WaitPhase("refund", tg.PhaseDenied)
				g.Expect(denied.Status.Reason).To(Equal(tg.ReasonDenied))
				g.Expect(denied.Status.Message).To(ContainSubstring("Decided before the Tool changed."))
				return
			}
			failed := h.WaitPhase("refund", tg.PhaseFailed)
			g.Expect(failed.Status.Reason).To(Equal(tg.ReasonToolChanged))
			g.Expect(failed.Status.Decision.Status).To(Equal(provider.StatusApproved))
			g.Consistently(h.Jobs, time.Second).Should(BeEmpty())
		})
	}
}

// A Tool that changes between a human's approval and the Job (here the cluster refuses the Job for a
// while) does not run either: Failed with ToolChanged, the approval recorded, never Denied, no Job.
// A Tool deleted for good ends the call Failed with InvalidTool: there is no Tool to run.
func TestToolChangedBetweenApprovalAndJobDoesNotRun(t *testing.T) {
	for _, c := range toolChanges {
		t.Run(c.name, func(t *testing.T) {
			h := th.New(t, env)
			g := h.G
			unblock := refuseJobs(h)
			tool := h.Tool("issue-refund", "issue_refund", "")
			h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
			g.Eventually(func(g Gomega) {
				d := h.Get("refund").Status.Decision
				g.Expect(d).NotTo(BeNil())
				g.Expect(d.Status).To(Equal(provider.StatusApproved))
			}).WithTimeout(30 * time.Second).Should(Succeed())
			g.Expect(h.Jobs()).To(BeEmpty())
			c.change(h, tool)
			unblock()

			failed := h.WaitPhase("refund", tg.PhaseFailed, time.Minute)
			if c.name == "deleted" {
				g.Expect(failed.Status.Reason).To(Equal(tg.ReasonInvalidTool))
				// Which of the two says so depends on whether the cache had seen the deletion when the
				// run gate looked: the Tool's lookup, or the live read that follows it.
				g.Expect(failed.Status.Message).To(Or(
					ContainSubstring(`no Tool in namespace `+h.NS+` has spec.toolName "issue_refund"`),
					ContainSubstring(`could not start: Tool issue-refund was deleted.`)))
			} else {
				g.Expect(failed.Status.Reason).To(Equal(tg.ReasonToolChanged))
				g.Expect(failed.Status.Message).To(ContainSubstring(c.message))
			}
			g.Expect(failed.Status.Message).To(ContainSubstring("The call was approved but could not start"))
			g.Expect(failed.Status.Message).To(HaveSuffix("The call did not run."))
			g.Expect(failed.Status.Decision.Status).To(Equal(provider.StatusApproved))
			g.Expect(failed.Status.JobName).To(BeEmpty())
			g.Expect(meta.FindStatusCondition(failed.Status.Conditions, tg.ConditionExecuted).Status).To(Equal(metav1.ConditionFalse))
			g.Consistently(h.Jobs, time.Second).Should(BeEmpty())
		})
	}
}

// A policy approval is bound the same way: a call approved by a rule whose Job the cluster refuses
// for a while (an admission policy) does not run once the Tool changed, even after the refusal ends.
func TestPolicyApprovedCallIsBoundToTheToolVersion(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	unblock := refuseJobs(h)
	tool := h.Tool("issue-refund", "issue_refund", "", refundRules)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))

	g.Eventually(func(g Gomega) {
		d := h.Get("refund").Status.Decision
		g.Expect(d).NotTo(BeNil())
		g.Expect(d.Source).To(Equal(tg.DecisionSourcePolicy))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	pending := h.Get("refund")
	g.Expect(pending.Status.Phase).To(Equal(tg.PhasePending))
	g.Expect(pending.Status.Reason).To(Equal(tg.ReasonPolicyApproved))
	g.Expect(meta.FindStatusCondition(pending.Status.Conditions, tg.ConditionApproved).Reason).To(Equal(tg.ReasonPolicyApproved))
	g.Expect(h.Jobs()).To(BeEmpty())

	g.Eventually(func() error {
		got := &tg.Tool{}
		if err := h.K8s.Get(ctx, client.ObjectKeyFromObject(tool), got); err != nil {
			return err
		}
		got.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "echo something else"}
		return h.K8s.Update(ctx, got)
	}).Should(Succeed())
	unblock()

	failed := h.WaitPhase("refund", tg.PhaseFailed, time.Minute)
	g.Expect(failed.Status.Reason).To(Equal(tg.ReasonToolChanged))
	g.Expect(failed.Status.Message).To(ContainSubstring("(generation 2, accepted against 1)"))
	g.Expect(failed.Status.Decision.Rule).To(Equal("small-gbp-refunds"))
	g.Consistently(h.Jobs, time.Second).Should(BeEmpty())
	g.Expect(h.Provider.Stats().Submits).To(BeZero())
}

// refuseJobs makes the apiserver refuse (Forbidden) every Job created in the harness namespace, dry
// runs excepted, with a ValidatingAdmissionPolicy; it returns once the policy is in force, and the
// function it returns lifts it.
func refuseJobs(h *th.Harness) func() {
	h.T.Helper()
	ctx := context.Background()
	name := "refuse-jobs-" + h.NS
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "request.dryRun == true",
				Message:    "Jobs are refused in this namespace for now",
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": h.NS},
			}},
		},
	}
	h.G.Expect(h.K8s.Create(ctx, policy)).To(Succeed())
	h.G.Expect(h.K8s.Create(ctx, binding)).To(Succeed())
	lift := func() {
		_ = h.K8s.Delete(ctx, binding)
		_ = h.K8s.Delete(ctx, policy)
	}
	h.T.Cleanup(lift)
	probe := func() error {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: h.NS},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "probe", Image: "busybox:1.36"}},
			}}},
		}
		err := h.K8s.Create(ctx, job)
		if err == nil {
			_ = h.K8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
		}
		return err
	}
	h.G.Eventually(probe).WithTimeout(30*time.Second).Should(Satisfy(apierrors.IsForbidden), "the policy is in force")
	return lift
}

// A Tool changed before the request was submitted (here: created with the finalizer's record already
// in place, as a retry after a crash would find it) ends Rejected with ToolChanged; no human is asked.
func TestToolChangedBeforeSubmissionIsRejected(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	tool := h.Tool("issue-refund", "issue_refund", "")
	tc := h.NewToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	tc.Finalizers = []string{tg.Finalizer}
	tc.Annotations = map[string]string{
		tg.AnnotationExecutionTimeout: "5s", tg.AnnotationApprovalTimeout: "1m0s",
		tg.AnnotationToolUID: string(tool.UID), tg.AnnotationToolGeneration: "7",
	}
	g.Expect(h.K8s.Create(context.Background(), tc)).To(Succeed())
	h.Start()

	rejected := h.WaitPhase("refund", tg.PhaseRejected)
	g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonToolChanged))
	g.Expect(rejected.Status.Message).To(ContainSubstring("Tool issue-refund was changed after the ToolCall was accepted (generation 1, accepted against 7)"))
	g.Expect(strings.Count(rejected.Status.Message, "did not run")).To(Equal(1))
	g.Expect(h.Jobs()).To(BeEmpty())
}

// The rules see who created the call, as admission recorded it in spec.requester.
func TestRulesSeeTheRequester(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "", withRules(
		tg.ApprovalRule{Name: "admins-only-by-hand", Expression: `"system:masters" in requester.groups && requester.username != ""`, Action: tg.ActionDeny},
	))
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	rejected := h.WaitPhase("refund", tg.PhaseRejected)
	g.Expect(rejected.Spec.Requester).NotTo(BeNil(), "admission recorded the requester")
	g.Expect(rejected.Spec.Requester.Groups).To(ContainElement("system:masters"))
	g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonPolicyDenied))
	g.Expect(rejected.Status.Decision.Rule).To(Equal("admins-only-by-hand"))
}

// A manager that dies while starting a rule-approved call leaves no status behind: the rule's decision
// is only in memory. If the Tool changes while it is down, the next manager must neither report a call
// whose Job exists as not run, nor put to a human (even to withdraw it) a call that no request was
// ever submitted for.
func TestRuleApprovedCallSurvivesACrashAndAToolEdit(t *testing.T) {
	for _, c := range []struct {
		window string
		phase  tg.ToolCallPhase
		reason string
		jobs   int
	}{
		{afterJobCreate, tg.PhaseRunning, tg.ReasonJobCreated, 1},
		{beforeJobCreate, tg.PhaseRejected, tg.ReasonToolChanged, 0},
	} {
		t.Run(c.window, func(t *testing.T) {
			h := th.New(t, env)
			g := h.G
			ctx := context.Background()
			crashed := crashAt(h, c.window)
			h.StopManager()
			h.Start()
			tool := h.Tool("issue-refund", "issue_refund", "", refundRules)
			h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			g.Eventually(crashed).WithTimeout(20 * time.Second).Should(BeClosed())
			h.StopManager()
			down := h.Get("refund")
			g.Expect(down.Status.Phase).To(BeEmpty(), "the dead manager wrote no status")
			g.Expect(down.Annotations).To(HaveKeyWithValue(tg.AnnotationApprovalRule, "small-gbp-refunds"))
			g.Expect(h.Jobs()).To(HaveLen(c.jobs))

			g.Eventually(func() error {
				got := &tg.Tool{}
				if err := h.K8s.Get(ctx, client.ObjectKeyFromObject(tool), got); err != nil {
					return err
				}
				got.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "echo something else"}
				return h.K8s.Update(ctx, got)
			}).Should(Succeed())
			h.Restart()

			ended := h.WaitPhase("refund", c.phase, time.Minute)
			g.Expect(ended.Status.Reason).To(Equal(c.reason))
			g.Consistently(h.Jobs, time.Second).Should(HaveLen(c.jobs))
			g.Expect(h.Provider.Stats().Submits).To(BeZero(), "no request is submitted, or recovered to withdraw it, for a call a rule approved")
		})
	}
}
