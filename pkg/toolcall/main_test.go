package toolcall_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"

	"toolgate.dev/toolgate/internal/testenv"
	th "toolgate.dev/toolgate/internal/testharness"
)

// env is the control plane every test of this package shares; each test has its own namespace,
// reference provider and manager (internal/testharness).
var env *th.Env

// agentConfig authenticates as agentUser, who holds nothing but the agent ClusterRole from
// config/rbac/toolcall_agent_role.yaml, bound per test namespace by bindAgent.
var (
	agentConfig *rest.Config
	agentRole   string
)

const agentUser = "toolgate-test-agent"

func TestMain(m *testing.M) {
	level := zapcore.ErrorLevel
	if os.Getenv("TOOLGATE_TEST_VERBOSE") != "" {
		level = zapcore.DebugLevel
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(level)))
	var err error
	env, err = th.StartEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := setupAgent(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// setupAgent installs the agent ClusterRole exactly as shipped and adds the agent user.
func setupAgent() error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "toolcall_agent_role.yaml"))
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		return fmt.Errorf("config/rbac/toolcall_agent_role.yaml: %w", err)
	}
	if err := env.Client.Create(context.Background(), role); err != nil {
		return err
	}
	agentRole = role.Name
	user, err := env.Env.AddUser(envtest.User{Name: agentUser}, nil)
	if err != nil {
		return err
	}
	agentConfig = user.Config()
	return nil
}

// agentClient grants the agent user the agent role in the test's namespace, as the role's comment
// tells an administrator to, and returns a client authenticated as that user once the grant is in
// force.
func agentClient(h *th.Harness) client.WithWatch {
	h.T.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-toolcalls", Namespace: h.NS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: agentRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: agentUser}},
	}
	h.G.Expect(h.K8s.Create(context.Background(), rb)).To(Succeed())
	c, err := client.NewWithWatch(agentConfig, client.Options{Scheme: toolcall.Scheme()})
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Eventually(func() error {
		return c.List(context.Background(), &tg.ToolCallList{}, client.InNamespace(h.NS))
	}).Should(Succeed(), "the agent role binding takes effect")
	return c
}
