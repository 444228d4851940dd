package installer

import (
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
)

// namespacedOnly are the resources a manager limited by scope.namespaces may reach only through a Role
// in a listed namespace (or the release namespace's own Roles), never through a ClusterRoleBinding.
var namespacedOnly = []string{"secrets", "pods", "jobs", "configmaps", "tools", "toolcalls", "leases", "approvalproviders", "mcpservers"}

// With scope.namespaces the manager serves those namespaces only: it runs with --namespaces and
// without ClusterApprovalProviders, its rules are a Role and RoleBinding in each listed namespace, and
// no ClusterRoleBinding gives it any namespaced resource, nor ClusterApprovalProviders, anywhere.
func TestChartScopesTheManagerToItsNamespaces(t *testing.T) {
	g := NewWithT(t)
	r := render(t, `scope: {namespaces: [team-a, team-b]}`)
	_, c := managerContainer(g, r)
	g.Expect(c.Args).To(ContainElements("--namespaces=team-a,team-b", "--cluster-approval-providers=false"))

	const sa = "toolgate-controller-manager"
	clusterRoles := map[string]*rbacv1.ClusterRole{}
	for key := range r {
		if strings.HasPrefix(key, "ClusterRole ") {
			cr := as[rbacv1.ClusterRole](g, r, key)
			clusterRoles[cr.Name] = cr
		}
	}
	for key := range r {
		if !strings.HasPrefix(key, "ClusterRoleBinding ") {
			continue
		}
		b := as[rbacv1.ClusterRoleBinding](g, r, key)
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Name == sa && s.Namespace == release }) {
			continue
		}
		cr := clusterRoles[b.RoleRef.Name]
		g.Expect(cr).NotTo(BeNil(), "%s binds ClusterRole %s, which the chart does not render", key, b.RoleRef.Name)
		for _, rule := range cr.Rules {
			for _, res := range rule.Resources {
				base, _, _ := strings.Cut(res, "/")
				g.Expect(namespacedOnly).NotTo(ContainElement(base), "%s gives the manager %s cluster-wide (ClusterRole %s) in scoped mode", key, res, cr.Name)
				g.Expect(base).NotTo(Equal("clusterapprovalproviders"), "%s gives the manager ClusterApprovalProviders in scoped mode", key)
			}
		}
	}
	g.Expect(r).NotTo(HaveKey("ClusterRoleBinding /toolgate-manager-rolebinding"))
	g.Expect(r).NotTo(HaveKey("ClusterRole /toolgate-manager-role"))

	unscoped := as[rbacv1.ClusterRole](g, render(t, ``), "ClusterRole /toolgate-manager-role")
	for _, ns := range []string{"team-a", "team-b"} {
		role := as[rbacv1.Role](g, r, "Role "+ns+"/toolgate-manager-role")
		binding := as[rbacv1.RoleBinding](g, r, "RoleBinding "+ns+"/toolgate-manager-rolebinding")
		g.Expect(binding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "toolgate-manager-role"}))
		g.Expect(binding.Subjects).To(ConsistOf(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: release}))
		g.Expect(binding.Labels).To(HaveKeyWithValue("app.kubernetes.io/instance", "toolgate"))
		// The ClusterRole's rules, but for the cluster-scoped ClusterApprovalProviders.
		var want []rbacv1.PolicyRule
		for _, rule := range unscoped.Rules {
			rule.Resources = slices.DeleteFunc(slices.Clone(rule.Resources), func(res string) bool { return strings.HasPrefix(res, "clusterapprovalproviders") })
			want = append(want, rule)
		}
		g.Expect(role.Rules).To(Equal(want), "Role %s/toolgate-manager-role", ns)
	}
	// The release namespace: leader election, and the execution key read by its name.
	own := as[rbacv1.Role](g, r, "Role "+release+"/toolgate-manager-namespace-role")
	g.Expect(own.Rules).To(ContainElement(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"toolgate-execution-key"}, Verbs: []string{"get"}}))
	g.Expect(r).To(HaveKey("RoleBinding " + release + "/toolgate-manager-namespace-rolebinding"))
	g.Expect(r).To(HaveKey("RoleBinding " + release + "/toolgate-leader-election-rolebinding"))

	// A ServiceAccount of another name is the subject of every per-namespace binding.
	named := render(t, `{scope: {namespaces: [team-a]}, serviceAccount: {name: gatekeeper}}`)
	g.Expect(as[rbacv1.RoleBinding](g, named, "RoleBinding team-a/toolgate-manager-rolebinding").Subjects).To(
		ConsistOf(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "gatekeeper", Namespace: release}))

	// Without the value, the manager is cluster-wide as before: no --namespaces, no per-namespace Role.
	def := render(t, ``)
	_, c = managerContainer(g, def)
	for _, a := range c.Args {
		g.Expect(a).NotTo(Or(HavePrefix("--namespaces"), HavePrefix("--cluster-approval-providers")))
	}
	g.Expect(def).To(HaveKey("ClusterRoleBinding /toolgate-manager-rolebinding"))
	g.Expect(def).NotTo(HaveKey(HavePrefix("Role team-a/")))
}

// scope.namespaces is checked by the schema (DNS-1123 labels, each once), and an MCP gateway serving
// a namespace the manager does not is refused, naming both values.
func TestChartRefusesABadScope(t *testing.T) {
	for values, want := range map[string]string{
		`scope: {namespaces: [Team_A]}`:         "/scope/namespaces/0",
		`scope: {namespaces: [team-a, team-a]}`: "/scope/namespaces",
		`scope: {namespaces: [""]}`:             "/scope/namespaces/0",
		`scope: {namespaces: team-a}`:           "/scope/namespaces",
		`scope: {namespace: [team-a]}`:          "namespace",
		`{scope: {namespaces: [team-a]}, mcpGateway: {enabled: true, namespace: team-b}}`: "mcpGateway serves namespace team-b, which scope.namespaces (team-a) does not list",
	} {
		_, err := renderWith(t, values)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring(want)), values)
	}
	// The gateway in a listed namespace is fine.
	r := render(t, `{scope: {namespaces: [team-a]}, mcpGateway: {enabled: true, namespace: team-a}}`)
	NewWithT(t).Expect(r).To(HaveKey("Deployment " + release + "/toolgate-mcp"))
}
