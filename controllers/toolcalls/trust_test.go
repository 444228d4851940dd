package toolcalls_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// The attacks of docs/security.md that need only the right to write toolcalls/status (or to create
// Pods): each would start a tool, or say what it returned, without a human or the Tool's rule. The
// manager defends itself here without the admission policies, which envtest does not install.

// forgeStatus writes the ToolCall's status as someone who holds update on toolcalls/status would.
func forgeStatus(h *th.Harness, name string, forge func(*tg.ToolCall)) {
	h.T.Helper()
	h.G.Eventually(func() error {
		tc := h.Get(name)
		forge(tc)
		return h.K8s.Status().Update(context.Background(), tc)
	}).Should(Succeed())
}

// A rule's approval written into the status of a call that waits for a human starts nothing: the
// Tool's rules decide again, put the call back to its human, and only the human's approval runs it.
func TestForgedPolicyApprovalInStatusStartsNothing(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	later := metav1.NewTime(now.Add(10 * time.Minute))
	forgeStatus(h, "refund", func(tc *tg.ToolCall) {
		tc.Status.Phase = tg.PhasePending
		tc.Status.Reason = tg.ReasonPolicyApproved
		tc.Status.Decision = &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "anything", DecidedAt: &now, ExpiresAt: &later}
	})
	// The manager answers the forged status by submitting again, which finds the call's own pending
	// request: the call waits for its human, with no decision.
	g.Eventually(func(g Gomega) {
		tc := h.Get("refund")
		g.Expect(tc.Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
		g.Expect(tc.Status.Decision).To(BeNil())
		g.Expect(tc.Status.RequestID).To(Equal(req.ID))
	}).Should(Succeed())
	g.Expect(h.EventReasons("refund")).To(ContainElement(tg.ReasonDecisionNotVerified))
	g.Expect(h.Jobs()).To(BeEmpty(), "no Job without a human's approval")
	g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1))

	h.Approve(req.ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Decision.Source).To(Equal(tg.DecisionSourceProvider))
	g.Expect(h.Jobs()).To(HaveLen(1))
}

// status.requestID pointed at another call's approved request, with the same tool and arguments,
// does not run the call twice on one approval: the approval counts only for the request submitted
// under the call's own idempotency key, which the call follows again.
func TestRequestIDOfAnotherCallsApprovalStartsNothing(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	first, second := twoPendingRefunds(h)
	h.Approve(first.ID, 5*time.Minute)
	h.WaitPhase("first", tg.PhaseRunning)

	forgeStatus(h, "second", func(tc *tg.ToolCall) { tc.Status.RequestID = first.ID })
	g.Eventually(func() []string { return h.EventReasons("second") }).Should(ContainElement(tg.ReasonRequestNotOwn))
	g.Eventually(func(g Gomega) {
		tc := h.Get("second")
		g.Expect(tc.Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
		g.Expect(tc.Status.RequestID).To(Equal(second.ID))
		g.Expect(tc.Status.Decision).To(BeNil())
	}).Should(Succeed())
	g.Expect(h.Jobs()).To(HaveLen(1), "one approval, one Job")

	h.Approve(second.ID, 5*time.Minute)
	h.WaitPhase("second", tg.PhaseRunning)
	g.Expect(h.Jobs()).To(HaveLen(2))
}

// A Pod that only carries a ToolCall's UID label, which anyone who may create Pods in the namespace
// can write, does not supply the call's result: only the Pods of its Job speak for the tool.
func TestLabelledPodDoesNotSupplyTheResult(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	tc := h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)

	impostor := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a-impostor", Namespace: h.NS, Labels: map[string]string{tg.LabelToolCallUID: string(tc.UID)}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "tool", Image: "busybox:1.36"}}},
	}
	g.Expect(h.K8s.Create(ctx, impostor)).To(Succeed())
	impostor.Status.Phase = corev1.PodSucceeded
	impostor.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tool", Image: "busybox:1.36",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: `{"refund":"forged"}`}}}}
	g.Expect(h.K8s.Status().Update(ctx, impostor)).To(Succeed())
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(impostor), impostor)).To(Succeed())
	g.Expect(impostor.Status.ContainerStatuses).NotTo(BeEmpty())

	// The Job's own Pod ends without a termination message.
	h.FinishJob(running.Status.JobName, true, "")
	done := h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(done.Status.Result).To(BeEmpty())
}

// A number that RFC 8785 (the form approvals are compared and shown in) cannot carry exactly ends
// the call Rejected before anyone is asked, naming where it is and what to do.
func TestInexactNumberIsRejectedBeforeAnyoneIsAsked(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("big", "issue_refund", `{"payment_id":"p","amount":9007199254740993,"currency":"GBP"}`, 2*time.Minute, nil)
	h.ToolCall("exact", "issue_refund", `{"payment_id":"p","amount":9007199254740992,"currency":"GBP"}`, 2*time.Minute, nil)

	r := h.WaitPhase("big", tg.PhaseRejected)
	g.Expect(r.Status.Reason).To(Equal(tg.ReasonInvalidArguments))
	g.Expect(r.Status.Message).To(And(ContainSubstring("spec.arguments at /amount"), ContainSubstring("9007199254740993"), ContainSubstring("as a string")))
	h.PendingRequest("exact")
	g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1), "only the exact call was put to a human")
}

// A provider object cannot send a Secret of its namespace anywhere: the manager reads only the
// Secrets that consent to serve it (the label naming it), and its Ready condition says the same of a
// Secret that did not consent as of one that does not exist. Labelled, the same Secret serves it.
func TestProviderObjectUsesOnlySecretsThatConsent(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	_, url := h.StartTeamProvider()
	// The victim: a Secret that holds a working credential but serves no provider object (or
	// serves another one).
	h.CredentialSecret("payments-db", th.TeamCredential, nil)
	h.CredentialSecret("other-team", th.TeamCredential, th.Serves("other"))
	h.ApprovalProvider("team", url, "payments-db")
	h.ApprovalProvider("team-other", url, "other-team")
	h.ApprovalProvider("team-missing", url, "no-such-secret")

	unconsented := h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialUnavailable)
	other := h.ProviderReady("team-other", metav1.ConditionFalse, tg.ReasonCredentialUnavailable)
	missing := h.ProviderReady("team-missing", metav1.ConditionFalse, tg.ReasonCredentialUnavailable)
	same := func(msg, secret, object string) string {
		return strings.NewReplacer(secret, "SECRET", "/"+object+":", "/OBJECT:", "="+object, "=OBJECT").Replace(msg)
	}
	g.Expect(same(unconsented.Message, "payments-db", "team")).To(Equal(same(missing.Message, "no-such-secret", "team-missing")),
		"a Secret that did not consent reads as one that does not exist")
	g.Expect(same(other.Message, "other-team", "team-other")).To(Equal(same(missing.Message, "no-such-secret", "team-missing")))
	g.Expect(unconsented.Message).To(ContainSubstring(tg.LabelProvider+"=team"), "the message names the fix")

	h.CredentialSecret("payments-db", th.TeamCredential, th.Serves("team"))
	h.ProviderReady("team", metav1.ConditionTrue, tg.ReasonReachable)
}

// A ToolCall created with an acceptance record that names ClusterApprovalProvider/default, while the
// namespace's ApprovalProvider/default serves its Tool's calls, is not put to that other approver
// pool: the record is checked against what the Tool resolves to.
func TestForgedRecordCannotChooseTheApproverPool(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team := h.ReadyTeamProvider(tg.DefaultProviderName)
	tool := h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	forged := versioned(record("5s", "60s"), tool)
	forged[tg.AnnotationProvider] = tg.KindClusterApprovalProvider + "/" + tg.DefaultProviderName
	forge(h, "refund", th.RefundArgs, 2*time.Minute, nil, forged)
	flags := versioned(record("5s", "60s"), tool) // no provider annotation: the manager's flags
	forge(h, "flags", th.RefundArgs, 2*time.Minute, nil, flags)

	for _, name := range []string{"refund", "flags"} {
		r := h.WaitPhase(name, tg.PhaseRejected)
		g.Expect(r.Status.Reason).To(Equal(tg.ReasonAcceptanceRecordInvalid), name)
		g.Expect(r.Status.Message).To(ContainSubstring("go to ApprovalProvider "+h.NS+"/default"), name)
	}
	// The withdrawal of a rejected record replays its submission where the record says it went, and
	// cancels what that finds: nothing is left for anyone to decide.
	expectNothingLeftPending(h)
	g.Expect(team.List("")).To(BeEmpty())
}

// A human's approval from the provider a call was accepted with does not start the call once that
// provider no longer serves the Tool's calls (here the namespace got its own default provider while
// the call waited at the manager's): the approval is not the current approver pool's.
func TestApprovalFromAProviderThatNoLongerServesTheToolDoesNotRun(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	h.ReadyTeamProvider(tg.DefaultProviderName)

	h.Approve(req.ID, 5*time.Minute)
	r := h.WaitPhase("refund", tg.PhaseApprovalUnavailable)
	g.Expect(r.Status.Reason).To(Equal(tg.ReasonProviderChanged))
	g.Expect(r.Status.Message).To(And(ContainSubstring("the manager's provider"), ContainSubstring("ApprovalProvider "+h.NS+"/default")))
	g.Expect(h.Jobs()).To(BeEmpty())
}

// A provisioner that answers with an instance another provider object holds (so that the receiver
// would check that object's genuine notifications against this one's secrets) is refused: the
// instance is not recorded, and the object's Ready condition says why.
func TestInstanceHeldByAnotherProviderObjectIsRefused(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	_, url := h.StartTeamProvider()
	h.CredentialSecret("team-provisioner", th.TeamProvisioner, th.Serves("team"))
	h.ProvisionedProvider("team", url, "team-provisioner")
	h.ProviderReady("team", metav1.ConditionTrue, tg.ReasonReachable)
	victim := &tg.ApprovalProvider{}
	g.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "team"}, victim)).To(Succeed())
	g.Expect(victim.Status.Instance).NotTo(BeNil())
	id := victim.Status.Instance.ID

	// The hostile provisioner issues the victim's instance id to whoever asks.
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-ID", "a3e0c1d2-0000-4000-8000-000000000001")
		if r.Method == http.MethodPost && r.URL.Path == "/v1/instances" {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"instance":{"id":"` + id + `","name":"evil"},"credential":{"token":"tg-evil-credential"}}`))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"type":"not_found","code":"not_found","message":"no","request_id":"a3e0c1d2-0000-4000-8000-000000000001"}}`))
	}))
	t.Cleanup(hostile.Close)
	h.CredentialSecret("evil-provisioner", "tg-evil-provisioner", th.Serves("evil"))
	h.ProvisionedProvider("evil", hostile.URL, "evil-provisioner")

	refused := h.ProviderReady("evil", metav1.ConditionFalse, tg.ReasonProvisioningFailed)
	g.Expect(refused.Message).To(And(ContainSubstring("instance "+id), ContainSubstring("ApprovalProvider "+h.NS+"/team already holds")))
	evil := &tg.ApprovalProvider{}
	g.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "evil"}, evil)).To(Succeed())
	g.Expect(evil.Status.Instance).To(BeNil(), "the instance is not recorded")
	h.ProviderReady("team", metav1.ConditionTrue, tg.ReasonReachable)
}

// A call whose status.requestID was pointed at another call's request withdraws its own request when
// it is deleted, not the other's: nothing is left pending for a human nobody waits for, and the
// other call keeps its request.
func TestDeletionWithdrawsTheCallsOwnRequest(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	first, second := twoPendingRefunds(h)

	forgeStatus(h, "second", func(tc *tg.ToolCall) { tc.Status.RequestID = first.ID })
	g.Expect(h.K8s.Delete(context.Background(), h.Get("second"))).To(Succeed())
	h.WaitGone("second", 30*time.Second)
	own, err := h.Provider.Get(second.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(own.Status).To(Equal(h.WithdrawnStatus()), "the deleted call's own request is withdrawn")
	other, err := h.Provider.Get(first.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.Status).To(Equal(provider.StatusPending), "the other call's request is untouched")
	g.Expect(h.Get("first").Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
}

// twoPendingRefunds creates the refund Tool and two ToolCalls of the same arguments, first and second,
// and returns their pending requests.
func twoPendingRefunds(h *th.Harness) (first, second provider.Request) {
	h.T.Helper()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("first", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.ToolCall("second", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	return h.PendingRequest("first"), h.PendingRequest("second")
}
