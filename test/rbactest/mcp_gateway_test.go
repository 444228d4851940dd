package rbactest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/testenv"
)

// mcpGatewayPermissions is, for each ClusterRole of config/rbac/mcp_gateway_role.yaml (deployed with
// the others, bound by an admin, or by the chart, for each gateway),
// every permission it grants and why: each role grants exactly its list, so a permission added to a
// role must be reviewed here and a permission listed here is required of the role.
// internal/mcpgateway's tests run the gateway as a user that holds exactly these roles, so a
// permission the gateway needs and its role lacks fails there.
var mcpGatewayPermissions = map[string]map[string]string{
	"mcp-gateway": {
		"get tools.toolgate.dev":                                "tools/list reads the Tools afresh",
		"list tools.toolgate.dev":                               "tools/list, and the informer that announces changes",
		"watch tools.toolgate.dev":                              "the informer that announces changes",
		"delete toolcalls.toolgate.dev":                         "withdraws, as itself, the ToolCalls it created whose callers are gone, whatever the callers may do; bound by a RoleBinding, only in its namespace",
		"impersonate serviceaccounts":                           "creates each ToolCall as its caller; bound by a RoleBinding, only the namespace's ServiceAccounts",
		"create localsubjectaccessreviews.authorization.k8s.io": "asks whether a caller may call a Tool (tools/list, and before each call)",
	},
	"mcp-gateway-authenticator": {
		"create tokenreviews.authentication.k8s.io":                                               "checks the callers' bearer tokens",
		"impersonate uids.authentication.k8s.io":                                                  "carries the caller's uid into its ToolCall's requester",
		"impersonate userextras.authentication.k8s.io/authentication.kubernetes.io/credential-id": "carries the extras of a ServiceAccount token",
		"impersonate userextras.authentication.k8s.io/authentication.kubernetes.io/node-name":     "carries the extras of a Pod-bound ServiceAccount token",
		"impersonate userextras.authentication.k8s.io/authentication.kubernetes.io/node-uid":      "carries the extras of a Pod-bound ServiceAccount token",
		"impersonate userextras.authentication.k8s.io/authentication.kubernetes.io/pod-name":      "carries the extras of a Pod-bound ServiceAccount token",
		"impersonate userextras.authentication.k8s.io/authentication.kubernetes.io/pod-uid":       "carries the extras of a Pod-bound ServiceAccount token",
	},
}

// The MCP gateway's ClusterRoles grant exactly their allow-list, no wildcard, and in particular no
// impersonation of users or groups at large, and on ToolCalls only delete, in the role bound per
// namespace: over HTTP the gateway creates and follows each ToolCall as its caller, and withdraws
// the ones it created as itself.
func TestMCPGatewayRolesStayWithinTheirAllowList(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	const file = "config/rbac/mcp_gateway_role.yaml"
	data, err := os.ReadFile(filepath.Join(root, file))
	g.Expect(err).NotTo(HaveOccurred())

	seen := map[string]bool{}
	granted := map[string]bool{} // role name NUL permission
	var problems []string
	for _, doc := range documentSeparator.Split(string(data), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		r := &rbacv1.ClusterRole{}
		g.Expect(yaml.UnmarshalStrict([]byte(doc), r)).To(Succeed(), file)
		g.Expect(r.Kind).To(Equal("ClusterRole"), file)
		seen[r.Name] = true
		allowed, ok := mcpGatewayPermissions[r.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: ClusterRole %s has no allow-list: add one with the reason for each permission to mcpGatewayPermissions in test/rbactest/mcp_gateway_test.go", file, r.Name))
			continue
		}
		if r.AggregationRule != nil {
			problems = append(problems, fmt.Sprintf("%s: ClusterRole %s has an aggregationRule: list its rules instead", file, r.Name))
		}
		for i, rule := range r.Rules {
			where := fmt.Sprintf("%s: ClusterRole %s rule %d", file, r.Name, i+1)
			for _, v := range append(append(append([]string{}, rule.APIGroups...), rule.Resources...), rule.Verbs...) {
				if strings.Contains(v, "*") {
					problems = append(problems, fmt.Sprintf("%s uses the wildcard %q: name each one it needs", where, v))
				}
			}
			for _, p := range permissions(rule) {
				granted[r.Name+"\x00"+p] = true
				if _, ok := allowed[p]; !ok {
					problems = append(problems, fmt.Sprintf("%s grants %s, not in its allow-list: review whether it is needed, then add it with its reason to mcpGatewayPermissions in test/rbactest/mcp_gateway_test.go", where, strconv.Quote(p)))
				}
			}
		}
	}
	for name, allowed := range mcpGatewayPermissions {
		for p := range allowed {
			if seen[name] && !granted[name+"\x00"+p] {
				problems = append(problems, fmt.Sprintf("%s: ClusterRole %s does not grant %s, which mcpGatewayPermissions requires of it: restore the rule, or remove the entry from test/rbactest/mcp_gateway_test.go once the gateway no longer needs it", file, name, strconv.Quote(p)))
			}
		}
	}
	sort.Strings(problems)
	g.Expect(strings.Join(problems, "\n")).To(BeEmpty())
	for name := range mcpGatewayPermissions {
		g.Expect(seen).To(HaveKey(name), "mcpGatewayPermissions lists %s, which %s no longer holds", name, file)
	}
	// What withdrawing needs is bound per namespace: never by the cluster-wide binding.
	g.Expect(mcpGatewayPermissions["mcp-gateway-authenticator"]).NotTo(HaveKey(ContainSubstring("toolcalls")),
		"the authenticator role is bound cluster-wide: ToolCall permissions belong in mcp-gateway, bound by a RoleBinding")
	g.Expect(mcpGatewayPermissions["mcp-gateway"]).To(HaveKey("delete toolcalls.toolgate.dev"),
		"the gateway withdraws abandoned calls as itself")
}

// The MCP gateway's roles, applied as shipped and bound as their header comment says, on a real
// kube-apiserver: the gateway's ServiceAccount may delete a ToolCall in the namespace it serves (the
// withdrawal of a call it created, with its UID precondition), and nothing else on ToolCalls there,
// and not even that in another namespace.
func TestMCPGatewayRolesOnARealAPIServer(t *testing.T) {
	g := NewWithT(t)
	logf.SetLogger(logr.Discard())
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "mcp_gateway_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())

	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	ctx := t.Context()
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(tg.AddToScheme(scheme)).To(Succeed())
	admin, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	seq := 0
	f := &fixture{t: t, ctx: ctx, admin: admin, seq: &seq}

	for _, ns := range []string{tenant, other} {
		f.must(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	for _, doc := range documentSeparator.Split(string(data), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		r := &rbacv1.ClusterRole{}
		g.Expect(yaml.UnmarshalStrict([]byte(doc), r)).To(Succeed())
		f.must(r)
	}
	// As the file's header comment binds them, for the ServiceAccount payments:refund-mcp-gateway.
	const sa = "refund-mcp-gateway"
	f.must(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: sa}})
	subjectSA := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: tenant, Name: sa}
	f.must(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcp-gateway"},
		Subjects:   []rbacv1.Subject{subjectSA},
	})
	f.must(&rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-authenticator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcp-gateway-authenticator"},
		Subjects:   []rbacv1.Subject{subjectSA},
	})
	user, groups := serviceAccountUser(tenant, sa)
	u, err := env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	gw := &subject{user: user, groups: groups, config: u.Config()}
	gw.client, err = client.NewWithWatch(gw.config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	const toolgate = "toolgate.dev"
	allow := func(verb, resource, ns string, do func(*fixture, client.WithWatch) error) access {
		return access{who: "gateway", verb: verb, group: toolgate, resource: resource, ns: ns, allowed: true, do: do}
	}
	deny := func(verb, resource, ns string, do func(*fixture, client.WithWatch) error) access {
		return access{who: "gateway", verb: verb, group: toolgate, resource: resource, ns: ns, do: do}
	}
	withdraw := func(ns string) func(*fixture, client.WithWatch) error {
		return func(f *fixture, c client.WithWatch) error {
			tc := f.toolCall(ns)
			return c.Delete(f.ctx, tc, client.Preconditions{UID: &tc.UID})
		}
	}
	table := []access{
		allow("delete", "toolcalls", tenant, withdraw(tenant)).changing("withdraws a call it created"),
		deny("delete", "toolcalls", other, withdraw(other)).changing("withdraws a call elsewhere"),
		deny("deletecollection", "toolcalls", tenant, func(f *fixture, c client.WithWatch) error {
			f.toolCall(tenant)
			return c.DeleteAllOf(f.ctx, &tg.ToolCall{}, client.InNamespace(tenant))
		}),
		deny("create", "toolcalls", tenant, createToolCall(tenant)),
		deny("get", "toolcalls", tenant, getToolCall(tenant)),
		deny("list", "toolcalls", tenant, listToolCalls(tenant)),
		deny("watch", "toolcalls", tenant, watchList(&tg.ToolCallList{}, tenant)),
		deny("patch", "toolcalls", tenant, patchToolCallMetadata(tenant)).changing("drops the finalizer"),
		deny("patch", "toolcalls/status", tenant, patchToolCallStatus(tenant)),
		allow("list", "tools", tenant, listTools(tenant)),
		deny("list", "tools", other, listTools(other)),
	}
	waitForBindings(t, admin, map[string]*subject{"gateway": gw}, table)
	for _, a := range table {
		t.Run(a.String(), func(t *testing.T) {
			g := NewWithT(t)
			err := a.do(&fixture{t: t, ctx: ctx, admin: admin, seq: &seq}, gw.client)
			if a.allowed {
				g.Expect(err).NotTo(HaveOccurred(), "the gateway must be allowed to %s %s in %s", a.verb, qualified(a.resource, a.group), a.ns)
				return
			}
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got: %v", err)
			g.Expect(err.Error()).To(ContainSubstring(forbiddenBy(user, a)), "refused, but not by RBAC for this verb and resource")
		})
	}
}
