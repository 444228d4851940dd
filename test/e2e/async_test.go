//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The manager's AAP webhook receiver on the local cluster (config/receiver through config/dev): the
// Service toolgate-aap-receiver, whose certificate hack/cluster.sh issues from a CA the reference
// provider trusts.
const receiverURL = "https://toolgate-aap-receiver.toolgate-system.svc/aap/events"

// One approval end to end in asynchronous mode: an ApprovalProvider with spec.provisioning and
// spec.delivery registers the manager's receiver with the reference provider, which verifies it over
// HTTPS through the receiver's Service; a call of a Tool naming that provider waits with no long poll
// at the provider; the approval reaches the manager as a signed request.resolved notification, which
// the receiver records on the ToolCall, and the tool then runs in a real Pod.
func TestAsyncApprovalIsNotifiedAndRunsInARealPod(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	token, err := os.ReadFile(filepath.Join(clusterDir, "provisioner-token"))
	g.Expect(err).NotTo(HaveOccurred())
	before := providerStats(g)

	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "provisioner", Labels: map[string]string{tg.LabelProvider: "async"}},
		StringData: map[string]string{"token": strings.TrimSpace(string(token))}})).To(Succeed())
	g.Expect(k8s.Create(ctx, &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "async"},
		Spec: tg.ApprovalProviderSpec{URL: providerURL, AllowInsecureHTTP: true,
			Provisioning: &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "provisioner", Key: "token"}, InstanceName: "e2e-async"},
			Delivery:     &tg.Delivery{ReceiverURL: receiverURL}},
	})).To(Succeed())
	ap := &tg.ApprovalProvider{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "async"}, ap)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(ap.Status.Conditions, tg.ConditionReady)).To(BeTrue(), "%v", ap.Status.Conditions)
		c := meta.FindStatusCondition(ap.Status.Conditions, tg.ConditionDelivery)
		g.Expect(c).NotTo(BeNil(), "%v", ap.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
		g.Expect(c.Reason).To(Equal(tg.ReasonRegistered))
		g.Expect(c.ObservedGeneration).To(Equal(ap.Generation))
		g.Expect(ap.Status.Instance).NotTo(BeNil())
		g.Expect(ap.Status.Delivery).NotTo(BeNil())
		g.Expect(ap.Status.Delivery.Active).NotTo(BeNil())
		g.Expect(ap.Status.Delivery.Active.InstanceID).To(Equal(ap.Status.Instance.ID))
		g.Expect(ap.Status.Delivery.Active.ReceiverURL).To(Equal(receiverURL))
	}).WithTimeout(stepTimeout).WithPolling(time.Second).Should(Succeed())
	g.Expect(providerStats(g)["webhook_verifications"]).To(BeNumerically(">", before["webhook_verifications"]),
		"the provider verified the receiver through its Service")

	tool := sampleTool(t, ns)
	tool.Spec.ProviderRef = &tg.ProviderRef{Kind: tg.KindApprovalProvider, Name: "async"}
	createTool(t, g, tool)

	// The provider's gauge of long polls held now counts every instance's: calls other tests left
	// (their namespaces being deleted) end first.
	g.Eventually(func() float64 { return providerStats(g)["waiting"] }).
		WithTimeout(stepTimeout).WithPolling(time.Second).Should(BeZero(), "no long poll held before this call")
	tc := submit(t, g, ns)
	g.Expect(tc.Annotations).To(HaveKeyWithValue(tg.AnnotationProvider, "ApprovalProvider/async"))
	g.Expect(providerRequest(g, tc.Status.RequestID)).To(HaveKeyWithValue("instance_id", ap.Status.Instance.ID))
	// A synchronous call would hold a long poll at the provider nearly all the time it waits.
	g.Consistently(func() float64 { return providerStats(g)["waiting"] }).
		WithTimeout(5*time.Second).WithPolling(100*time.Millisecond).Should(BeZero(), "the call holds no long poll")
	g.Expect(get(g, tc).Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
	g.Expect(tc.Status.Notification).To(BeNil(), "nothing was decided yet")
	jobs, pods := jobsAndPods(g, tc)
	g.Expect(jobs).To(BeEmpty(), "nothing runs before a human approved")
	g.Expect(pods).To(BeEmpty())

	decided := providerStats(g)
	decide(g, tc, true, "5m")
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	g.Expect(tc.Status.Reason).To(Equal(tg.ReasonJobSucceeded))
	g.Expect(tc.Status.Notification).NotTo(BeNil(), "the receiver recorded the provider's notification")
	g.Expect(tc.Status.Notification.ID).NotTo(BeEmpty())
	g.Expect(tc.Status.Decision).NotTo(BeNil())
	g.Expect(tc.Status.Decision.Note).To(Equal("e2e: duplicate charge confirmed (approved by admin)"))
	expectReceipt(g, tc)
	after := providerStats(g)
	g.Expect(after["delivered"]).To(BeNumerically(">", decided["delivered"]), "the provider's notification was acknowledged")
	g.Expect(after["waiting"]).To(BeZero())
}

// providerStats reads the reference provider's counters and gauges (GET /admin/v1/stats).
func providerStats(g Gomega) map[string]float64 {
	out := map[string]float64{}
	for k, v := range providerCall(g, http.MethodGet, "/admin/v1/stats", nil) {
		if f, ok := v.(float64); ok {
			out[k] = f
		}
	}
	return out
}
