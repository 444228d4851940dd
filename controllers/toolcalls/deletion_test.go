package toolcalls_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// Deletion of a call that awaits approval: its request is withdrawn at the provider (cancelled, or
// recovered and cancelled), and the finalizer goes even when the provider cannot cancel or cannot be
// reached.

func TestDeletingAPendingToolCallCancelsItsRequest(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	h.G.Expect(env.Client.Delete(context.Background(), h.Get("refund"))).To(Succeed())
	h.WaitGone("refund", 20*time.Second)
	got, err := h.Provider.Get(req.ID)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(got.Status).To(Equal(provider.StatusCancelled))
	h.G.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElement(tg.ReasonCancelRequested))
}

// A human who decides while the deletion's DELETE is on its way: the provider answers 409
// already_terminal, the decision stays as it was at the provider, the ToolCall goes, and nothing runs.
func TestDeletionWhenADecisionRacesTheCancel(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	h.StopManager() // the approval made by the fault is not seen by a poll first
	g.Expect(h.Provider.Faults().Set(faults.Rule{Op: faults.OpCancel, Kind: faults.DecideBeforeCancel, Decision: provider.StatusApproved, Count: 1})).To(Succeed())
	g.Expect(env.Client.Delete(context.Background(), h.Get("refund"))).To(Succeed())
	h.Start()
	h.WaitGone("refund", 20*time.Second)
	got, err := h.Provider.Get(req.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(provider.StatusApproved), "the decision made first stands")
	g.Expect(h.Provider.Stats().Faults[faults.DecideBeforeCancel]).To(BeEquivalentTo(1))
	g.Eventually(func(g Gomega) {
		list := &eventsv1.EventList{}
		g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Reason == tg.ReasonCancelRequested {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ConsistOf("The ToolCall was deleted; its approval request had already ended approved at the provider, so nothing was cancelled and nothing runs."))
	}).Should(Succeed())
	g.Expect(h.Jobs()).To(BeEmpty())
}

// A provider without cancellation (501 on DELETE, as one that does not implement it answers) never
// holds up a deletion: the finalizer goes at once, a CancelFailed event says why, and the request
// stays pending at the provider until its deadline.
func TestDeletionNeverWaitsOnAProviderWithoutCancellation(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	g.Expect(h.Provider.Faults().Set(faults.Rule{Op: faults.OpCancel, Kind: faults.Error5xx, Status: http.StatusNotImplemented, Probability: 1})).To(Succeed())
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	g.Expect(env.Client.Delete(context.Background(), h.Get("refund"))).To(Succeed())
	h.WaitGone("refund", 20*time.Second)
	got, err := h.Provider.Get(req.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(provider.StatusPending))
	g.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElement(tg.ReasonCancelFailed))
	g.Expect(h.Provider.Stats().Faults[faults.Error5xx]).To(BeNumerically(">=", 1))
}

// A request whose id was never recorded (every submit response was lost) is recovered by the
// idempotent POST and cancelled when the ToolCall is deleted.
func TestDeletionRecoversAnUnrecordedRequestAndCancelsIt(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	g.Expect(h.Provider.Faults().Set(faults.Rule{Op: faults.OpSubmit, Kind: faults.DropAfterCommit, Probability: 1})).To(Succeed())
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	p := h.WaitPhase("refund", tg.PhasePending)
	g.Expect(p.Status.Reason).To(Equal(tg.ReasonSubmitFailed))
	g.Expect(p.Status.RequestID).To(BeEmpty())
	g.Eventually(func() int64 { return h.Provider.Stats().Creates }).Should(BeEquivalentTo(1))
	h.Provider.Faults().Clear()
	g.Expect(env.Client.Delete(context.Background(), p)).To(Succeed())
	h.WaitGone("refund", 20*time.Second)
	all, err := h.Provider.List("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(all).To(HaveLen(1), "the replayed POST found the same request, no second one")
	g.Expect(all[0].Status).To(Equal(h.WithdrawnStatus()))
}

func TestDeletionNeverHangsOnAnUnreachableProvider(t *testing.T) {
	h := th.New(t, env, th.WithCancelGiveUp(2*time.Second))
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.PendingRequest("refund")
	h.G.Expect(h.Provider.Faults().Set(faults.Rule{Kind: faults.Reset, Probability: 1})).To(Succeed())
	h.G.Expect(env.Client.Delete(context.Background(), h.Get("refund"))).To(Succeed())
	h.WaitGone("refund", 30*time.Second)
	h.G.Eventually(func() []string { return h.EventReasons("refund") }).Should(ContainElement(tg.ReasonCancelFailed))
}
