// Package rbactest_test proves that the RBAC shipped in config/rbac is least privilege.
//
// A permission limited to some objects is written "verb resource.group named NAME": the verb "call" on
// tools, which the admission policy in config/admission checks before a ToolCall for that tool is
// created, is only ever granted for named tools.
//
// TestRolesStayWithinTheirAllowLists reads every Role and ClusterRole that config/rbac deploys and
// fails when one grants a permission that is not in allowedPermissions below, or uses a wildcard:
// widening a role (or a +kubebuilder:rbac marker, which regenerates config/rbac/role.yaml) must come
// with a reviewed change to that list.
//
// TestRolesOnARealAPIServer deploys the same manifests, named as config/default names them, to a
// real kube-apiserver (envtest, which authorizes with RBAC) and makes real requests as each identity:
// an agent's ServiceAccount, a viewer, a tool admin and the manager's ServiceAccount. Every refusal
// must be the RBAC authorizer's own (403 Forbidden naming that user, verb and resource), or, for the
// verb "call" on a tool, the admission policy's (403 naming the user and the tool).
package rbactest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/test/testenv"
)

// allowedPermissions is, for each Role and ClusterRole in config/rbac (by its name there, before
// config/default adds its namePrefix), every permission it may grant and why. A permission is
// "verb resource.group[/subresource]" ("verb resource" for the core group) or "verb /path" for a
// non-resource URL.
var allowedPermissions = map[string]map[string]string{
	// Generated from the +kubebuilder:rbac markers in controllers/toolcalls/controller.go and the other controllers.
	"manager-role": {
		"get toolcalls.toolgate.dev":   "reads the ToolCall it reconciles",
		"list toolcalls.toolgate.dev":  "caches ToolCalls (the reconcile source)",
		"watch toolcalls.toolgate.dev": "caches ToolCalls (the reconcile source)",
		"patch toolcalls.toolgate.dev": "adds and removes the finalizer and the acceptance annotations",
		// RBAC cannot tell a finished call from one under way: the manager deletes only finished ones
		// (lifecycle.DeleteAt), and never one whose Job still runs.
		"delete toolcalls.toolgate.dev": "deletes finished ToolCalls once their time to live has passed (--finished-toolcall-ttl, a Tool's spec.finishedCallTTL)",
		// The controller only patches; update grants nothing that patch does not.
		"update toolcalls.toolgate.dev":                      "granted by the marker alongside patch",
		"get toolcalls.toolgate.dev/status":                  "granted by the marker; the status arrives with the object",
		"patch toolcalls.toolgate.dev/status":                "writes the outcome",
		"update toolcalls.toolgate.dev/status":               "granted by the marker alongside patch",
		"update toolcalls.toolgate.dev/finalizers":           "its Jobs block their ToolCall's deletion (blockOwnerDeletion), which OwnerReferencesPermissionEnforcement checks",
		"get tools.toolgate.dev":                             "granted by the marker alongside list",
		"list tools.toolgate.dev":                            "finds the Tool a ToolCall names",
		"watch tools.toolgate.dev":                           "caches Tools",
		"get tools.toolgate.dev/status":                      "granted by the marker; the status arrives with the object",
		"patch tools.toolgate.dev/status":                    "reports whether the Tool's approval rules compile",
		"update tools.toolgate.dev/status":                   "granted by the marker alongside patch",
		"create jobs.batch":                                  "runs an approved call (and dry-runs its Job before asking a human)",
		"get jobs.batch":                                     "reads its Job around the cache before creating one",
		"list jobs.batch":                                    "caches the Jobs it owns",
		"watch jobs.batch":                                   "caches the Jobs it owns",
		"get pods":                                           "granted by the marker alongside list",
		"list pods":                                          "reads a finished Job's Pods for the termination message",
		"watch pods":                                         "follows its Jobs' Pods (label-selected cache) to report a container that cannot get its image",
		"get approvalproviders.toolgate.dev":                 "reads the provider a call uses",
		"list approvalproviders.toolgate.dev":                "caches ApprovalProviders",
		"watch approvalproviders.toolgate.dev":               "caches ApprovalProviders",
		"get clusterapprovalproviders.toolgate.dev":          "reads the provider a call uses",
		"list clusterapprovalproviders.toolgate.dev":         "caches ClusterApprovalProviders",
		"watch clusterapprovalproviders.toolgate.dev":        "caches ClusterApprovalProviders",
		"get approvalproviders.toolgate.dev/status":          "granted by the marker; the status arrives with the object",
		"patch approvalproviders.toolgate.dev":               "adds and removes the finalizer that deletes a provisioned instance",
		"patch approvalproviders.toolgate.dev/status":        "reports whether the provider is Ready",
		"get clusterapprovalproviders.toolgate.dev/status":   "granted by the marker; the status arrives with the object",
		"patch clusterapprovalproviders.toolgate.dev":        "adds and removes the finalizer that deletes a provisioned instance",
		"patch clusterapprovalproviders.toolgate.dev/status": "reports whether the provider is Ready",
		// get only: Secrets are read live when a provider's client is built, probed or refused with
		// a 401, never listed, watched or cached.
		"get secrets":                 "reads the credential a provider object names",
		"create secrets":              "keeps the credential of an instance it provisioned, in a Secret the provider object owns; it never updates or deletes one",
		"get configmaps":              "reads the CA bundle a provider object or an MCPServer names",
		"create events.events.k8s.io": "records ToolCall transitions, and changes of Ready of Tools, provider objects and MCPServers, as Events",
		// The MCPServer controller: it reads MCPServers and writes their status, and generates their
		// Tools. Writing Tools is no more than creating Jobs, which the manager already may.
		"get mcpservers.toolgate.dev":               "granted by the marker alongside list",
		"list mcpservers.toolgate.dev":              "caches MCPServers (the reconcile source)",
		"watch mcpservers.toolgate.dev":             "caches MCPServers (the reconcile source)",
		"get mcpservers.toolgate.dev/status":        "granted by the marker; the status arrives with the object",
		"patch mcpservers.toolgate.dev/status":      "reports whether the MCP server's tools were listed, and which",
		"update mcpservers.toolgate.dev/finalizers": "its Tools block their MCPServer's deletion (blockOwnerDeletion), which OwnerReferencesPermissionEnforcement checks",
		"create tools.toolgate.dev":                 "creates the Tool of each tool an MCPServer exposes",
		"patch tools.toolgate.dev":                  "keeps an MCPServer's Tools in step with the server's tools",
		"delete tools.toolgate.dev":                 "deletes the Tool of a tool an MCPServer no longer exposes",
		"patch events.events.k8s.io":                "records repeated Events",
	},
	"provider-admin": {
		"create approvalproviders.toolgate.dev":           "manages the namespace's ApprovalProviders",
		"delete approvalproviders.toolgate.dev":           "manages the namespace's ApprovalProviders",
		"deletecollection approvalproviders.toolgate.dev": "manages the namespace's ApprovalProviders",
		"get approvalproviders.toolgate.dev":              "manages the namespace's ApprovalProviders",
		"list approvalproviders.toolgate.dev":             "manages the namespace's ApprovalProviders",
		"patch approvalproviders.toolgate.dev":            "manages the namespace's ApprovalProviders",
		"update approvalproviders.toolgate.dev":           "manages the namespace's ApprovalProviders",
		"watch approvalproviders.toolgate.dev":            "manages the namespace's ApprovalProviders",
		"get approvalproviders.toolgate.dev/status":       "reads whether a provider is Ready",
	},
	"leader-election-role": {
		"get leases.coordination.k8s.io":    "leader election",
		"create leases.coordination.k8s.io": "leader election",
		"update leases.coordination.k8s.io": "leader election (renew, release)",
		"create events":                     "records the election",
		"patch events":                      "records repeated election Events",
	},
	// The manager's own namespace, whatever namespaces it serves (with the chart's scope.namespaces,
	// the manager-role's rules are Roles in those namespaces only).
	"manager-namespace-role": {
		"get secrets named toolgate-execution-key": "reads the execution key (controllers/toolcalls/execproof.go)",
		"get secrets named toolgate-receipt-key":   "reads the key receipts are signed with (controllers/toolcalls/receiptkey.go)",
		"create secrets":                           "creates the execution key at the first start and the receipt key at the first receipt (RBAC cannot limit a create to a name)",
		"create events.events.k8s.io":              "records an untrusted position of withdrawn removals on the Lease toolgate-gone-cursor",
		"patch events.events.k8s.io":               "records repeated Events",
	},
	"metrics-auth-role": {
		"create tokenreviews.authentication.k8s.io":        "authenticates callers of the metrics endpoint",
		"create subjectaccessreviews.authorization.k8s.io": "authorizes callers of the metrics endpoint",
	},
	"metrics-reader": {
		"get /metrics": "scrapes the manager's metrics",
	},
	"toolcall-agent": {
		"create toolcalls.toolgate.dev": "submits a call (for the tools it may call)",
		"get toolcalls.toolgate.dev":    "reads its outcome (the status arrives with the object)",
		"list toolcalls.toolgate.dev":   "lists and watches (kubectl get -w, informers)",
		"watch toolcalls.toolgate.dev":  "waits for the outcome",
		"delete toolcalls.toolgate.dev": "abandons a call; Toolgate cancels its pending approval request",
	},
	"toolcall-viewer": {
		"get toolcalls.toolgate.dev":        "audits calls",
		"list toolcalls.toolgate.dev":       "audits calls",
		"watch toolcalls.toolgate.dev":      "audits calls",
		"get toolcalls.toolgate.dev/status": "audits outcomes",
	},
	"tool-admin": {
		"create tools.toolgate.dev":           "manages Tools",
		"delete tools.toolgate.dev":           "manages Tools",
		"deletecollection tools.toolgate.dev": "manages Tools",
		"get tools.toolgate.dev":              "manages Tools",
		"list tools.toolgate.dev":             "manages Tools",
		"patch tools.toolgate.dev":            "manages Tools",
		"update tools.toolgate.dev":           "manages Tools",
		"watch tools.toolgate.dev":            "manages Tools",
		"get toolcalls.toolgate.dev":          "sees how its Tools are used",
		"list toolcalls.toolgate.dev":         "sees how its Tools are used",
		"watch toolcalls.toolgate.dev":        "sees how its Tools are used",
		"get toolcalls.toolgate.dev/status":   "sees how its Tools are used",
		// An MCPServer generates Tools: managing them is managing Tools.
		"create mcpservers.toolgate.dev":           "manages MCPServers",
		"delete mcpservers.toolgate.dev":           "manages MCPServers",
		"deletecollection mcpservers.toolgate.dev": "manages MCPServers",
		"get mcpservers.toolgate.dev":              "manages MCPServers",
		"list mcpservers.toolgate.dev":             "manages MCPServers",
		"patch mcpservers.toolgate.dev":            "manages MCPServers",
		"update mcpservers.toolgate.dev":           "manages MCPServers",
		"watch mcpservers.toolgate.dev":            "manages MCPServers",
		"get mcpservers.toolgate.dev/status":       "reads whether an MCPServer's tools were listed",
	},
}

// clusterWideBindings are the only ClusterRoles that config/rbac binds with a ClusterRoleBinding.
// The agent, viewer and tool-admin roles are bound per namespace by whoever installs Toolgate.
var clusterWideBindings = []string{"manager-role", "metrics-auth-role"}

const allowListFix = "review whether it is needed, then add it with its reason to allowedPermissions in test/rbactest/rbac_test.go"

func TestRolesStayWithinTheirAllowLists(t *testing.T) {
	m := loadRBAC(t)

	t.Run("every rule is allow-listed and no role uses a wildcard", func(t *testing.T) {
		g := NewWithT(t)
		seen := map[string]bool{}
		var problems []string
		for _, r := range m.allRoles() {
			seen[r.name] = true
			problems = append(problems, roleProblems(r)...)
		}
		g.Expect(strings.Join(problems, "\n")).To(BeEmpty(), "config/rbac grants more than reviewed")
		for name := range allowedPermissions {
			g.Expect(seen).To(HaveKey(name),
				"allowedPermissions lists role %s, which config/rbac no longer deploys: remove it from the list (or restore the role)", name)
		}
	})

	t.Run("only the manager's roles are bound by the manifests", func(t *testing.T) {
		g := NewWithT(t)
		for _, b := range m.clusterRoleBindings {
			g.Expect(clusterWideBindings).To(ContainElement(b.RoleRef.Name),
				"%s: ClusterRoleBinding %s binds %s %s cluster-wide; bind user-facing roles per namespace with a RoleBinding",
				m.source["ClusterRoleBinding/"+b.Name], b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		for _, b := range m.roleBindings {
			g.Expect(b.RoleRef.Kind).To(Equal("Role"),
				"%s: RoleBinding %s binds ClusterRole %s; the manifests bind only the manager's own namespaced Roles",
				m.source["RoleBinding/"+b.Name], b.Name, b.RoleRef.Name)
		}
	})

	// The check itself reports what it must: each way of widening the agent role as reviewed is caught.
	t.Run("the check catches a widened role", func(t *testing.T) {
		cases := []struct {
			name  string
			rule  rbacv1.PolicyRule
			agg   bool
			wants []string
		}{
			{"a new verb", rbacv1.PolicyRule{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls"}, Verbs: []string{"update"}},
				false, []string{`grants "update toolcalls.toolgate.dev"`, "toolcall_agent_role.yaml", allowListFix}},
			{"a new resource", rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create"}},
				false, []string{`grants "create jobs.batch"`}},
			{"a new subresource", rbacv1.PolicyRule{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls/status"}, Verbs: []string{"patch"}},
				false, []string{`grants "patch toolcalls.toolgate.dev/status"`}},
			{"a core resource", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
				false, []string{`grants "get secrets"`}},
			{"a wildcard verb", rbacv1.PolicyRule{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls"}, Verbs: []string{"*"}},
				false, []string{`uses the wildcard "*" in verbs`}},
			{"a wildcard resource", rbacv1.PolicyRule{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls/*"}, Verbs: []string{"get"}},
				false, []string{`uses the wildcard "toolcalls/*" in resources`}},
			{"a wildcard group", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"toolcalls"}, Verbs: []string{"get"}},
				false, []string{`uses the wildcard "*" in apiGroups`}},
			{"a non-resource URL", rbacv1.PolicyRule{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"get"}},
				false, []string{`grants "get /healthz"`}},
			{"an aggregation rule", rbacv1.PolicyRule{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls"}, Verbs: []string{"get"}},
				true, []string{"aggregationRule"}},
			{"calling every tool", rbacv1.PolicyRule{APIGroups: []string{"toolgate.dev"}, Resources: []string{"tools"}, Verbs: []string{"call"}},
				false, []string{`grants "call tools.toolgate.dev"`, `calls every tool: name the tools it may call in resourceNames`}},
			{"calling another tool", rbacv1.PolicyRule{APIGroups: []string{"toolgate.dev"}, Resources: []string{"tools"}, Verbs: []string{"call"}, ResourceNames: []string{"restart_pod"}},
				false, []string{`grants "call tools.toolgate.dev named restart_pod"`}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				g := NewWithT(t)
				// The agent role as reviewed, then one more rule.
				agent := role{kind: "ClusterRole", name: "toolcall-agent", file: "config/rbac/toolcall_agent_role.yaml",
					rules: []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls"},
						Verbs: []string{"create", "get", "list", "watch", "delete"}}}}
				g.Expect(roleProblems(agent)).To(BeEmpty())
				widened := agent
				widened.rules = append(slices.Clone(agent.rules), c.rule)
				widened.aggregated = c.agg
				problems := strings.Join(roleProblems(widened), "\n")
				for _, w := range c.wants {
					g.Expect(problems).To(ContainSubstring(w))
				}
			})
		}
	})
}

// roleProblems lists every permission of r outside its allow-list, every wildcard, and an aggregation
// rule (which would let other ClusterRoles widen it).
func roleProblems(r role) []string {
	allowed, ok := allowedPermissions[r.name]
	if !ok {
		allowed, ok = mcpGatewayPermissions[r.name] // reviewed in mcp_gateway_test.go
	}
	if !ok {
		return []string{fmt.Sprintf("%s: %s %s has no allow-list: %s", r.file, r.kind, r.name,
			"add one with the reason for each permission to allowedPermissions in test/rbactest/rbac_test.go")}
	}
	var out []string
	if r.aggregated {
		out = append(out, fmt.Sprintf("%s: %s %s has an aggregationRule, so any ClusterRole carrying its labels widens it: list its rules instead", r.file, r.kind, r.name))
	}
	for i, rule := range r.rules {
		where := fmt.Sprintf("%s: %s %s rule %d (apiGroups %q, resources %q, nonResourceURLs %q, verbs %q)",
			r.file, r.kind, r.name, i+1, rule.APIGroups, rule.Resources, rule.NonResourceURLs, rule.Verbs)
		for field, values := range map[string][]string{"apiGroups": rule.APIGroups, "resources": rule.Resources, "verbs": rule.Verbs, "nonResourceURLs": rule.NonResourceURLs} {
			for _, v := range values {
				if strings.Contains(v, "*") {
					out = append(out, fmt.Sprintf("%s uses the wildcard %q in %s: name each one it needs", where, v, field))
				}
			}
		}
		if slices.Contains(rule.Verbs, "call") && len(rule.ResourceNames) == 0 {
			out = append(out, fmt.Sprintf("%s calls every tool: name the tools it may call in resourceNames", where))
		}
		var extra []string
		for _, p := range permissions(rule) {
			if _, ok := allowed[p]; !ok {
				extra = append(extra, strconv.Quote(p))
			}
		}
		if len(extra) > 0 {
			out = append(out, fmt.Sprintf("%s grants %s, not in its allow-list: %s", where, strings.Join(extra, ", "), allowListFix))
		}
	}
	sort.Strings(out)
	return out
}

// permissions expands a rule into "verb resource.group[/subresource]" entries ("... named NAME" for
// each of its resourceNames) and "verb /path" entries.
func permissions(rule rbacv1.PolicyRule) []string {
	var out []string
	for _, verb := range rule.Verbs {
		for _, url := range rule.NonResourceURLs {
			out = append(out, verb+" "+url)
		}
		for _, group := range rule.APIGroups {
			for _, res := range rule.Resources {
				if len(rule.ResourceNames) == 0 {
					out = append(out, verb+" "+qualified(res, group))
				}
				for _, name := range rule.ResourceNames {
					out = append(out, verb+" "+qualified(res, group)+" named "+name)
				}
			}
		}
	}
	return out
}

// qualified writes a resource as kubectl does: toolcalls.toolgate.dev/status, jobs.batch, pods.
func qualified(resource, group string) string {
	name, sub, _ := strings.Cut(resource, "/")
	if group != "" {
		name += "." + group
	}
	if sub != "" {
		name += "/" + sub
	}
	return name
}

// ---- the manifests ----

type role struct {
	kind, name, file string
	rules            []rbacv1.PolicyRule
	aggregated       bool
}

// rbacManifests is what config/rbac holds, as written there, plus what config/default does to it.
type rbacManifests struct {
	// namePrefix and namespace are config/default's: every name gets the prefix and every namespaced
	// object (and ServiceAccount subject) the namespace.
	namePrefix, namespace string

	clusterRoles        []*rbacv1.ClusterRole
	roles               []*rbacv1.Role
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
	roleBindings        []*rbacv1.RoleBinding
	serviceAccounts     []*corev1.ServiceAccount
	// source maps "Kind/name" to the file that holds it.
	source map[string]string
}

type kustomization struct {
	NamePrefix string   `json:"namePrefix"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
}

var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadRBAC reads the files config/rbac/kustomization.yaml lists, and config/default's namePrefix and
// namespace.
func loadRBAC(t *testing.T) *rbacManifests {
	t.Helper()
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())

	var def, rbac kustomization
	readYAML(g, filepath.Join(root, "config", "default", "kustomization.yaml"), &def)
	readYAML(g, filepath.Join(root, "config", "rbac", "kustomization.yaml"), &rbac)
	g.Expect(def.Resources).To(ContainElement("../rbac"), "config/default/kustomization.yaml no longer deploys ../rbac: update this test")
	g.Expect(def.Namespace).NotTo(BeEmpty(), "config/default/kustomization.yaml sets no namespace")
	g.Expect(rbac.Resources).NotTo(BeEmpty(), "config/rbac/kustomization.yaml lists no resources")

	m := &rbacManifests{namePrefix: def.NamePrefix, namespace: def.Namespace, source: map[string]string{}}
	for _, file := range rbac.Resources {
		display := "config/rbac/" + file
		data, err := os.ReadFile(filepath.Join(root, "config", "rbac", file))
		g.Expect(err).NotTo(HaveOccurred(), "%s is listed in config/rbac/kustomization.yaml but cannot be read", display)
		for _, doc := range documentSeparator.Split(string(data), -1) {
			var meta metav1.TypeMeta
			g.Expect(yaml.Unmarshal([]byte(doc), &meta)).To(Succeed(), display)
			if meta.Kind == "" {
				continue // an empty document
			}
			var obj client.Object
			switch meta.Kind {
			case "ClusterRole":
				o := &rbacv1.ClusterRole{}
				m.clusterRoles, obj = append(m.clusterRoles, o), o
			case "Role":
				o := &rbacv1.Role{}
				m.roles, obj = append(m.roles, o), o
			case "ClusterRoleBinding":
				o := &rbacv1.ClusterRoleBinding{}
				m.clusterRoleBindings, obj = append(m.clusterRoleBindings, o), o
			case "RoleBinding":
				o := &rbacv1.RoleBinding{}
				m.roleBindings, obj = append(m.roleBindings, o), o
			case "ServiceAccount":
				o := &corev1.ServiceAccount{}
				m.serviceAccounts, obj = append(m.serviceAccounts, o), o
			default:
				g.Expect(meta.Kind).To(BeEmpty(), "%s holds a %s, which this test does not check: teach test/rbactest about it", display, meta.Kind)
			}
			// Strict: a misspelt field (verb: instead of verbs:) would otherwise grant nothing silently.
			g.Expect(yaml.UnmarshalStrict([]byte(doc), obj)).To(Succeed(), "%s: %s", display, meta.Kind)
			m.source[meta.Kind+"/"+obj.GetName()] = display
		}
	}
	return m
}

func readYAML(g Gomega, path string, into any) {
	data, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.Unmarshal(data, into)).To(Succeed(), path)
}

func (m *rbacManifests) allRoles() []role {
	var out []role
	for _, r := range m.clusterRoles {
		out = append(out, role{"ClusterRole", r.Name, m.source["ClusterRole/"+r.Name], r.Rules, r.AggregationRule != nil})
	}
	for _, r := range m.roles {
		out = append(out, role{"Role", r.Name, m.source["Role/"+r.Name], r.Rules, false})
	}
	return out
}

// deployed returns the objects as config/default deploys them: names prefixed, namespaced objects
// and ServiceAccount subjects in its namespace, role references renamed.
func (m *rbacManifests) deployed() []client.Object {
	var out []client.Object
	ours := map[string]bool{}
	for _, sa := range m.serviceAccounts {
		ours[sa.Name] = true
		o := sa.DeepCopy()
		o.Name, o.Namespace = m.namePrefix+o.Name, m.namespace
		out = append(out, o)
	}
	subjects := func(in []rbacv1.Subject) []rbacv1.Subject {
		s := slices.Clone(in)
		for i := range s {
			if s[i].Kind == rbacv1.ServiceAccountKind && ours[s[i].Name] {
				s[i].Name, s[i].Namespace = m.namePrefix+s[i].Name, m.namespace
			}
		}
		return s
	}
	for _, r := range m.clusterRoles {
		o := r.DeepCopy()
		o.Name = m.namePrefix + o.Name
		out = append(out, o)
	}
	for _, r := range m.roles {
		o := r.DeepCopy()
		o.Name, o.Namespace = m.namePrefix+o.Name, m.namespace
		out = append(out, o)
	}
	for _, b := range m.clusterRoleBindings {
		o := b.DeepCopy()
		o.Name, o.RoleRef.Name, o.Subjects = m.namePrefix+o.Name, m.namePrefix+o.RoleRef.Name, subjects(o.Subjects)
		out = append(out, o)
	}
	for _, b := range m.roleBindings {
		o := b.DeepCopy()
		o.Name, o.Namespace, o.RoleRef.Name, o.Subjects = m.namePrefix+o.Name, m.namespace, m.namePrefix+o.RoleRef.Name, subjects(o.Subjects)
		out = append(out, o)
	}
	return out
}

// managerServiceAccount is the ServiceAccount config/rbac binds to manager-role, as deployed.
func (m *rbacManifests) managerServiceAccount() (types.NamespacedName, bool) {
	for _, o := range m.deployed() {
		b, ok := o.(*rbacv1.ClusterRoleBinding)
		if !ok || b.RoleRef.Name != m.namePrefix+"manager-role" {
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind {
				return types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, true
			}
		}
	}
	return types.NamespacedName{}, false
}

// ---- the real apiserver ----

const (
	tenant = "payments" // the namespace where the agent, viewer and tool admin are bound
	other  = "elsewhere"
)

// subject is one identity the test acts as.
type subject struct {
	user   string
	groups []string
	config *rest.Config
	client client.WithWatch
}

func serviceAccountUser(ns, name string) (string, []string) {
	return "system:serviceaccount:" + ns + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// fixture creates, as the cluster admin, the objects a request acts on. Every call makes new ones,
// so no case depends on another.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	admin client.WithWatch
	seq   *int // shared by the fixtures of all cases, so that names never repeat
}

func (f *fixture) name(prefix string) string {
	*f.seq++
	return fmt.Sprintf("%s-%d", prefix, *f.seq)
}

func (f *fixture) must(obj client.Object) client.Object {
	f.t.Helper()
	NewWithT(f.t).Expect(f.admin.Create(f.ctx, obj)).To(Succeed(), "creating fixture %T %s as the admin", obj, obj.GetName())
	return obj
}

func (f *fixture) toolCallObject(ns string) *tg.ToolCall {
	return &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("call")},
		Spec: tg.ToolCallSpec{
			Tool:         "issue_refund",
			Arguments:    runtime.RawExtension{Raw: []byte(`{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`)},
			WaitingLimit: metav1.Duration{Duration: 45 * time.Minute},
		},
	}
}

// toolCall makes a ToolCall that the controller has accepted and is waiting on: finalizer, status.
func (f *fixture) toolCall(ns string) *tg.ToolCall {
	f.t.Helper()
	g := NewWithT(f.t)
	tc := f.toolCallObject(ns)
	tc.Finalizers = []string{tg.Finalizer}
	f.must(tc)
	tc.Status.Phase = tg.PhaseAwaitingApproval
	tc.Status.RequestID = "req-" + tc.Name
	g.Expect(f.admin.Status().Update(f.ctx, tc)).To(Succeed())
	return tc
}

// finishedToolCall makes a ToolCall that has ended: no finalizer, a terminal phase.
func (f *fixture) finishedToolCall(ns string) *tg.ToolCall {
	f.t.Helper()
	g := NewWithT(f.t)
	tc := f.toolCallObject(ns)
	f.must(tc)
	tc.Status.Phase = tg.PhaseSucceeded
	g.Expect(f.admin.Status().Update(f.ctx, tc)).To(Succeed())
	return tc
}

func (f *fixture) toolObject(ns string) *tg.Tool {
	name := f.name("tool")
	return &tg.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"rbactest": name}},
		Spec: tg.ToolSpec{
			ToolName:    strings.ReplaceAll(name, "-", "_"),
			JobTemplate: batchv1.JobTemplateSpec{Spec: jobSpec()},
		},
	}
}

func jobSpec() batchv1.JobSpec {
	return batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "tool", Image: "busybox:1.37", Command: []string{"true"}}},
	}}}
}

func (f *fixture) jobObject(ns string) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("job")}, Spec: jobSpec()}
}

func (f *fixture) podObject(ns string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("pod")}, Spec: jobSpec().Template.Spec}
}

func (f *fixture) secret(ns string) *corev1.Secret {
	return f.must(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("secret")},
		StringData: map[string]string{"password": "hunter2"}}).(*corev1.Secret)
}

func (f *fixture) leaseObject(ns string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("lease")},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone")}}
}

// access is one request made as one subject, and whether RBAC must allow it.
type access struct {
	who      string
	verb     string
	group    string
	resource string // with its subresource, as RBAC sees it: toolcalls/status
	name     string // the resourceName the verb is checked on, where it is one object: the tool of "call"
	ns       string // empty for cluster-scoped resources
	allowed  bool
	do       func(f *fixture, c client.WithWatch) error
	what     string // what the request changes, where the verb alone does not say
}

func (a access) named(name string) access {
	a.name = name
	return a
}

func (a access) changing(what string) access {
	a.what = what
	return a
}

func (a access) String() string {
	outcome := "forbidden"
	if a.allowed {
		outcome = "allowed"
	}
	where := "cluster"
	if a.ns != "" {
		where = a.ns
	}
	what := ""
	if a.what != "" {
		what = " (" + a.what + ")"
	}
	named := ""
	if a.name != "" {
		named = " named " + a.name
	}
	return fmt.Sprintf("%s %s %s%s%s in %s %s", a.who, a.verb, qualified(a.resource, a.group), named, what, where, outcome)
}

// The requests. Each makes its own fixtures, then makes exactly one request as the subject.

func createToolCall(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Create(f.ctx, f.toolCallObject(ns)) }
}

// callTool creates a ToolCall for tool: what the verb "call" on that tool allows.
func callTool(ns, tool string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCallObject(ns)
		tc.Spec.Tool = tool
		return c.Create(f.ctx, tc)
	}
}

func getToolCall(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		got := &tg.ToolCall{}
		if err := c.Get(f.ctx, client.ObjectKeyFromObject(tc), got); err != nil {
			return err
		}
		if got.Status.Phase != tg.PhaseAwaitingApproval || got.Status.RequestID != tc.Status.RequestID {
			return fmt.Errorf("the ToolCall read came without its status: %+v", got.Status)
		}
		return nil
	}
}

func getToolCallStatus(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		return c.SubResource("status").Get(f.ctx, tc, &tg.ToolCall{})
	}
}

func listToolCalls(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &tg.ToolCallList{}, client.InNamespace(ns))
	}
}

func watchList(list client.ObjectList, ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		w, err := c.Watch(f.ctx, list, client.InNamespace(ns))
		if err == nil {
			w.Stop()
		}
		return err
	}
}

func deleteToolCall(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Delete(f.ctx, f.toolCall(ns)) }
}

// retireToolCall deletes a finished ToolCall as the manager's retention does: on the UID and
// resourceVersion it read, its Job left to the garbage collector.
func retireToolCall(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.finishedToolCall(ns)
		return c.Delete(f.ctx, tc, client.Preconditions{UID: &tc.UID, ResourceVersion: &tc.ResourceVersion},
			client.PropagationPolicy(metav1.DeletePropagationBackground))
	}
}

// updateToolCallMetadata drops the finalizer that guarantees a pending request is cancelled.
func updateToolCallMetadata(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		tc.Finalizers = nil
		return c.Update(f.ctx, tc)
	}
}

func patchToolCallMetadata(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		base := tc.DeepCopy()
		tc.Finalizers = nil
		return c.Patch(f.ctx, tc, client.MergeFrom(base))
	}
}

func patchToolCallSpec(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"arguments":{"amount":1}}}`))
		return c.Patch(f.ctx, tc, patch)
	}
}

func updateToolCallStatus(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		tc.Status.Phase = tg.PhaseSucceeded
		return c.Status().Update(f.ctx, tc)
	}
}

func patchToolCallStatus(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		base := tc.DeepCopy()
		tc.Status.Phase = tg.PhaseSucceeded
		return c.Status().Patch(f.ctx, tc, client.MergeFrom(base))
	}
}

func createTool(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Create(f.ctx, f.toolObject(ns)) }
}

func getTool(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tool := f.must(f.toolObject(ns))
		return c.Get(f.ctx, client.ObjectKeyFromObject(tool), &tg.Tool{})
	}
}

func listTools(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &tg.ToolList{}, client.InNamespace(ns))
	}
}

// updateTool points the Tool's Job at another image: what an approved call would run.
func updateTool(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tool := f.must(f.toolObject(ns)).(*tg.Tool)
		tool.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image = "attacker.example/tool:latest"
		return c.Update(f.ctx, tool)
	}
}

func patchTool(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tool := f.must(f.toolObject(ns)).(*tg.Tool)
		base := tool.DeepCopy()
		tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: time.Hour}
		return c.Patch(f.ctx, tool, client.MergeFrom(base))
	}
}

func deleteTool(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Delete(f.ctx, f.must(f.toolObject(ns))) }
}

func deleteTools(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tool := f.must(f.toolObject(ns))
		return c.DeleteAllOf(f.ctx, &tg.Tool{}, client.InNamespace(ns), client.MatchingLabels(tool.GetLabels()))
	}
}

func createJob(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Create(f.ctx, f.jobObject(ns)) }
}

func getJob(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Get(f.ctx, client.ObjectKeyFromObject(f.must(f.jobObject(ns))), &batchv1.Job{})
	}
}

func listJobs(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &batchv1.JobList{}, client.InNamespace(ns))
	}
}

func patchJob(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		job := f.must(f.jobObject(ns))
		return c.Patch(f.ctx, job, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"edited":"yes"}}}`)))
	}
}

func deleteJob(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Delete(f.ctx, f.must(f.jobObject(ns))) }
}

func createPod(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Create(f.ctx, f.podObject(ns)) }
}

func getPod(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Get(f.ctx, client.ObjectKeyFromObject(f.must(f.podObject(ns))), &corev1.Pod{})
	}
}

func listPods(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &corev1.PodList{}, client.InNamespace(ns))
	}
}

// providerSpec is a valid provider spec; the objects are never probed here (no manager runs).
func providerSpec() tg.ApprovalProviderSpec {
	return tg.ApprovalProviderSpec{URL: "https://approvals.example.com", CredentialSecretRef: &tg.SecretKeyRef{Name: "approvals-credential"}}
}

func createProvider(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Create(f.ctx, &tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "provider-"}, Spec: providerSpec()})
	}
}

func listProviders(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &tg.ApprovalProviderList{}, client.InNamespace(ns))
	}
}

func createClusterProvider() func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Create(f.ctx, &tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{GenerateName: "provider-"}, Spec: providerSpec()})
	}
}

func listClusterProviders() func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &tg.ClusterApprovalProviderList{})
	}
}

func getSecret(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Get(f.ctx, client.ObjectKeyFromObject(f.secret(ns)), &corev1.Secret{})
	}
}

func updateSecret(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		s := f.secret(ns).DeepCopy()
		s.StringData = map[string]string{"token": "replaced"}
		return c.Update(f.ctx, s)
	}
}

func listSecrets(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &corev1.SecretList{}, client.InNamespace(ns))
	}
}

func createRoleBinding(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Create(f.ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("escalate")},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "anyone"}},
		})
	}
}

func createEvent(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tc := f.toolCall(ns)
		return c.Create(f.ctx, &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: f.name("event")},
			EventTime:           metav1.NowMicro(),
			ReportingController: "toolgate.dev/controller",
			ReportingInstance:   "toolgate-controller-rbactest",
			Action:              "Submit",
			Reason:              tg.ReasonAwaitingApproval,
			Type:                corev1.EventTypeNormal,
			Regarding:           corev1.ObjectReference{APIVersion: tg.GroupVersion.String(), Kind: "ToolCall", Namespace: ns, Name: tc.Name, UID: tc.UID},
		})
	}
}

func createCoreEvent(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		lease := f.must(f.leaseObject(ns))
		return c.Create(f.ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: f.name("event")},
			InvolvedObject: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: ns, Name: lease.GetName(), UID: lease.GetUID()},
			Reason:         "LeaderElection",
			Message:        "became leader",
			Type:           corev1.EventTypeNormal,
			Source:         corev1.EventSource{Component: "toolgate"},
		})
	}
}

func createLease(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Create(f.ctx, f.leaseObject(ns)) }
}

func getLease(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Get(f.ctx, client.ObjectKeyFromObject(f.must(f.leaseObject(ns))), &coordinationv1.Lease{})
	}
}

func updateLease(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		lease := f.must(f.leaseObject(ns)).(*coordinationv1.Lease)
		lease.Spec.HolderIdentity = ptr.To("toolgate-manager")
		return c.Update(f.ctx, lease)
	}
}

func listLeases(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns))
	}
}

func createConfigMap(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("lock")}})
	}
}

func createTokenReview() func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Create(f.ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "not-a-token"}})
	}
}

func createSubjectAccessReview() func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.Create(f.ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "prometheus", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}})
	}
}

func accessTable(system string) []access {
	const toolgate, batch, core, coordination = "toolgate.dev", "batch", "", "coordination.k8s.io"
	allow := func(who, verb, group, resource, ns string, do func(*fixture, client.WithWatch) error) access {
		return access{who: who, verb: verb, group: group, resource: resource, ns: ns, allowed: true, do: do}
	}
	deny := func(who, verb, group, resource, ns string, do func(*fixture, client.WithWatch) error) access {
		return access{who: who, verb: verb, group: group, resource: resource, ns: ns, allowed: false, do: do}
	}
	return []access{
		// The agent: submit, read, wait for and abandon its ToolCalls, and nothing else.
		allow("agent", "create", toolgate, "toolcalls", tenant, createToolCall(tenant)),
		allow("agent", "get", toolgate, "toolcalls", tenant, getToolCall(tenant)),
		allow("agent", "list", toolgate, "toolcalls", tenant, listToolCalls(tenant)),
		allow("agent", "watch", toolgate, "toolcalls", tenant, watchList(&tg.ToolCallList{}, tenant)),
		allow("agent", "delete", toolgate, "toolcalls", tenant, deleteToolCall(tenant)),
		// The tools it may call: the one its call-issue-refund binding names, no other.
		allow("agent", "call", toolgate, "tools", tenant, callTool(tenant, "issue_refund")).named("issue_refund"),
		deny("agent", "call", toolgate, "tools", tenant, callTool(tenant, "restart_pod")).named("restart_pod"),
		deny("agent", "call", toolgate, "tools", tenant, callTool(tenant, "issue-refund")).named("issue-refund").changing("the Tool object's name"),
		deny("agent", "update", toolgate, "toolcalls", tenant, updateToolCallMetadata(tenant)).changing("finalizers"),
		deny("agent", "patch", toolgate, "toolcalls", tenant, patchToolCallMetadata(tenant)).changing("finalizers"),
		deny("agent", "patch", toolgate, "toolcalls", tenant, patchToolCallSpec(tenant)).changing("spec"),
		deny("agent", "update", toolgate, "toolcalls/status", tenant, updateToolCallStatus(tenant)),
		deny("agent", "patch", toolgate, "toolcalls/status", tenant, patchToolCallStatus(tenant)),
		deny("agent", "get", toolgate, "tools", tenant, getTool(tenant)),
		deny("agent", "create", toolgate, "tools", tenant, createTool(tenant)),
		deny("agent", "update", toolgate, "tools", tenant, updateTool(tenant)),
		deny("agent", "patch", toolgate, "tools", tenant, patchTool(tenant)),
		deny("agent", "delete", toolgate, "tools", tenant, deleteTool(tenant)),
		deny("agent", "create", batch, "jobs", tenant, createJob(tenant)),
		deny("agent", "list", batch, "jobs", tenant, listJobs(tenant)),
		deny("agent", "create", core, "pods", tenant, createPod(tenant)),
		deny("agent", "get", core, "secrets", tenant, getSecret(tenant)),
		deny("agent", "list", core, "secrets", tenant, listSecrets(tenant)),
		deny("agent", "create", rbacv1.GroupName, "rolebindings", tenant, createRoleBinding(tenant)),
		// Its RoleBinding is in one namespace only.
		deny("agent", "create", toolgate, "toolcalls", other, createToolCall(other)),
		deny("agent", "get", toolgate, "toolcalls", other, getToolCall(other)),
		// A ServiceAccount of the same name in another namespace, bound nowhere.
		deny("stranger", "create", toolgate, "toolcalls", tenant, createToolCall(tenant)),
		deny("stranger", "create", toolgate, "toolcalls", other, createToolCall(other)),

		// The viewer: reads ToolCalls and their status, nothing else.
		allow("viewer", "get", toolgate, "toolcalls", tenant, getToolCall(tenant)),
		allow("viewer", "get", toolgate, "toolcalls/status", tenant, getToolCallStatus(tenant)),
		allow("viewer", "list", toolgate, "toolcalls", tenant, listToolCalls(tenant)),
		allow("viewer", "watch", toolgate, "toolcalls", tenant, watchList(&tg.ToolCallList{}, tenant)),
		deny("viewer", "create", toolgate, "toolcalls", tenant, createToolCall(tenant)),
		deny("viewer", "delete", toolgate, "toolcalls", tenant, deleteToolCall(tenant)),
		deny("viewer", "patch", toolgate, "toolcalls", tenant, patchToolCallMetadata(tenant)),
		deny("viewer", "patch", toolgate, "toolcalls/status", tenant, patchToolCallStatus(tenant)),
		deny("viewer", "get", toolgate, "tools", tenant, getTool(tenant)),
		deny("viewer", "list", batch, "jobs", tenant, listJobs(tenant)),
		deny("viewer", "list", core, "pods", tenant, listPods(tenant)),

		// The tool admin: manages Tools, reads ToolCalls, runs nothing and decides no outcome.
		allow("tool-admin", "create", toolgate, "tools", tenant, createTool(tenant)),
		allow("tool-admin", "get", toolgate, "tools", tenant, getTool(tenant)),
		allow("tool-admin", "list", toolgate, "tools", tenant, listTools(tenant)),
		allow("tool-admin", "watch", toolgate, "tools", tenant, watchList(&tg.ToolList{}, tenant)),
		allow("tool-admin", "update", toolgate, "tools", tenant, updateTool(tenant)),
		allow("tool-admin", "patch", toolgate, "tools", tenant, patchTool(tenant)),
		allow("tool-admin", "delete", toolgate, "tools", tenant, deleteTool(tenant)),
		allow("tool-admin", "deletecollection", toolgate, "tools", tenant, deleteTools(tenant)),
		allow("tool-admin", "get", toolgate, "toolcalls", tenant, getToolCall(tenant)),
		allow("tool-admin", "list", toolgate, "toolcalls", tenant, listToolCalls(tenant)),
		allow("tool-admin", "get", toolgate, "toolcalls/status", tenant, getToolCallStatus(tenant)),
		deny("tool-admin", "create", toolgate, "toolcalls", tenant, createToolCall(tenant)),
		deny("tool-admin", "delete", toolgate, "toolcalls", tenant, deleteToolCall(tenant)),
		deny("tool-admin", "update", toolgate, "toolcalls/status", tenant, updateToolCallStatus(tenant)),
		deny("tool-admin", "patch", toolgate, "toolcalls/status", tenant, patchToolCallStatus(tenant)),
		deny("tool-admin", "create", batch, "jobs", tenant, createJob(tenant)),
		deny("tool-admin", "create", core, "pods", tenant, createPod(tenant)),
		deny("tool-admin", "get", core, "secrets", tenant, getSecret(tenant)),
		deny("tool-admin", "create", toolgate, "tools", other, createTool(other)),
		allow("tool-admin", "create", toolgate, "mcpservers", tenant, createMCPServer(tenant)),
		allow("tool-admin", "list", toolgate, "mcpservers", tenant, listMCPServers(tenant)),
		allow("tool-admin", "get", toolgate, "mcpservers/status", tenant, getMCPServerStatus(tenant)),
		deny("tool-admin", "patch", toolgate, "mcpservers/status", tenant, patchMCPServerStatus(tenant)),
		deny("agent", "create", toolgate, "mcpservers", tenant, createMCPServer(tenant)),
		deny("viewer", "list", toolgate, "mcpservers", tenant, listMCPServers(tenant)),
		deny("provider-admin", "create", toolgate, "mcpservers", tenant, createMCPServer(tenant)),

		// The provider admin: the namespace's ApprovalProviders only.
		allow("provider-admin", "create", toolgate, "approvalproviders", tenant, createProvider(tenant)),
		allow("provider-admin", "list", toolgate, "approvalproviders", tenant, listProviders(tenant)),
		deny("provider-admin", "create", toolgate, "approvalproviders", other, createProvider(other)),
		deny("provider-admin", "create", toolgate, "clusterapprovalproviders", "", createClusterProvider()),
		deny("provider-admin", "create", toolgate, "tools", tenant, createTool(tenant)),
		deny("provider-admin", "get", core, "secrets", tenant, getSecret(tenant)),
		deny("tool-admin", "create", toolgate, "approvalproviders", tenant, createProvider(tenant)),

		// The manager, bound cluster-wide: what the controller does, in any namespace, and no more.
		allow("manager", "get", toolgate, "toolcalls", other, getToolCall(other)),
		allow("manager", "list", toolgate, "toolcalls", other, listToolCalls(other)),
		allow("manager", "watch", toolgate, "toolcalls", other, watchList(&tg.ToolCallList{}, other)),
		allow("manager", "patch", toolgate, "toolcalls", other, patchToolCallMetadata(other)),
		allow("manager", "patch", toolgate, "toolcalls/status", other, patchToolCallStatus(other)),
		allow("manager", "get", toolgate, "tools", other, getTool(other)),
		allow("manager", "list", toolgate, "tools", other, listTools(other)),
		allow("manager", "watch", toolgate, "tools", other, watchList(&tg.ToolList{}, other)),
		allow("manager", "create", batch, "jobs", other, createJob(other)),
		allow("manager", "get", batch, "jobs", other, getJob(other)),
		allow("manager", "list", batch, "jobs", other, listJobs(other)),
		allow("manager", "watch", batch, "jobs", other, watchList(&batchv1.JobList{}, other)),
		allow("manager", "get", core, "pods", other, getPod(other)),
		allow("manager", "list", core, "pods", other, listPods(other)),
		allow("manager", "watch", core, "pods", other, watchList(&corev1.PodList{}, other)),
		allow("manager", "create", eventsv1.GroupName, "events", other, createEvent(other)),
		allow("manager", "create", "authentication.k8s.io", "tokenreviews", "", createTokenReview()),
		allow("manager", "create", "authorization.k8s.io", "subjectaccessreviews", "", createSubjectAccessReview()),
		deny("manager", "create", toolgate, "toolcalls", other, createToolCall(other)),
		allow("manager", "delete", toolgate, "toolcalls", other, retireToolCall(other)).changing("a finished call past its time to live"),
		deny("manager", "deletecollection", toolgate, "toolcalls", other, func(f *fixture, c client.WithWatch) error {
			f.finishedToolCall(other)
			return c.DeleteAllOf(f.ctx, &tg.ToolCall{}, client.InNamespace(other))
		}),
		// The Tools of MCPServers: created, patched and deleted, never updated.
		allow("manager", "create", toolgate, "tools", other, createTool(other)),
		deny("manager", "update", toolgate, "tools", other, updateTool(other)),
		allow("manager", "patch", toolgate, "tools", other, patchToolSpec(other)),
		allow("manager", "delete", toolgate, "tools", other, deleteTool(other)),
		allow("manager", "list", toolgate, "mcpservers", other, listMCPServers(other)),
		allow("manager", "watch", toolgate, "mcpservers", other, watchList(&tg.MCPServerList{}, other)),
		allow("manager", "patch", toolgate, "mcpservers/status", other, patchMCPServerStatus(other)),
		deny("manager", "create", toolgate, "mcpservers", other, createMCPServer(other)),
		deny("manager", "delete", batch, "jobs", other, deleteJob(other)),
		deny("manager", "patch", batch, "jobs", other, patchJob(other)),
		deny("manager", "create", core, "pods", other, createPod(other)),
		// Secrets: the credentials provider objects name, read one by one, never listed.
		allow("manager", "get", core, "secrets", other, getSecret(other)),
		deny("manager", "list", core, "secrets", other, listSecrets(other)),
		deny("manager", "update", core, "secrets", other, updateSecret(other)),
		allow("manager", "list", toolgate, "approvalproviders", other, listProviders(other)),
		allow("manager", "list", toolgate, "clusterapprovalproviders", "", listClusterProviders()),
		deny("manager", "create", toolgate, "approvalproviders", other, createProvider(other)),
		deny("manager", "create", toolgate, "clusterapprovalproviders", "", createClusterProvider()),
		deny("manager", "create", rbacv1.GroupName, "rolebindings", other, createRoleBinding(other)),
		// Leader election: a Lease and core Events in its own namespace only.
		allow("manager", "create", coordination, "leases", system, createLease(system)),
		allow("manager", "get", coordination, "leases", system, getLease(system)),
		allow("manager", "update", coordination, "leases", system, updateLease(system)),
		allow("manager", "create", core, "events", system, createCoreEvent(system)),
		deny("manager", "list", coordination, "leases", system, listLeases(system)),
		deny("manager", "create", core, "configmaps", system, createConfigMap(system)),
		deny("manager", "create", coordination, "leases", other, createLease(other)),
		deny("manager", "create", core, "events", other, createCoreEvent(other)),
	}
}

func TestRolesOnARealAPIServer(t *testing.T) {
	g := NewWithT(t)
	logf.SetLogger(logr.Discard())
	m := loadRBAC(t)

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
	newClient := func(cfg *rest.Config) client.WithWatch {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = 500, 1000
		c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	admin := newClient(env.Config)
	seq := 0
	f := &fixture{t: t, ctx: ctx, admin: admin, seq: &seq}

	// config/rbac as config/default deploys it, in three namespaces.
	for _, ns := range []string{m.namespace, tenant, other} {
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	for _, obj := range m.deployed() {
		g.Expect(admin.Create(ctx, obj)).To(Succeed(), "deploying %T %s", obj, obj.GetName())
	}
	// The bindings an installer makes for the user-facing roles, as each role's comment shows.
	agentUser, agentGroups := serviceAccountUser(tenant, "agent")
	strangerUser, strangerGroups := serviceAccountUser(other, "agent")
	managerSA, ok := m.managerServiceAccount()
	g.Expect(ok).To(BeTrue(), "config/rbac binds manager-role to no ServiceAccount with a ClusterRoleBinding")
	managerUser, managerGroups := serviceAccountUser(managerSA.Namespace, managerSA.Name)
	for _, ns := range []string{tenant, other} {
		f.must(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}})
	}
	bind := func(role string, s rbacv1.Subject) {
		f.must(&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: m.namePrefix + role},
			Subjects:   []rbacv1.Subject{s},
		})
	}
	bind("toolcall-agent", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: tenant, Name: "agent"})
	// The grant of one tool, as config/samples writes it for the sample Tool.
	grant := &rbacv1.ClusterRole{}
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	readYAML(g, filepath.Join(root, "config", "samples", "call_issue_refund_role.yaml"), grant)
	f.must(grant)
	f.must(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: grant.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: grant.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenant, Name: "agent"}},
	})
	bind("toolcall-viewer", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "viewer"})
	bind("tool-admin", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tool-admin"})
	bind("provider-admin", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "provider-admin"})

	subjects := map[string]*subject{
		"agent":          {user: agentUser, groups: agentGroups},
		"stranger":       {user: strangerUser, groups: strangerGroups},
		"viewer":         {user: "viewer", groups: []string{"system:authenticated"}},
		"tool-admin":     {user: "tool-admin", groups: []string{"system:authenticated"}},
		"provider-admin": {user: "provider-admin", groups: []string{"system:authenticated"}},
		"manager":        {user: managerUser, groups: managerGroups},
	}
	for _, s := range subjects {
		u, err := env.AddUser(envtest.User{Name: s.user, Groups: s.groups}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		s.config = u.Config()
		s.client = newClient(s.config)
	}

	table := accessTable(m.namespace)
	waitForBindings(t, admin, subjects, table)

	for _, a := range table {
		t.Run(a.String(), func(t *testing.T) {
			g := NewWithT(t)
			s := subjects[a.who]
			g.Expect(s).NotTo(BeNil(), "unknown subject %q", a.who)
			f := &fixture{t: t, ctx: ctx, admin: admin, seq: &seq}
			err := a.do(f, s.client)
			if a.allowed {
				g.Expect(err).NotTo(HaveOccurred(), "%s (%s) must be allowed to %s %s", a.who, s.user, a.verb, qualified(a.resource, a.group))
				return
			}
			g.Expect(err).To(HaveOccurred(), "%s (%s) must not be allowed to %s %s, but the request succeeded", a.who, s.user, a.verb, qualified(a.resource, a.group))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got: %v", err)
			if a.verb == "call" {
				g.Expect(err.Error()).To(ContainSubstring(notCallable(s.user, a)), "refused, but not by the admission policy for this tool")
				return
			}
			g.Expect(err.Error()).To(ContainSubstring(forbiddenBy(s.user, a)), "refused, but not by RBAC for this verb and resource")
		})
	}

	t.Run("the manager elects a leader with only its roles", func(t *testing.T) {
		electLeader(t, subjects["manager"], admin, m.namespace)
	})
}

// forbiddenBy is the kube-apiserver's message when RBAC refuses the request.
func forbiddenBy(user string, a access) string {
	if a.ns == "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", user, a.verb, a.resource, a.group)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", user, a.verb, a.resource, a.group, a.ns)
}

// notCallable is the refusal of config/admission's authorization policy when user may not call a tool.
func notCallable(user string, a access) string {
	return fmt.Sprintf(`user %s may not call tool %s in namespace %s: creating this ToolCall needs a Role or ClusterRole bound to the user in namespace %s with the rule {apiGroups: ["toolgate.dev"], resources: ["tools"], verbs: ["call"], resourceNames: [%q]}`,
		user, a.name, a.ns, a.ns, a.name)
}

// waitForBindings waits until the authorizer's informers have every binding: until each allowed
// request of the table is authorized. A refusal checked before that would prove nothing.
func waitForBindings(t *testing.T, admin client.Client, subjects map[string]*subject, table []access) {
	t.Helper()
	g := NewWithT(t)
	for _, a := range table {
		if !a.allowed {
			continue
		}
		s := subjects[a.who]
		resource, sub, _ := strings.Cut(a.resource, "/")
		g.Eventually(func(g Gomega) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: s.user, Groups: s.groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: resource, Subresource: sub, Name: a.name,
				},
			}}
			g.Expect(admin.Create(t.Context(), sar)).To(Succeed())
			g.Expect(sar.Status.Allowed).To(BeTrue(), "%s: never authorized (%s); check its role in config/rbac and its binding", a, sar.Status.Reason)
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
}

// electLeader runs controller-runtime's leader election, as the manager's Deployment enables it, as
// the manager's ServiceAccount: it must win, then release the Lease on shutdown.
func electLeader(t *testing.T, manager *subject, admin client.Client, ns string) {
	g := NewWithT(t)
	mo := controllers.ManagerOptions(controllers.Options{
		LeaderElection: true, LeaderElectionNamespace: ns, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
	})
	id := mo.LeaderElectionID
	mgr, err := ctrl.NewManager(manager.config, mo)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()

	g.Eventually(mgr.Elected()).WithTimeout(30*time.Second).Should(BeClosed(),
		"the manager's ServiceAccount could not win leader election: see leader-election-role")
	lease := &coordinationv1.Lease{}
	g.Expect(admin.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: id}, lease)).To(Succeed())
	g.Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).NotTo(BeEmpty())

	cancel()
	var startErr error
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&startErr))
	g.Expect(startErr).NotTo(HaveOccurred())
	// Releasing is an update of the Lease as the manager.
	g.Expect(admin.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: id}, lease)).To(Succeed())
	g.Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).To(BeEmpty(), "the manager could not release its Lease on shutdown")
}
