package mcpgateway

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// A gateway bound, as config/rbac/mcp_gateway_role.yaml recommends, to a Role of its callers by name
// acts only as them: a ServiceAccount of the namespace that may call the tool and create ToolCalls,
// but that the Role does not name, gets a tool error that names the fix, and nothing is created; a
// listed caller's ToolCall is created as itself.
func TestGatewayActsOnlyAsTheCallersItMayImpersonate(t *testing.T) {
	w := newAuthWorld(t)
	g := w.G
	ctx := context.Background()
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	listed := w.serviceAccount("listed", testAudience, mayCallRule("issue_refund"), agentRule)
	unlisted := w.serviceAccount("unlisted", testAudience, mayCallRule("issue_refund"), agentRule)

	// The namespace's ServiceAccounts are no longer all callers: the gateway may act as "listed" only.
	g.Expect(w.K8s.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "mcp-gateway-impersonator"}})).To(Succeed())
	g.Expect(w.K8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "mcp-gateway-callers"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"listed"}}},
	})).To(Succeed())
	g.Expect(w.K8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "mcp-gateway-callers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "mcp-gateway-callers"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: gatewayUser}},
	})).To(Succeed())
	mayImpersonate := func(name string) func() bool {
		return func() bool {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               gatewayUser,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: w.NS, Verb: "impersonate", Resource: "serviceaccounts", Name: name},
			}}
			g.Expect(w.K8s.Create(ctx, sar)).To(Succeed())
			return sar.Status.Allowed
		}
	}
	g.Eventually(mayImpersonate("listed")).Should(BeTrue(), "the Role of callers takes effect")
	g.Eventually(mayImpersonate("unlisted")).Should(BeFalse(), "the impersonator's binding is gone")

	res, err := w.connectAs(unlisted).CallTool(ctx, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(text(res)).To(ContainSubstring("The call to issue_refund did not run: the gateway may not act as system:serviceaccount:" + w.NS + ":unlisted. An admin lists it among the gateway's callers: mcpGateway.callers in the Helm chart"))
	list := &tg.ToolCallList{}
	g.Expect(w.K8s.List(ctx, list, client.InNamespace(w.NS))).To(Succeed())
	g.Expect(list.Items).To(BeEmpty())

	done := w.call(ctx, w.connectAs(listed), &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name := w.toolCallName()
	g.Expect(w.Get(name).Spec.Requester.Username).To(Equal("system:serviceaccount:" + w.NS + ":listed"))
	_, err = w.Provider.Decide(w.PendingRequest(name).ID, "denied", "not today", nil)
	g.Expect(err).NotTo(HaveOccurred())
	o := w.outcome(done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(text(o.res)).To(ContainSubstring("a human denied it"))
}
