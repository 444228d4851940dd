package installer

import (
	"testing"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolgate.dev/toolgate/test/testenv"
)

// The chart's MCP gateway, its RBAC applied as Helm renders it to a real kube-apiserver: whoever
// takes the gateway over holds its ServiceAccount's token, and may act as whom that ServiceAccount
// may impersonate. It may impersonate the callers listed in mcpGateway.callers and nobody else; with
// no callers, in a namespace other than the release's, every ServiceAccount of that namespace; never
// the manager's ServiceAccount nor its own.
func TestChartGatewayCannotActAsTheManager(t *testing.T) {
	g := NewWithT(t)
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	admin, err := client.New(env.Config, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := t.Context()

	// Two releases: one whose gateway serves its own namespace with callers listed, one whose gateway
	// serves the agents' namespace with none.
	const listed, open, agents = "toolgate-listed", "toolgate-open", "agents"
	for _, ns := range []string{listed, open, agents} {
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	apply := func(namespace string, values map[string]any) {
		stream, err := renderChart(t, repoRoot(t), namespace, values)
		g.Expect(err).NotTo(HaveOccurred())
		for _, obj := range objectsByKey(t, stream) {
			switch obj["kind"] {
			case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			default:
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			err := admin.Create(ctx, u)
			if apierrors.IsAlreadyExists(err) && u.GetNamespace() == "" {
				continue // the ClusterRoles both releases ship
			}
			g.Expect(err).NotTo(HaveOccurred(), "creating %s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
		}
	}
	apply(listed, map[string]any{"mcpGateway": map[string]any{"enabled": true, "callers": []any{"refund-agent"}}})
	apply(open, map[string]any{"mcpGateway": map[string]any{"enabled": true, "namespace": agents}})

	type impersonation struct {
		gateway, ns, name string // the gateway's release namespace; the ServiceAccount it would act as
		allowed           bool
	}
	may := func(i impersonation) (bool, string) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + i.gateway + ":toolgate-mcp",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + i.gateway, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: i.ns, Verb: "impersonate", Resource: "serviceaccounts", Name: i.name,
			},
		}}
		g.Expect(admin.Create(ctx, sar)).To(Succeed())
		return sar.Status.Allowed, sar.Status.Reason
	}
	cases := []impersonation{
		{gateway: listed, ns: listed, name: "refund-agent", allowed: true},
		{gateway: open, ns: agents, name: "refund-agent", allowed: true},
		{gateway: open, ns: agents, name: "anyone", allowed: true},
		{gateway: listed, ns: listed, name: "toolgate-controller-manager"},
		{gateway: listed, ns: listed, name: "toolgate-mcp"},
		{gateway: listed, ns: listed, name: "deployer"},
		{gateway: listed, ns: agents, name: "refund-agent"},
		{gateway: open, ns: open, name: "toolgate-controller-manager"},
		{gateway: open, ns: open, name: "toolgate-mcp"},
		{gateway: open, ns: listed, name: "toolgate-controller-manager"},
	}
	// The allowed ones first, until the authorizer has every binding: a refusal before that would
	// prove nothing.
	for _, c := range cases {
		if c.allowed {
			g.Eventually(func() bool { ok, _ := may(c); return ok }).Should(BeTrue(),
				"the gateway of %s impersonates %s/%s", c.gateway, c.ns, c.name)
		}
	}
	for _, c := range cases {
		if !c.allowed {
			ok, reason := may(c)
			g.Expect(ok).To(BeFalse(), "the gateway of %s impersonates %s/%s: %s", c.gateway, c.ns, c.name, reason)
		}
	}
}
