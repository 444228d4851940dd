package rbactest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"toolgate.dev/toolgate/test/testenv"
)

// mcpGatewayPermissions is, for each ClusterRole of config/rbac/mcp_gateway_role.yaml (which
// config/rbac/kustomization.yaml does not deploy: an admin applies and binds it for each gateway),
// every permission it may grant and why. internal/mcpgateway's tests run the gateway as a user that
// holds exactly these roles, so a permission missing here fails there.
var mcpGatewayPermissions = map[string]map[string]string{
	"mcp-gateway": {
		"get tools.toolgate.dev":                                "tools/list reads the Tools afresh",
		"list tools.toolgate.dev":                               "tools/list, and the informer that announces changes",
		"watch tools.toolgate.dev":                              "the informer that announces changes",
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

// The MCP gateway's ClusterRoles grant nothing beyond their allow-list, no wildcard, and in
// particular no impersonation of users or groups at large and nothing on ToolCalls: over HTTP the
// gateway acts as its callers.
func TestMCPGatewayRolesStayWithinTheirAllowList(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	const file = "config/rbac/mcp_gateway_role.yaml"
	data, err := os.ReadFile(filepath.Join(root, file))
	g.Expect(err).NotTo(HaveOccurred())

	seen := map[string]bool{}
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
				if _, ok := allowed[p]; !ok {
					problems = append(problems, fmt.Sprintf("%s grants %s, not in its allow-list: review whether it is needed, then add it with its reason to mcpGatewayPermissions in test/rbactest/mcp_gateway_test.go", where, strconv.Quote(p)))
				}
			}
		}
	}
	g.Expect(strings.Join(problems, "\n")).To(BeEmpty())
	for name := range mcpGatewayPermissions {
		g.Expect(seen).To(HaveKey(name), "mcpGatewayPermissions lists %s, which %s no longer holds", name, file)
	}
}
