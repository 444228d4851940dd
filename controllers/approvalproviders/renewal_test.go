package approvalproviders_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	th "toolgate.dev/toolgate/test/testharness"
)

// credentialLifetime is the lifetime of the credentials the expiring provider issues: the manager
// replaces one two thirds in (20 s), and counts the calls of a replaced instance from 5 s after the
// replacement on, long before the replaced credential expires.
const credentialLifetime = 30 * time.Second

// startExpiringProvider runs a reference provider whose issued credentials expire, on the clock the
// manager uses, so that the test moves both.
func startExpiringProvider(h *th.Harness, clk *clocktesting.FakeClock) (*reference.Server, string) {
	h.T.Helper()
	srv, err := reference.New(reference.Options{Credential: th.TeamCredential, ProvisionerToken: th.TeamProvisioner,
		CredentialLifetime: credentialLifetime, Clock: clk})
	h.G.Expect(err).NotTo(HaveOccurred())
	url, err := srv.Start("127.0.0.1:0")
	h.G.Expect(err).NotTo(HaveOccurred())
	h.T.Cleanup(func() { _ = srv.Close() })
	return srv, url
}

// instanceStatus is the HTTP status of GET /v1/instances/{id} at the provider: 200 while the
// instance lives, 404 once it was deleted.
func instanceStatus(g Gomega, url, id string) int {
	req, err := http.NewRequest(http.MethodGet, url+"/v1/instances/"+id, nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+th.TeamProvisioner)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	return resp.StatusCode
}

// provisionedStatus reads the ApprovalProvider's status.
func provisionedStatus(g Gomega, h *th.Harness, name string) tg.ApprovalProviderStatus {
	ap := &tg.ApprovalProvider{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, ap)).To(Succeed())
	return ap.Status
}

// A provisioned credential with an expiry is replaced before it expires: two thirds into its
// lifetime the manager provisions a new instance, which new calls use, while the call submitted to
// the old instance is still read there, approved and run. Once no call uses the old instance it is
// deleted at the provider; its Secret, with the revoked credential, goes with the provider object.
func TestExpiringCredentialIsReplacedAndTheOldInstanceServesItsCallsToTheEnd(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	h := th.New(t, env, th.WithClock(clk))
	g := h.G
	team, url := startExpiringProvider(h, clk)
	h.CredentialSecret("team-provisioner", th.TeamProvisioner, th.Serves("team"))
	h.ProvisionedProvider("team", url, "team-provisioner")
	h.ProviderReady("team", "True", tg.ReasonReachable)
	first := provisionedStatus(g, h, "team").Instance
	g.Expect(first).NotTo(BeNil())
	g.Expect(first.CredentialIssuedAt).NotTo(BeNil())
	g.Expect(first.CredentialExpiresAt).To(HaveValue(HaveField("Time", BeTemporally("~", first.CredentialIssuedAt.Add(credentialLifetime), time.Second))))

	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))
	h.ToolCall("before", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	before := h.WaitPhase("before", tg.PhaseAwaitingApproval)
	g.Expect(before.Annotations).To(HaveKeyWithValue(tg.AnnotationProviderInstance, first.ID))

	// Two thirds into the credential's lifetime it is replaced. (The manager looks again when that
	// time comes on its own clock; a restart makes it look at once.)
	clk.Step(credentialLifetime * 2 / 3)
	h.Restart()
	var second *tg.ProviderInstance
	g.Eventually(func(g Gomega) {
		st := provisionedStatus(g, h, "team")
		g.Expect(st.Instance).NotTo(BeNil())
		g.Expect(st.Instance.ID).NotTo(Equal(first.ID))
		g.Expect(st.ReplacedInstances).To(ConsistOf(*first))
		second = st.Instance
	}).WithTimeout(40 * time.Second).Should(Succeed())
	g.Expect(second.Replaces).To(Equal(first.ID))
	g.Expect(second.Name).To(Equal(first.Name))
	g.Expect(second.CredentialSecretName).NotTo(Equal(first.CredentialSecretName))
	for _, name := range []string{first.CredentialSecretName, second.CredentialSecretName} {
		g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, &corev1.Secret{})).To(Succeed())
	}
	h.ProviderReady("team", "True", tg.ReasonReachable)

	// A new call goes to the new instance.
	after := h.ToolCall("after", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	h.WaitPhase("after", tg.PhaseAwaitingApproval)
	g.Expect(h.Get("after").Annotations).To(HaveKeyWithValue(tg.AnnotationProviderInstance, second.ID))
	keys, err := team.KeysOf(second.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).To(HaveKey(string(after.UID)))

	// The call on the replaced instance is still read there: approved, it runs.
	clk.Step(5 * time.Second)
	g.Consistently(func(g Gomega) int { return instanceStatus(g, url, first.ID) }).
		WithTimeout(2*time.Second).Should(Equal(http.StatusOK), "kept while its call waits")
	exp := clk.Now().Add(5 * time.Minute)
	_, err = team.Decide(before.Status.RequestID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	running := h.WaitPhase("before", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	h.FinishJob(running.Status.JobName, true, "refunded")
	h.WaitPhase("before", tg.PhaseSucceeded)

	// Its last call ended: the replaced instance is deleted at the provider and forgotten, while
	// the new instance and its pending request stay.
	g.Eventually(func(g Gomega) {
		g.Expect(provisionedStatus(g, h, "team").ReplacedInstances).To(BeEmpty())
	}).WithTimeout(40 * time.Second).Should(Succeed())
	g.Expect(instanceStatus(g, url, first.ID)).To(Equal(http.StatusNotFound))
	g.Expect(instanceStatus(g, url, second.ID)).To(Equal(http.StatusOK))
	g.Expect(team.List(provider.StatusPending)).To(ConsistOf(HaveField("ID", h.Get("after").Status.RequestID)))
	g.Expect(h.Get("after").Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
}

// A call still waiting on a replaced instance when its credential expires can no longer be read
// there: the instance is deleted at the provider, which cancels the request, so no approver decides
// what nobody can run.
func TestReplacedInstanceIsDeletedWhenItsCredentialExpires(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	h := th.New(t, env, th.WithClock(clk))
	g := h.G
	team, url := startExpiringProvider(h, clk)
	h.CredentialSecret("team-provisioner", th.TeamProvisioner, th.Serves("team"))
	h.ProvisionedProvider("team", url, "team-provisioner")
	h.ProviderReady("team", "True", tg.ReasonReachable)
	first := provisionedStatus(g, h, "team").Instance

	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))
	h.ToolCall("waiting", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	waiting := h.WaitPhase("waiting", tg.PhaseAwaitingApproval)

	clk.Step(credentialLifetime * 2 / 3)
	h.Restart()
	g.Eventually(func(g Gomega) {
		g.Expect(provisionedStatus(g, h, "team").ReplacedInstances).To(ConsistOf(HaveField("ID", first.ID)))
	}).WithTimeout(40 * time.Second).Should(Succeed())
	clk.Step(5 * time.Second)
	g.Consistently(func(g Gomega) int { return instanceStatus(g, url, first.ID) }).
		WithTimeout(2*time.Second).Should(Equal(http.StatusOK), "kept while its call waits and its credential is valid")

	clk.Step(credentialLifetime / 3)
	g.Eventually(func(g Gomega) {
		g.Expect(provisionedStatus(g, h, "team").ReplacedInstances).To(BeEmpty())
	}).WithTimeout(40 * time.Second).Should(Succeed())
	g.Expect(instanceStatus(g, url, first.ID)).To(Equal(http.StatusNotFound))
	req, err := team.Get(waiting.Status.RequestID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Status).To(Equal(provider.StatusCancelled), "deleting the instance cancelled the request")
	// The call cannot read the cancellation (its credential is gone): it never runs, and ends at its
	// waiting limit as a call whose provider could not be read would.
	g.Expect(h.Get("waiting").Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
	g.Expect(h.Get("waiting").Status.JobName).To(BeEmpty())
}
