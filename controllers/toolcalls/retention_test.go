package toolcalls_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// Retention: a finished ToolCall is deleted once its time to live has passed, counted from when it
// finished (its Ready condition's lastTransitionTime); the manager's --finished-toolcall-ttl, a Tool's
// spec.finishedCallTTL over it, the label toolgate.dev/keep: "true" to keep one forever. A call that
// has not finished is never deleted.

func deletedCalls(outcome string) float64 {
	return th.MetricValue("toolgate_finished_toolcalls_deleted_total", map[string]string{"outcome": outcome})
}

// toolCallExists reports whether the ToolCall is still in the apiserver.
func toolCallExists(h *th.Harness, name string) func() bool {
	return func() bool {
		err := h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, &tg.ToolCall{})
		h.G.Expect(client.IgnoreNotFound(err)).NotTo(HaveOccurred())
		return err == nil
	}
}

// A call that ran is deleted once the manager's clock passes its TTL, by the requeue set for that
// moment (nothing else reconciles it here): not before, and with nothing asked of the provider. Its
// Job is owned by it, so the garbage collector deletes the Job with it (envtest runs none: the owner
// reference is what a cluster's collector follows), and a restart does not run the tool again.
func TestFinishedToolCallIsDeletedAfterItsTTL(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := th.New(t, env, th.WithClock(clk), th.WithFinishedCallTTL(time.Minute))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	deleted := deletedCalls(string(tg.PhaseSucceeded))

	// The manager's clock is put 3s short of the TTL as of the Job's end: the requeue at the TTL's
	// end comes within seconds, and finds the clock still short of it until the test moves it.
	clk.SetTime(time.Now().Add(time.Minute - 3*time.Second))
	h.FinishJob(running.Status.JobName, true, `{"refunded":true}`)
	done := h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(done.Finalizers).To(BeEmpty())
	stats := h.Provider.Stats()
	g.Consistently(toolCallExists(h, "refund")).WithTimeout(5*time.Second).Should(BeTrue(), "kept while the manager's clock is short of the TTL")

	clk.SetTime(clk.Now().Add(time.Minute))
	h.WaitGone("refund", 30*time.Second)
	g.Eventually(func() float64 { return deletedCalls(string(tg.PhaseSucceeded)) }).Should(Equal(deleted + 1))
	after := h.Provider.Stats()
	g.Expect(after.Cancels).To(Equal(stats.Cancels), "a finished call's deletion asks nothing of the provider")
	g.Expect(after.Submits).To(Equal(stats.Submits))

	jobs := h.Jobs()
	g.Expect(jobs).To(HaveLen(1))
	g.Expect(jobs[0].OwnerReferences).To(ConsistOf(And(
		HaveField("UID", done.UID), HaveField("Kind", "ToolCall"), HaveField("Controller", ptr.To(true)))),
		"the Job goes with its ToolCall through the garbage collector")

	h.Restart()
	g.Consistently(h.Jobs).WithTimeout(2 * time.Second).Should(HaveLen(1))
	g.Expect(h.Provider.Stats().Submits).To(Equal(stats.Submits), "nothing is asked again")
	g.Expect(toolCallExists(h, "refund")()).To(BeFalse())
}

// denyingTool makes a Tool whose rule denies every call (it ends Rejected at once, nobody is asked),
// with its own TTL when ttl is not nil.
func denyingTool(ttl *time.Duration) func(*tg.Tool) {
	return func(tool *tg.Tool) {
		tool.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "deny-all", Expression: "true", Action: tg.ActionDeny}}}
		if ttl != nil {
			tool.Spec.FinishedCallTTL = &metav1.Duration{Duration: *ttl}
		}
	}
}

// The Tool's TTL wins over the manager's, shorter or 0 (forever); the keep label keeps a call
// forever, until it is removed. A Tool's new TTL and a removed label apply at once, to calls that
// finished already.
func TestRetentionFollowsTheToolAndTheKeepLabel(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := th.New(t, env, th.WithClock(clk), th.WithFinishedCallTTL(time.Hour))
	g := h.G
	ctx := context.Background()
	h.Tool("issue-refund", "issue_refund", "", denyingTool(nil))
	h.Tool("restart-pod", "restart_pod", "", denyingTool(ptr.To(10*time.Minute)))
	rotate := h.Tool("rotate-key", "rotate_key", "", denyingTool(ptr.To(time.Duration(0))))
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, nil)
	kept := h.NewToolCall("refund-kept", "issue_refund", th.RefundArgs, time.Hour, nil)
	kept.Labels = map[string]string{tg.LabelKeep: "true"}
	g.Expect(h.K8s.Create(ctx, kept)).To(Succeed())
	h.ToolCall("restart", "restart_pod", `{}`, time.Hour, nil)
	h.ToolCall("rotate", "rotate_key", `{}`, time.Hour, nil)
	for _, name := range []string{"refund", "refund-kept", "restart", "rotate"} {
		g.Expect(h.WaitPhase(name, tg.PhaseRejected).Status.Reason).To(Equal(tg.ReasonPolicyDenied))
	}
	deleted := deletedCalls(string(tg.PhaseRejected))
	start := clk.Now()

	// 15 minutes on, the restart's Tool's 10m has passed; the manager's hour has not. A restart
	// reconciles every call at the new time.
	clk.SetTime(start.Add(15 * time.Minute))
	h.Restart()
	h.WaitGone("restart", 30*time.Second)
	g.Consistently(func() []bool {
		return []bool{toolCallExists(h, "refund")(), toolCallExists(h, "refund-kept")(), toolCallExists(h, "rotate")()}
	}).WithTimeout(2 * time.Second).Should(Equal([]bool{true, true, true}))

	// Two hours on, the manager's hour has passed: the call without a label goes, the labelled one
	// and the one whose Tool keeps its calls forever stay.
	clk.SetTime(start.Add(2 * time.Hour))
	h.Restart()
	h.WaitGone("refund", 30*time.Second)
	g.Consistently(func() []bool { return []bool{toolCallExists(h, "refund-kept")(), toolCallExists(h, "rotate")()} }).
		WithTimeout(2 * time.Second).Should(Equal([]bool{true, true}))

	// Without its label, the kept call goes: the label's removal reconciles it.
	g.Eventually(func() error {
		tc := h.Get("refund-kept")
		delete(tc.Labels, tg.LabelKeep)
		return h.K8s.Update(ctx, tc)
	}).Should(Succeed())
	h.WaitGone("refund-kept", 30*time.Second)

	// A TTL given to the Tool that kept its calls forever reaches the calls that finished already.
	g.Eventually(func() error {
		tool := &tg.Tool{}
		if err := h.K8s.Get(ctx, client.ObjectKeyFromObject(rotate), tool); err != nil {
			return err
		}
		tool.Spec.FinishedCallTTL = &metav1.Duration{Duration: time.Hour}
		return h.K8s.Update(ctx, tool)
	}).Should(Succeed())
	h.WaitGone("rotate", 30*time.Second)
	g.Eventually(func() float64 { return deletedCalls(string(tg.PhaseRejected)) }).Should(Equal(deleted + 4))
}

// A call that has not finished is never deleted, however long ago it was created: one waiting for a
// human and one whose Job runs, 20 hours after their creation by the manager's clock with a TTL of a
// minute, while a finished call beside them goes.
func TestUnfinishedToolCallsAreNeverDeleted(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := th.New(t, env, th.WithClock(clk), th.WithFinishedCallTTL(time.Minute))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("waiting", "issue_refund", th.RefundArgs, 48*time.Hour, ptr.To(23*time.Hour))
	h.ToolCall("running", "issue_refund", th.RefundArgs, time.Hour, nil)
	h.ToolCall("finished", "no_such_tool", th.RefundArgs, time.Hour, nil)
	h.PendingRequest("waiting")
	h.Approve(h.PendingRequest("running").ID, 5*time.Minute)
	h.WaitPhase("running", tg.PhaseRunning)
	h.WaitPhase("finished", tg.PhaseRejected)

	clk.SetTime(clk.Now().Add(20 * time.Hour))
	h.Restart()
	h.WaitGone("finished", 30*time.Second)
	g.Consistently(func(g Gomega) {
		g.Expect(h.Get("waiting").Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
		g.Expect(h.Get("running").Status.Phase).To(Equal(tg.PhaseRunning))
	}).WithTimeout(3 * time.Second).Should(Succeed())
	g.Expect(h.Jobs()).To(HaveLen(1))
}

// Without a TTL (the manager's default, 0) and with none on the Tool, finished calls are kept
// forever, as before retention existed.
func TestWithoutATTLFinishedCallsAreKept(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := th.New(t, env, th.WithClock(clk))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "", denyingTool(nil))
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, nil)
	h.WaitPhase("refund", tg.PhaseRejected)

	clk.SetTime(clk.Now().Add(10 * 365 * 24 * time.Hour))
	h.Restart()
	g.Consistently(toolCallExists(h, "refund")).WithTimeout(3 * time.Second).Should(BeTrue())
}

// A status that says a call finished long ago, written by someone else while its Job runs, does not
// delete the call (and its running Job with it): only once the Job has finished does it go.
func TestForgedFinishedStatusDoesNotDeleteARunningJob(t *testing.T) {
	h := th.New(t, env, th.WithFinishedCallTTL(time.Minute))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, time.Hour, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)

	long := metav1.NewTime(time.Now().Add(-24 * time.Hour).Truncate(time.Second))
	forgeStatus(h, "refund", func(tc *tg.ToolCall) {
		tc.Status.Phase = tg.PhaseSucceeded
		tc.Status.Reason = tg.ReasonJobSucceeded
		for i := range tc.Status.Conditions {
			if tc.Status.Conditions[i].Type == tg.ConditionReady {
				tc.Status.Conditions[i].Status = metav1.ConditionTrue
				tc.Status.Conditions[i].LastTransitionTime = long
			}
		}
	})
	g.Consistently(toolCallExists(h, "refund")).WithTimeout(3*time.Second).Should(BeTrue(), "its Job still runs")
	g.Expect(h.Jobs()).To(HaveLen(1))

	h.FinishJob(running.Status.JobName, true, `{"refunded":true}`)
	h.WaitGone("refund", 30*time.Second)
}

// A Tool's finished calls keep their retention when the Tool goes: deleted (as an MCPServer deletes
// the Tool of a tool its server no longer offers), its calls do not fall back to the manager's far
// shorter TTL, and are kept until a Tool carries the toolName again, whose TTL then applies. A call
// that never found a Tool follows the manager's TTL.
func TestFinishedCallsOfADeletedToolKeepTheirRetention(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := th.New(t, env, th.WithClock(clk), th.WithFinishedCallTTL(time.Minute))
	g := h.G
	ctx := context.Background()
	forever := h.Tool("rotate-key", "rotate_key", "", denyingTool(ptr.To(time.Duration(0))))
	h.ToolCall("rotate", "rotate_key", `{}`, time.Hour, nil)
	h.ToolCall("nowhere", "no_such_tool", `{}`, time.Hour, nil)
	g.Expect(h.WaitPhase("rotate", tg.PhaseRejected).Status.Reason).To(Equal(tg.ReasonPolicyDenied))
	g.Expect(h.WaitPhase("nowhere", tg.PhaseRejected).Status.Reason).To(Equal(tg.ReasonUnknownTool))

	g.Expect(h.K8s.Delete(ctx, forever)).To(Succeed())
	g.Eventually(func() error {
		return h.K8s.Get(ctx, client.ObjectKeyFromObject(forever), &tg.Tool{})
	}).Should(Satisfy(apierrors.IsNotFound))
	clk.SetTime(clk.Now().Add(2 * time.Hour))
	h.Restart()
	h.WaitGone("nowhere", 30*time.Second)
	g.Consistently(toolCallExists(h, "rotate")).WithTimeout(3*time.Second).Should(BeTrue(),
		"kept: its Tool kept its calls forever, and the manager's minute is not its retention")

	// A Tool that carries the toolName again brings its own TTL, here an hour: the call, finished
	// two hours ago, goes.
	h.Tool("rotate-key-v2", "rotate_key", "", denyingTool(ptr.To(time.Hour)))
	h.WaitGone("rotate", 30*time.Second)
}
