//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The seed's refund, approved by a human through the reference provider: the Job's Pod runs the demo
// tool in a real container, and status.result is the receipt that container wrote.
func TestApprovedRefundRunsInARealPod(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)
	jobs, pods := jobsAndPods(g, tc)
	g.Expect(jobs).To(BeEmpty(), "nothing runs before a human approved")
	g.Expect(pods).To(BeEmpty())

	decide(g, tc, true, "5m")
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	g.Expect(tc.Status.Reason).To(Equal(tg.ReasonJobSucceeded))
	g.Expect(tc.Status.Decision).NotTo(BeNil())
	g.Expect(tc.Status.Decision.Note).To(Equal("e2e: duplicate charge confirmed (approved by admin)"), "the reference provider records who decided")
	expectReceipt(g, tc)
}

// A denied call ends Denied, and no Job or Pod is ever created for it.
func TestDeniedCallCreatesNoPod(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)

	decide(g, tc, false, "")
	waitPhase(g, tc, tg.PhaseDenied, stepTimeout)
	g.Expect(tc.Status.Decision.Note).To(Equal("e2e: not a duplicate charge (denied by admin)"))
	g.Consistently(func(g Gomega) {
		jobs, pods := jobsAndPods(g, tc)
		g.Expect(jobs).To(BeEmpty())
		g.Expect(pods).To(BeEmpty())
	}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// An approval that is no longer valid when the manager would start the tool (here: valid for 1s,
// inside the manager's skew margin) ends Expired, and no Pod is ever created.
func TestExpiredApprovalCreatesNoPod(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)

	decide(g, tc, true, "1s")
	waitPhase(g, tc, tg.PhaseExpired, stepTimeout)
	g.Expect(tc.Status.Reason).To(Equal(tg.ReasonApprovalExpired))
	g.Consistently(func(g Gomega) {
		jobs, pods := jobsAndPods(g, tc)
		g.Expect(jobs).To(BeEmpty())
		g.Expect(pods).To(BeEmpty())
	}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// Deleting a ToolCall whose request is pending cancels the request at the provider, and the ToolCall
// goes away.
func TestDeleteWhilePendingCancelsTheRequest(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)
	id := tc.Status.RequestID

	g.Expect(k8s.Delete(context.Background(), tc)).To(Succeed())
	g.Eventually(func() error {
		return k8s.Get(context.Background(), client.ObjectKeyFromObject(tc), &tg.ToolCall{})
	}).WithTimeout(stepTimeout).Should(MatchError(ContainSubstring("not found")))
	g.Expect(providerRequest(g, id)).To(HaveKeyWithValue("status", "cancelled"))
}

// The manager Pod is killed (force-deleted: SIGKILL, the Lease not released) while the call awaits a
// decision, and the human approves while no manager runs; then killed again while the tool's Pod
// runs. The replacement picks the call up: one Job, one Pod, Succeeded with the receipt.
func TestManagerKilledMidFlightRunsTheToolOnce(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	// The demo tool takes 20s, so the second kill lands while its Pod runs.
	createTool(t, g, sampleTool(t, ns, corev1.EnvVar{Name: "ISSUE_REFUND_DELAY", Value: "20s"}))
	tc := submit(t, g, ns)

	killLeader(t, g)
	decide(g, tc, true, "10m")
	waitPhase(g, tc, tg.PhaseRunning, failoverTimeout)
	jobs, _ := jobsAndPods(g, tc)
	g.Expect(jobs).To(HaveLen(1))

	killLeader(t, g)
	waitPhase(g, tc, tg.PhaseSucceeded, failoverTimeout)
	expectReceipt(g, tc)
	waitManagerReady(g)
}

// Two manager replicas: one leads, the other waits. The leader is killed while a call awaits its
// decision; the standby takes the Lease over and runs the approved call, once.
func TestStandbyManagerTakesOverFromAKilledLeader(t *testing.T) {
	g := NewWithT(t)
	scaleManager(t, g, 2)
	t.Cleanup(func() { scaleManager(t, NewWithT(t), 1) })
	before := map[string]bool{}
	for _, p := range managerPods(g) {
		before[p.Name] = true
	}

	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)
	victim := killLeader(t, g)
	decide(g, tc, true, "10m")

	var holder string
	g.Eventually(func(g Gomega) {
		holder = leader(g)
		g.Expect(holder).NotTo(HavePrefix(victim+"_"), "the killed leader still holds the Lease")
		g.Expect(holder).NotTo(BeEmpty())
	}).WithTimeout(failoverTimeout).WithPolling(time.Second).Should(Succeed())
	t.Logf("Lease now held by %s (manager Pods before the kill: %v)", holder, before)
	waitPhase(g, tc, tg.PhaseSucceeded, failoverTimeout)
	expectReceipt(g, tc)
}

// scaleManager sets the manager Deployment's replicas and waits until they are all ready.
func scaleManager(t *testing.T, g Gomega, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: "toolgate-controller-manager"}}
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	g.Expect(k8s.Patch(context.Background(), d, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	waitManagerReady(g)
}

// A Tool whose image the node does not have: the Pod never starts (ErrImageNeverPull). The ToolCall
// says so while it is Running, with a Warning event, and never says the tool ran; the Job's deadline
// (the Tool's executionTimeout) ends it Failed with the same reason, naming the image, with no result.
func TestMissingImageIsReportedAndEndsAtTheDeadline(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	tool := sampleTool(t, ns)
	const image = "localhost/toolgate/not-loaded:dev"
	tool.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image = image
	tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: 30 * time.Second}
	// The execution's image is missing, not a preview's: the sample's preview (the same image) would
	// end the call PreviewFailed before anyone is asked.
	tool.Spec.Preview, tool.Spec.Approval = nil, nil
	createTool(t, g, tool)
	tc := submit(t, g, ns)
	decide(g, tc, true, "5m")

	g.Eventually(func(g Gomega) {
		get(g, tc)
		g.Expect(tc.Status.Phase).To(Equal(tg.PhaseRunning))
		g.Expect(tc.Status.Reason).To(Equal(tg.ReasonImageUnavailable))
	}).WithTimeout(stepTimeout).WithPolling(250 * time.Millisecond).Should(Succeed())
	g.Expect(tc.Status.Message).To(ContainSubstring("the node does not have image " + image))
	g.Expect(tc.Status.Message).To(ContainSubstring("(ErrImageNeverPull)"))
	g.Expect(tc.Status.Message).To(ContainSubstring("the tool has not run"))
	executed := meta.FindStatusCondition(tc.Status.Conditions, tg.ConditionExecuted)
	g.Expect(executed).NotTo(BeNil())
	g.Expect(executed.Status).To(Equal(metav1.ConditionUnknown), "the Job exists, so it is not said not to have run; nor that it ran")
	_, pods := jobsAndPods(g, tc)
	g.Expect(pods).To(HaveLen(1))
	g.Expect(pods[0].Status.ContainerStatuses[0].State.Waiting.Reason).To(Equal("ErrImageNeverPull"), "what the kubelet reports")

	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(k8s.List(context.Background(), events, client.InNamespace(ns))).To(Succeed())
		var found bool
		for _, e := range events.Items {
			if e.Regarding.UID == tc.UID && e.Reason == tg.ReasonImageUnavailable {
				g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
				g.Expect(e.Note).To(ContainSubstring(image))
				found = true
			}
		}
		g.Expect(found).To(BeTrue(), "a Warning event names the image")
	}).WithTimeout(stepTimeout).WithPolling(250 * time.Millisecond).Should(Succeed())

	waitPhase(g, tc, tg.PhaseFailed, stepTimeout)
	g.Expect(tc.Status.Reason).To(Equal(tg.ReasonImageUnavailable))
	g.Expect(tc.Status.Message).To(ContainSubstring("DeadlineExceeded"))
	g.Expect(tc.Status.Message).To(ContainSubstring("so the tool did not run"))
	g.Expect(tc.Status.Message).To(ContainSubstring("the node does not have image " + image))
	g.Expect(meta.FindStatusCondition(tc.Status.Conditions, tg.ConditionExecuted).Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(tc.Status.Result).To(BeEmpty(), "nothing ran, so nothing is reported")
}
