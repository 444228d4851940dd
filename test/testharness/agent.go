package testharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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

// Agent is an agent's identity: a user who holds nothing but the agent ClusterRole from
// config/rbac/toolcall_agent_role.yaml, installed exactly as shipped and granted per namespace by
// Bind. Tests that act as the agent through it prove that the shipped role is all an agent needs.
type Agent struct {
	// Config authenticates as User.
	Config *rest.Config
	// Kubeconfig is a kubeconfig file for User, for tests that go through --kubeconfig; empty when
	// AddAgent was given no directory.
	Kubeconfig string
	// Role is the agent ClusterRole's name.
	Role string
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
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "toolcall_agent_role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		return nil, fmt.Errorf("config/rbac/toolcall_agent_role.yaml: %w", err)
	}
	if err := e.Client.Create(context.Background(), role); err != nil {
		return nil, err
	}
	user, err := e.Env.AddUser(envtest.User{Name: agentUser}, nil)
	if err != nil {
		return nil, err
	}
	a := &Agent{Config: user.Config(), Role: role.Name, User: agentUser}
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

// Bind grants the agent the agent role in the harness's namespace, as the role's comment tells an
// administrator to, and returns a client authenticated as the agent once the grant is in force.
func (a *Agent) Bind(h *Harness) client.WithWatch {
	h.T.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-toolcalls", Namespace: h.NS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: a.Role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: a.User}},
	}
	h.G.Expect(h.K8s.Create(context.Background(), rb)).To(Succeed())
	c, err := client.NewWithWatch(a.Config, client.Options{Scheme: toolcall.Scheme()})
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Eventually(func() error {
		return c.List(context.Background(), &tg.ToolCallList{}, client.InNamespace(h.NS))
	}).Should(Succeed(), "the agent role binding takes effect")
	return c
}
