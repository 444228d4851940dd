package testharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
	"toolgate.dev/toolgate/test/testenv"
)

// Agent is an agent's identity: a user who holds nothing but the ClusterRoles of
// config/rbac/toolcall_agent_role.yaml (the agent role and the grant to call issue_refund), installed
// exactly as shipped and granted per namespace by Bind. Tests that act as the agent through it prove
// that the shipped roles are all an agent needs.
type Agent struct {
	// Config authenticates as User.
	Config *rest.Config
	// Kubeconfig is a kubeconfig file for User, for tests that go through --kubeconfig; empty when
	// AddAgent was given no directory.
	Kubeconfig string
	// Role is the agent ClusterRole's name.
	Role string
	// CallRoles are the shipped ClusterRoles that grant the verb call on tools (issue_refund).
	CallRoles []string
	// User is the agent's user name.
	User string
}

// agentUser is the user AddAgent adds.
const agentUser = "toolgate-test-agent"

// AddAgent installs the agent ClusterRole exactly as shipped and adds the agent user, whose kubeconfig
// it writes into dir (none when dir is empty). The ClusterRole is cluster-wide: call it once per Env.
func (e *Env) AddAgent(dir string) (*Agent, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	// The agent role as config/rbac ships it, and the sample grant of the sample tool.
	var role string
	var callRoles []string
	for _, file := range []string{"config/rbac/toolcall_agent_role.yaml", "config/samples/call_issue_refund_role.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
			r := &rbacv1.ClusterRole{}
			if err := yaml.UnmarshalStrict([]byte(doc), r); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if err := e.Client.Create(context.Background(), r); err != nil {
				return nil, err
			}
			if r.Name == "toolcall-agent" {
				role = r.Name
			} else {
				callRoles = append(callRoles, r.Name)
			}
		}
	}
	if role == "" || len(callRoles) == 0 {
		return nil, fmt.Errorf("config/rbac/toolcall_agent_role.yaml and config/samples/call_issue_refund_role.yaml no longer hold the toolcall-agent role and a grant to call a tool: update AddAgent")
	}
	user, err := e.AddUser(envtest.User{Name: agentUser})
	if err != nil {
		return nil, err
	}
	a := &Agent{Config: user.Config(), Role: role, CallRoles: callRoles, User: agentUser}
	if dir == "" {
		return a, nil
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	a.Kubeconfig = filepath.Join(dir, "agent.kubeconfig")
	if err := os.WriteFile(a.Kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	return a, nil
}

// UnknownTool is a toolName no Tool carries, which Bind lets the agent call anyway (a grant may exist
// before its Tool does): what the controller rejects as UnknownTool once admission let the call by.
const UnknownTool = "no_such_tool"

// Bind grants the agent the agent role and the shipped grant to call issue_refund in the harness's
// namespace, as the roles' comments tell an administrator to, plus the call of UnknownTool, and
// returns a client authenticated as the agent once the grants are in force.
func (a *Agent) Bind(h *Harness) client.WithWatch {
	h.T.Helper()
	ctx := context.Background()
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: a.User}}
	for i, role := range append([]string{a.Role}, a.CallRoles...) {
		h.G.Expect(h.K8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("agent-toolcalls-%d", i), Namespace: h.NS},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subjects,
		})).To(Succeed())
	}
	h.G.Expect(h.K8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-call-unknown-tool", Namespace: h.NS},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{tg.GroupVersion.Group}, Resources: []string{"tools"}, Verbs: []string{"call"}, ResourceNames: []string{UnknownTool}}},
	})).To(Succeed())
	h.G.Expect(h.K8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-call-unknown-tool", Namespace: h.NS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent-call-unknown-tool"},
		Subjects:   subjects,
	})).To(Succeed())
	c, err := client.NewWithWatch(a.Config, client.Options{Scheme: toolcall.Scheme()})
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Eventually(func() error {
		return c.List(ctx, &tg.ToolCallList{}, client.InNamespace(h.NS))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the agent role binding takes effect")
	for _, tool := range []string{"issue_refund", UnknownTool} {
		h.G.Eventually(func(g Gomega) {
			// A dry run: admission decides, nothing is stored.
			tc := h.NewToolCall("probe", tool, `{}`, time.Minute, nil)
			g.Expect(c.Create(ctx, tc, client.DryRunAll)).To(Succeed())
		}).WithTimeout(30*time.Second).Should(Succeed(), "the grant to call %s takes effect", tool)
	}
	return c
}
