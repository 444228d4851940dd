package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// The day-2 metrics: provider requests and errors by provider object, and the gauges the manager
// computes from its cache at each scrape (statemetrics.go).

func providerRequests(prov, op string) float64 {
	return th.MetricValue("toolgate_provider_requests_total", map[string]string{"provider": prov, "op": op})
}

func providerErrors(prov, op, code string) float64 {
	return th.MetricValue("toolgate_provider_request_errors_total", map[string]string{"provider": prov, "op": op, "code": code})
}

// expectSeries waits until the series of name with exactly labels is exported with value want.
func expectSeries(h *th.Harness, name string, labels map[string]string, want float64) {
	h.T.Helper()
	h.G.Eventually(func(g Gomega) {
		v, ok := th.MetricSeries(name, labels)
		g.Expect(ok).To(BeTrue(), "%s%v is exported", name, labels)
		g.Expect(v).To(Equal(want), "%s%v", name, labels)
	}).Should(Succeed())
}

// expectNoSeries waits until no series of name has exactly labels.
func expectNoSeries(h *th.Harness, name string, labels map[string]string) {
	h.T.Helper()
	h.G.Eventually(func() bool {
		_, ok := th.MetricSeries(name, labels)
		return ok
	}).Should(BeFalse(), "%s%v is not exported", name, labels)
}

// A provider request is counted under the provider object it went to, an ApprovalProvider by its
// kind, namespace and name, the manager's own provider as default; every attempt is counted in
// toolgate_provider_requests_total, the failed ones too.
func TestProviderMetricsNameTheProviderObject(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	team := h.ReadyTeamProvider("team")
	teamLabel := "ApprovalProvider/" + h.NS + "/team"
	h.Tool("team-refund", "team_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "team"))
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	ownRequests, ownErrors := providerRequests("default", "submit"), providerErrors("default", "submit", provider.CodeUnavailable)
	g.Expect(team.Faults().Add(faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Count: 1})).To(Succeed())
	g.Expect(h.Provider.Faults().Add(faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Count: 1})).To(Succeed())

	h.ToolCall("team", "team_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	h.ToolCall("own", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	g.Expect(h.WaitPhase("team", tg.PhaseAwaitingApproval).Annotations).To(HaveKeyWithValue(tg.AnnotationProvider, "ApprovalProvider/team"))
	h.WaitPhase("own", tg.PhaseAwaitingApproval)

	g.Expect(providerErrors(teamLabel, "submit", provider.CodeUnavailable)).To(Equal(1.0), "the team provider's 503, under its own label")
	g.Expect(providerRequests(teamLabel, "submit")).To(BeNumerically(">=", 2), "the failed attempt and the one that succeeded")
	g.Expect(providerErrors("default", "submit", provider.CodeUnavailable)-ownErrors).To(Equal(1.0), "the manager's provider's 503, as default")
	g.Expect(providerRequests("default", "submit") - ownRequests).To(BeNumerically(">=", 2))
	g.Eventually(func() float64 { return providerRequests(teamLabel, "wait") }).Should(BeNumerically(">=", 1),
		"the team call's long poll is the team provider's")
}

// toolgate_toolcalls counts a namespace's calls by phase, every phase exported (0 included);
// toolgate_oldest_waiting_toolcall_seconds is the age of its oldest call awaiting a decision, by the
// manager's clock, and goes away when no call waits.
func TestToolCallGaugesFollowTheCallsOfANamespace(t *testing.T) {
	h, clk := th.NewClocked(t, env)
	g := h.G
	calls := func(phase tg.ToolCallPhase) map[string]string {
		return map[string]string{"namespace": h.NS, "phase": string(phase)}
	}
	sync := map[string]string{"namespace": h.NS, "mode": "sync"}
	h.ToolCall("first", "issue_refund", th.RefundArgs, 2*time.Hour, ptr.To(time.Hour))
	h.ToolCall("second", "issue_refund", th.RefundArgs, 2*time.Hour, ptr.To(time.Hour))
	h.WaitPhase("first", tg.PhaseAwaitingApproval)
	h.WaitPhase("second", tg.PhaseAwaitingApproval)

	expectSeries(h, "toolgate_toolcalls", calls(tg.PhaseAwaitingApproval), 2)
	for _, p := range []tg.ToolCallPhase{tg.PhasePending, tg.PhaseRunning, tg.PhaseSucceeded, tg.PhaseDenied, tg.PhaseApprovalUnavailable} {
		expectSeries(h, "toolgate_toolcalls", calls(p), 0)
	}
	age, ok := th.MetricSeries("toolgate_oldest_waiting_toolcall_seconds", sync)
	g.Expect(ok).To(BeTrue())
	g.Expect(age).To(BeNumerically("<", 60), "the calls were created just now, by the manager's clock")
	_, ok = th.MetricSeries("toolgate_oldest_waiting_toolcall_seconds", map[string]string{"namespace": h.NS, "mode": "async"})
	g.Expect(ok).To(BeFalse(), "no call of the namespace waits asynchronously")

	clk.SetTime(clk.Now().Add(45 * time.Minute))
	age, _ = th.MetricSeries("toolgate_oldest_waiting_toolcall_seconds", sync)
	g.Expect(age).To(BeNumerically("~", (45*time.Minute).Seconds(), 60), "the age moves with the manager's clock")

	_, err := h.Provider.Decide(h.PendingRequest("first").ID, provider.StatusDenied, "no", nil)
	g.Expect(err).NotTo(HaveOccurred())
	h.WaitPhase("first", tg.PhaseDenied)
	expectSeries(h, "toolgate_toolcalls", calls(tg.PhaseAwaitingApproval), 1)
	expectSeries(h, "toolgate_toolcalls", calls(tg.PhaseDenied), 1)

	g.Expect(h.K8s.Delete(context.Background(), h.Get("second"))).To(Succeed())
	h.WaitGone("second", 30*time.Second)
	expectSeries(h, "toolgate_toolcalls", calls(tg.PhaseAwaitingApproval), 0)
	expectNoSeries(h, "toolgate_oldest_waiting_toolcall_seconds", sync)
}

// A call whose provider delivers notifications waits in mode async.
func TestAsynchronousCallsWaitInModeAsync(t *testing.T) {
	h := th.NewAsync(t, env).H
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	h.G.Eventually(func() bool {
		_, ok := th.MetricSeries("toolgate_oldest_waiting_toolcall_seconds", map[string]string{"namespace": h.NS, "mode": "async"})
		return ok
	}).Should(BeTrue())
	_, ok := th.MetricSeries("toolgate_oldest_waiting_toolcall_seconds", map[string]string{"namespace": h.NS, "mode": "sync"})
	h.G.Expect(ok).To(BeFalse())
}

// toolgate_provider_ready follows each provider object's Ready condition, and goes with the object.
func TestProviderReadyFollowsTheReadyCondition(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	_, url := h.StartTeamProvider()
	team := map[string]string{"provider": "ApprovalProvider/" + h.NS + "/team"}
	ap := h.ApprovalProvider("team", url, "team-credential") // its Secret does not exist yet
	h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialUnavailable)
	expectSeries(h, "toolgate_provider_ready", team, 0)

	h.CredentialSecret("team-credential", th.TeamCredential, th.Serves("team"))
	h.ProviderReady("team", metav1.ConditionTrue, tg.ReasonReachable)
	expectSeries(h, "toolgate_provider_ready", team, 1)

	// A Ready provider is probed again only every few minutes; a change of its spec is checked at once.
	h.CredentialSecret("other-credential", "tg-nobody-knows-this", th.Serves("team"))
	g.Expect(h.K8s.Get(context.Background(), client.ObjectKeyFromObject(ap), ap)).To(Succeed())
	ap.Spec.CredentialSecretRef.Name = "other-credential"
	g.Expect(h.K8s.Update(context.Background(), ap)).To(Succeed())
	h.ProviderReady("team", metav1.ConditionFalse, tg.ReasonCredentialRejected)
	expectSeries(h, "toolgate_provider_ready", team, 0)

	name := "shared-" + h.NS
	shared := &tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tg.ApprovalProviderSpec{
		URL: url, AllowInsecureHTTP: true, CredentialSecretRef: &tg.SecretKeyRef{Name: "shared-credential"},
	}}
	g.Expect(h.K8s.Create(context.Background(), shared)).To(Succeed())
	t.Cleanup(func() { _ = h.K8s.Delete(context.Background(), shared) })
	h.ReadyCondition(&tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.ConditionFalse, tg.ReasonCredentialUnavailable)
	expectSeries(h, "toolgate_provider_ready", map[string]string{"provider": "ClusterApprovalProvider/" + name}, 0)

	g.Expect(h.K8s.Delete(context.Background(), ap)).To(Succeed())
	expectNoSeries(h, "toolgate_provider_ready", team)
}

// A replica that does not lead exports the gauges all the same, from its own cache: here the Lease is
// held by another replica, so this manager reconciles nothing (the call keeps no phase), yet it
// counts the call.
func TestStandbyExportsTheGauges(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	now := metav1.NewMicroTime(time.Now())
	g.Expect(h.K8s.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "toolgate.dev", Namespace: h.NS},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another-replica"), LeaseDurationSeconds: ptr.To(int32(3600)),
			AcquireTime: &now, RenewTime: &now},
	})).To(Succeed())
	h.Opts.LeaderElection, h.Opts.LeaderElectionNamespace = true, h.NS
	h.Start()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))

	expectSeries(h, "toolgate_toolcalls", map[string]string{"namespace": h.NS, "phase": string(tg.PhasePending)}, 1)
	g.Expect(h.Get("refund").Status.Phase).To(BeEmpty(), "the standby reconciled nothing")
}
