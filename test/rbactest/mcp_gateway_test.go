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
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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
		"create localsubjectaccessreviews.authorization.k8s.io": "asks whether a caller may call a Tool (tools/list, and before each call)",
	},
	"mcp-gateway-impersonator": {
		"impersonate serviceaccounts": "creates each ToolCall as its caller; bound by a RoleBinding, only in a namespace whose ServiceAccounts are all callers (a Role of the callers by name is the other way)",
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
	// Whoever takes the gateway over acts as whom it may impersonate: the role bound for its work in
	// the served namespace impersonates nobody (bound in Toolgate's own namespace it would make the
	// gateway the manager), and the cluster-wide one no user, group or ServiceAccount.
	g.Expect(mcpGatewayPermissions["mcp-gateway"]).NotTo(HaveKey(HavePrefix("impersonate")),
		"impersonating the callers belongs in mcp-gateway-impersonator or a Role of the callers by name, bound on its own")
	for _, p := range []string{"impersonate users", "impersonate groups", "impersonate serviceaccounts"} {
		g.Expect(mcpGatewayPermissions["mcp-gateway-authenticator"]).NotTo(HaveKey(p), "the authenticator role is bound cluster-wide")
	}
}

// The MCP gateway's roles, applied as shipped and bound as their header comment says, on a real
// kube-apiserver: the gateway's ServiceAccount may delete a ToolCall in the namespace it serves (the
// withdrawal of a call it created, with its UID precondition), and nothing else on ToolCalls there,
// and not even that in another namespace. It may act as the callers its Role names and as nobody
// else: not another ServiceAccount of its namespace, not itself, not the manager. A gateway bound
// to the impersonator ClusterRole in a namespace acts as any ServiceAccount there, and nowhere else.
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

	// The manager's ServiceAccount, in Toolgate's own namespace, as the chart and config/default name it.
	const toolgateNS, managerSA = "toolgate-system", "toolgate-controller-manager"
	for _, ns := range []string{tenant, other, toolgateNS} {
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
	// Its callers, by name: refund-agent only.
	const caller = "refund-agent"
	f.must(&rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: sa + "-callers"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}, ResourceNames: []string{caller, "billing-agent"}}},
	})
	f.must(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: sa + "-callers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa + "-callers"},
		Subjects:   []rbacv1.Subject{subjectSA},
	})
	f.must(&rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-authenticator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcp-gateway-authenticator"},
		Subjects:   []rbacv1.Subject{subjectSA},
	})
	// Another gateway, payments:agents-gateway, bound to the impersonator ClusterRole in the namespace
	// it serves, elsewhere.
	const anySA = "agents-gateway"
	f.must(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: anySA}})
	f.must(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: anySA + "-impersonator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcp-gateway-impersonator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenant, Name: anySA}},
	})
	for _, a := range []types.NamespacedName{{Namespace: tenant, Name: caller}, {Namespace: tenant, Name: "deployer"}, {Namespace: other, Name: caller}, {Namespace: toolgateNS, Name: managerSA}} {
		f.must(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Name}})
	}
	user, groups := serviceAccountUser(tenant, sa)
	u, err := env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	gw := &subject{user: user, groups: groups, config: u.Config()}
	gw.client, err = client.NewWithWatch(gw.config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	anyUser, anyGroups := serviceAccountUser(tenant, anySA)
	au, err := env.AddUser(envtest.User{Name: anyUser, Groups: anyGroups}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	anyGW := &subject{user: anyUser, groups: anyGroups, config: au.Config()}
	anyGW.client, err = client.NewWithWatch(anyGW.config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	subjects := map[string]*subject{"gateway": gw, "impersonator gateway": anyGW}

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
		actAs("gateway", gw, tenant, caller, true).changing("acts as a caller its Role names"),
		actAs("gateway", gw, tenant, "deployer", false).changing("acts as a ServiceAccount of its namespace that is no caller"),
		actAs("gateway", gw, tenant, sa, false).changing("acts as itself through impersonation"),
		actAs("gateway", gw, other, caller, false).changing("acts as a caller's namesake elsewhere"),
		actAs("gateway", gw, toolgateNS, managerSA, false).changing("becomes the manager"),
		actAs("impersonator gateway", anyGW, other, caller, true).changing("acts as a ServiceAccount of the namespace it serves"),
		actAs("impersonator gateway", anyGW, tenant, caller, false).changing("acts as a ServiceAccount of its own namespace"),
		actAs("impersonator gateway", anyGW, toolgateNS, managerSA, false).changing("becomes the manager"),
	}
	waitForBindings(t, admin, subjects, table)
	for _, a := range table {
		t.Run(a.String(), func(t *testing.T) {
			g := NewWithT(t)
			s := subjects[a.who]
			err := a.do(&fixture{t: t, ctx: ctx, admin: admin, seq: &seq}, s.client)
			if a.allowed {
				g.Expect(err).NotTo(HaveOccurred(), "%s must be allowed to %s %s in %s", a.who, a.verb, qualified(a.resource, a.group), a.ns)
				return
			}
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got: %v", err)
			g.Expect(err.Error()).To(ContainSubstring(forbiddenBy(s.user, a)), "refused, but not by RBAC for this verb and resource")
		})
	}
}

// actAs is the gateway s acting as the ServiceAccount ns/name, as it does to create a caller's ToolCall: a
// SelfSubjectReview made through impersonation, which any authenticated user may make, so that only
// the impersonation itself can be refused. Allowed, the apiserver must name the ServiceAccount as
// the one asking.
func actAs(who string, s *subject, ns, name string, allowed bool) access {
	return access{who: who, verb: "impersonate", resource: "serviceaccounts", name: name, ns: ns, allowed: allowed,
		do: func(f *fixture, _ client.WithWatch) error {
			cfg := rest.CopyConfig(s.config)
			want := "system:serviceaccount:" + ns + ":" + name
			cfg.Impersonate = rest.ImpersonationConfig{UserName: want}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(f.ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if got := review.Status.UserInfo.Username; got != want {
				return fmt.Errorf("impersonating %s, the apiserver took the request for %s's", want, got)
			}
			return nil
		}}
}
