//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Two namespaces, each with an ApprovalProvider named default that provisions an AAP instance of its
// own on the reference provider: each namespace's calls go to its own instance, not to the cluster's
// default, and each team's approver (alice for e2e-team-a, bob for e2e-team-b, scoped by
// hack/cluster.sh to no instance, then granted their team's by id) sees its own team's request only; deleting one namespace's provider object deletes
// its instance, which cancels that namespace's pending request and leaves the other's alone.
func TestEachNamespaceCallsItsOwnProvisionedInstance(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	token, err := os.ReadFile(filepath.Join(clusterDir, "provisioner-token"))
	g.Expect(err).NotTo(HaveOccurred())

	cluster := &tg.ClusterApprovalProvider{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: tg.DefaultProviderName}, cluster)).To(Succeed())
	g.Expect(cluster.Status.Instance).NotTo(BeNil(), "make dev's ClusterApprovalProvider provisioned its instance")

	type team struct {
		ns, name, approver string
		instance           string
		call               *tg.ToolCall
	}
	teams := []*team{{ns: newNamespace(t), name: "e2e-team-a", approver: "alice"}, {ns: newNamespace(t), name: "e2e-team-b", approver: "bob"}}
	for _, tm := range teams {
		g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "provisioner", Labels: map[string]string{tg.LabelProvider: tg.DefaultProviderName}},
			StringData: map[string]string{"token": strings.TrimSpace(string(token))}})).To(Succeed())
		g.Expect(k8s.Create(ctx, &tg.ApprovalProvider{
			ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: tg.DefaultProviderName},
			Spec: tg.ApprovalProviderSpec{URL: providerURL, AllowInsecureHTTP: true, Provisioning: &tg.Provisioning{
				ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "provisioner", Key: "token"}, InstanceName: tm.name,
			}},
		})).To(Succeed())
		g.Eventually(func(g Gomega) {
			ap := &tg.ApprovalProvider{}
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: tm.ns, Name: tg.DefaultProviderName}, ap)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(ap.Status.Conditions, tg.ConditionReady)).To(BeTrue(), "%v", ap.Status.Conditions)
			g.Expect(ap.Status.Instance).NotTo(BeNil())
			tm.instance = ap.Status.Instance.ID
		}).WithTimeout(stepTimeout).Should(Succeed())
		createTool(t, g, sampleTool(t, tm.ns))
		tm.call = submit(t, g, tm.ns)
		g.Expect(tm.call.Annotations).To(HaveKeyWithValue(tg.AnnotationProvider, "ApprovalProvider/default"))
	}
	a, b := teams[0], teams[1]
	g.Expect(a.instance).NotTo(Equal(b.instance))
	for _, tm := range teams {
		req := providerRequest(g, tm.call.Status.RequestID)
		g.Expect(req).To(HaveKeyWithValue("instance_id", tm.instance), "the request belongs to its namespace's instance")
		g.Expect(req).To(HaveKeyWithValue("instance_name", tm.name))
		g.Expect(req["instance_id"]).NotTo(Equal(cluster.Status.Instance.ID))
		g.Expect(providerRequests(g, tm.instance)).To(HaveLen(1), "each instance holds its own namespace's request only")
	}

	for _, tm := range teams {
		seen := func() []any {
			var ids []any
			for _, r := range providerRequestsAs(g, tm.approver) {
				ids = append(ids, r["id"])
			}
			return ids
		}
		// hack/cluster.sh scoped each approver to no instance; the admin grants their team's, by id.
		g.Expect(seen()).NotTo(ContainElement(tm.call.Status.RequestID), "%s sees nothing before the grant", tm.approver)
		providerCallRaw(g, http.MethodPut, "/admin/v1/approvers/"+tm.approver+"/instances/"+tm.instance, nil)
		ids := seen()
		other := teams[0]
		if tm == teams[0] {
			other = teams[1]
		}
		g.Expect(ids).To(ContainElement(tm.call.Status.RequestID), "%s sees their team's request", tm.approver)
		g.Expect(ids).NotTo(ContainElement(other.call.Status.RequestID), "%s does not see the other team's request", tm.approver)
	}

	// Deleting a's provider deletes its instance: a's request is cancelled, and a's call ends Cancelled.
	g.Expect(k8s.Delete(ctx, &tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Namespace: a.ns, Name: tg.DefaultProviderName}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(providerRequest(g, a.call.Status.RequestID)).To(HaveKeyWithValue("status", "cancelled"))
	}).WithTimeout(stepTimeout).Should(Succeed())
	waitPhase(g, a.call, tg.PhaseCancelled, stepTimeout)
	g.Eventually(func() error {
		return k8s.Get(ctx, types.NamespacedName{Namespace: a.ns, Name: tg.DefaultProviderName}, &tg.ApprovalProvider{})
	}).WithTimeout(stepTimeout).Should(MatchError(ContainSubstring("not found")), "the finalizer goes once the instance is deleted")
	g.Expect(providerRequest(g, b.call.Status.RequestID)).To(HaveKeyWithValue("status", "pending"), "b's request is untouched")
	g.Expect(get(g, b.call).Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
}
