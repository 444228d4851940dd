package approvalproviders_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// A Tool's spec.providerRef sends its calls to that ApprovalProvider, not to the manager's own
// provider: the call is accepted with it, submitted, decided and run there.
func TestCallGoesToTheProviderItsToolNames(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team := h.ReadyTeamProvider("team")
	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))

	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	g.Expect(waiting.Annotations).To(HaveKeyWithValue(tg.AnnotationProvider, "ApprovalProvider/team"))
	req, err := team.Get(waiting.Status.RequestID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Tool).To(Equal("issue_refund"))
	g.Expect(h.Provider.List("")).To(BeEmpty(), "nothing reached the manager's own provider")

	exp := time.Now().Add(5 * time.Minute)
	_, err = team.Decide(req.ID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	h.FinishJob(running.Status.JobName, true, "refunded")
	h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(team.Stats().Creates).To(BeEquivalentTo(1))
}

// A call accepted with a provider object that is then deleted is still submitted to it: here its
// first POST was committed but its answer lost, the manager restarted while the object was deleted,
// and the new manager's idempotent replay recovers the request, approved meanwhile, and runs it. (The
// deletion bumps the object's generation, which its last readiness check does not name.)
func TestDeletedProviderStillTakesTheSubmissionsOfItsCalls(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team := h.ReadyTeamProvider(tg.DefaultProviderName)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	req := h.UnansweredSubmission(team)
	exp := time.Now().Add(5 * time.Minute)
	_, err := team.Decide(req.ID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())

	key := types.NamespacedName{Namespace: h.NS, Name: tg.DefaultProviderName}
	ap := &tg.ApprovalProvider{}
	g.Expect(h.K8s.Get(context.Background(), key, ap)).To(Succeed())
	generation := ap.Generation
	h.StopManager()
	g.Expect(h.K8s.Delete(context.Background(), ap)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), key, ap)).To(Succeed())
		g.Expect(ap.DeletionTimestamp).NotTo(BeNil())
	}).Should(Succeed())
	g.Expect(ap.Generation).To(Equal(generation+1), "the deletion bumps the generation")
	team.Faults().Clear()
	h.Restart()

	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	g.Expect(running.Status.RequestID).To(Equal(req.ID))
	g.Expect(running.Annotations).To(HaveKeyWithValue(tg.AnnotationProvider, tg.KindApprovalProvider+"/"+tg.DefaultProviderName))
	g.Expect(team.Stats().Creates).To(BeEquivalentTo(1), "one request, recovered by the replay")
	h.FinishJob(running.Status.JobName, true, "refunded")
	h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(h.K8s.Get(context.Background(), key, &tg.ApprovalProvider{}))
	}).Should(BeTrue(), "gone once its call ended")
}

// Without spec.providerRef, the namespace's ApprovalProvider named default is used before the
// manager's own provider.
func TestNamespaceDefaultProviderComesBeforeTheManagersOwn(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team := h.ReadyTeamProvider(tg.DefaultProviderName)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)

	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	g.Expect(waiting.Annotations).To(HaveKeyWithValue(tg.AnnotationProvider, "ApprovalProvider/default"))
	g.Expect(team.List(provider.StatusPending)).To(HaveLen(1))
	g.Expect(h.Provider.List("")).To(BeEmpty())
}

// A call whose provider is missing, or not Ready, stays Pending with a reason and a message that
// name the provider and what is wrong, and is submitted once that is fixed. A provisioner token
// given as the credential (403) and an unknown credential (401) are told apart on the provider.
func TestCallWaitsForItsProviderAndContinuesOnceItIsReady(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team, url := h.StartTeamProvider()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))

	waitingFor := func(want string) {
		g.Eventually(func(g Gomega) {
			tc := h.Get("refund")
			g.Expect(tc.Status.Phase).To(Equal(tg.PhasePending))
			g.Expect(tc.Status.Reason).To(Equal(tg.ReasonProviderNotReady))
			g.Expect(tc.Status.Message).To(ContainSubstring(want))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	}
	waitingFor("ApprovalProvider " + h.NS + "/team does not exist")

	h.ApprovalProvider("team", url, "team-credential")
	missing := h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialUnavailable)
	g.Expect(missing.Message).To(ContainSubstring("team-credential"))
	waitingFor("is not Ready (CredentialUnavailable")

	h.CredentialSecret("team-credential", th.TeamProvisioner, th.Serves("team"))
	forbidden := h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialForbidden)
	g.Expect(forbidden.Message).To(ContainSubstring("provisioner token"))
	g.Expect(forbidden.Message).NotTo(ContainSubstring(th.TeamProvisioner), "never the credential itself")

	h.CredentialSecret("team-credential", "tg-nobody-knows-this", th.Serves("team"))
	h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialRejected)
	waitingFor("is not Ready (CredentialRejected")
	g.Expect(team.List("")).To(BeEmpty(), "nothing was submitted while the provider was not Ready")

	h.CredentialSecret("team-credential", th.TeamCredential, th.Serves("team"))
	h.ProviderReady("team", metav1.ConditionTrue, tg.ReasonReachable)
	h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	g.Expect(team.List(provider.StatusPending)).To(HaveLen(1))
}

// Deleting a call cancels its request at the provider it was accepted with.
func TestDeletedCallIsCancelledAtItsOwnProvider(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team := h.ReadyTeamProvider("team")
	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	h.WaitPhase("refund", tg.PhaseAwaitingApproval)

	g.Expect(h.K8s.Delete(context.Background(), h.Get("refund"))).To(Succeed())
	h.WaitGone("refund", 20*time.Second)
	all, err := team.List("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(all).To(HaveLen(1))
	g.Expect(all[0].Status).To(Equal(provider.StatusCancelled))
	g.Expect(h.Provider.List("")).To(BeEmpty())
}

// With spec.provisioning the manager creates an AAP instance of its own, keeps its credential in a
// Secret the provider object owns, and sends the calls of its Tools there; deleting the object
// deletes the instance, which cancels its pending requests, and the waiting call ends Cancelled.
func TestProvisionedInstanceCarriesTheCallsAndGoesWithItsObject(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team, url := h.StartTeamProvider()
	h.CredentialSecret("team-provisioner", th.TeamProvisioner, th.Serves("team"))
	h.ProvisionedProvider("team", url, "team-provisioner")
	h.ProviderReady("team", metav1.ConditionTrue, tg.ReasonReachable)

	ap := &tg.ApprovalProvider{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "team"}, ap)).To(Succeed())
	g.Expect(ap.Finalizers).To(ContainElement(tg.FinalizerInstance))
	inst := ap.Status.Instance
	g.Expect(inst).NotTo(BeNil())
	g.Expect(inst.ID).NotTo(BeEmpty())
	g.Expect(inst.Name).To(Equal("payments agents"))
	g.Expect(inst.CredentialSecretName).To(Equal("team-aap-credential-" + string(ap.UID)[:8]))
	owned := &corev1.Secret{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: inst.CredentialSecretName}, owned)).To(Succeed())
	g.Expect(owned.OwnerReferences).To(ContainElement(HaveField("UID", ap.UID)))
	g.Expect(owned.Data).To(HaveKey("token"))

	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))
	tc := h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	keys, err := team.KeysOf(inst.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).To(HaveKey(string(tc.UID)), "the request belongs to the provisioned instance")

	g.Expect(h.K8s.Delete(context.Background(), ap)).To(Succeed())
	g.Eventually(func(g Gomega) {
		pending, err := team.List(provider.StatusPending)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pending).To(BeEmpty())
	}).WithTimeout(30*time.Second).Should(Succeed(), "deleting the instance cancels its pending requests")
	cancelled := h.WaitPhase("refund", tg.PhaseCancelled)
	g.Expect(cancelled.Status.Reason).To(Equal(tg.ReasonProviderCancelled))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "team"}, &tg.ApprovalProvider{}))
	}).WithTimeout(30*time.Second).Should(BeTrue(), "the finalizer is removed once the instance is deleted")
}

// An instance credential given as the provisioner token is told apart (403) from an unknown token
// (401) on the provider's Ready condition.
func TestProvisioningWithTheWrongTokenIsReported(t *testing.T) {
	h := th.New(t, env)
	_, url := h.StartTeamProvider()
	h.CredentialSecret("team-provisioner", th.TeamCredential, th.Serves("team"))
	h.ProvisionedProvider("team", url, "team-provisioner")
	forbidden := h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialForbidden)
	h.G.Expect(forbidden.Message).To(ContainSubstring("an instance credential is not a provisioner token"))

	h.CredentialSecret("team-provisioner", "tg-nobody-knows-this", th.Serves("team"))
	h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialRejected)
}

// A ClusterApprovalProvider serves the Tools that name it, with its Secrets read in the manager's
// cluster resource namespace.
func TestClusterProviderServesTheToolsThatNameIt(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team, url := h.StartTeamProvider()
	h.CredentialSecret("shared-credential", th.TeamCredential, map[string]string{tg.LabelClusterProvider: "shared-" + h.NS}) // h.NS is the cluster resource namespace
	name := "shared-" + h.NS
	shared := &tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tg.ApprovalProviderSpec{
		URL: url, AllowInsecureHTTP: true, CredentialSecretRef: &tg.SecretKeyRef{Name: "shared-credential"},
	}}
	g.Expect(h.K8s.Create(context.Background(), shared)).To(Succeed())
	t.Cleanup(func() { _ = h.K8s.Delete(context.Background(), shared) })
	h.ReadyCondition(&tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.ConditionTrue, tg.ReasonReachable)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindClusterApprovalProvider, name))

	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	g.Expect(waiting.Annotations).To(HaveKeyWithValue(tg.AnnotationProvider, "ClusterApprovalProvider/"+name))
	g.Expect(team.List(provider.StatusPending)).To(HaveLen(1))
	g.Expect(h.Provider.List("")).To(BeEmpty())
}

// A provider that is only unreachable does not hold calls back as ProviderNotReady: the submission is
// tried, and the call says why it fails (SubmitFailed), as it would with the manager's own provider.
func TestUnreachableProviderDoesNotHoldCallsBack(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	addr, err := th.FreeAddr() // nothing listens there
	g.Expect(err).NotTo(HaveOccurred())
	h.CredentialSecret("team-credential", th.TeamCredential, th.Serves("team"))
	h.ApprovalProvider("team", "http://"+addr, "team-credential")
	h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonUnreachable)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	g.Eventually(func(g Gomega) {
		tc := h.Get("refund")
		g.Expect(tc.Status.Phase).To(Equal(tg.PhasePending))
		g.Expect(tc.Status.Reason).To(Equal(tg.ReasonSubmitFailed))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// A provider object with an issued credential that is deleted while a call accepted with it waits
// stays (its finalizer) and serves that call to its end: the approval is read and the tool runs.
// New calls no longer pick it: without it the namespace's calls go to the manager's own provider.
func TestDeletedProviderServesItsCallsUntilTheyEnd(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team := h.ReadyTeamProvider(tg.DefaultProviderName)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)

	key := types.NamespacedName{Namespace: h.NS, Name: tg.DefaultProviderName}
	ap := &tg.ApprovalProvider{}
	g.Expect(h.K8s.Get(context.Background(), key, ap)).To(Succeed())
	g.Expect(ap.Finalizers).To(ContainElement(tg.FinalizerInUse))
	g.Expect(h.K8s.Delete(context.Background(), ap)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), key, ap)).To(Succeed())
		g.Expect(ap.DeletionTimestamp).NotTo(BeNil())
	}).Should(Succeed())

	// A new call while the object is being deleted goes to the manager's own provider.
	h.ToolCall("later", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	later := h.WaitPhase("later", tg.PhaseAwaitingApproval)
	g.Expect(later.Annotations).NotTo(HaveKey(tg.AnnotationProvider))
	g.Expect(h.Provider.List(provider.StatusPending)).To(HaveLen(1))

	// The first call is still served by the object being deleted.
	exp := time.Now().Add(5 * time.Minute)
	_, err := team.Decide(waiting.Status.RequestID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	g.Expect(h.K8s.Get(context.Background(), key, &tg.ApprovalProvider{})).To(Succeed(), "kept while its call has not ended")
	h.FinishJob(running.Status.JobName, true, "refunded")
	h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(h.K8s.Get(context.Background(), key, &tg.ApprovalProvider{}))
	}).WithTimeout(30*time.Second).Should(BeTrue(), "gone once its calls ended")
}
