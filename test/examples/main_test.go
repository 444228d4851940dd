// Package examples runs the agents of examples/ against a real apiserver (envtest), the Toolgate
// manager and the reference provider, as their READMEs tell a user to run them: each authenticates
// with a ServiceAccount token of a ServiceAccount bound to the shipped agent role and the sample grant
// to call issue_refund, and a human's decision is given through the provider's API.
//
// The interpreters are what the machine has: python3 for examples/python-rest, node with the pinned
// TypeScript MCP SDK (hack/install-test-deps.sh installs it) for examples/typescript-mcp. A missing
// one skips its tests, but fails them under CI (CI set).
package examples

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
	th "toolgate.dev/toolgate/test/testharness"
)

var (
	env *th.Env
	// agent holds the shipped ClusterRoles (the agent role, the grant to call issue_refund), installed
	// once; each test binds them to a ServiceAccount of its own.
	agent *th.Agent
)

func TestMain(m *testing.M) {
	th.Main(m, &env, func(e *th.Env) (err error) {
		agent, err = e.AddAgent("")
		return err
	})
}

// Result is what the tests' Job writes as its termination message: the tool's output.
const Result = `{"refund_id":"re_8812","status":"issued"}`

// need returns the path of an interpreter the examples need. Missing, it fails the test under CI and
// skips it otherwise.
func need(t *testing.T, program, why string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err != nil {
		missing(t, fmt.Sprintf("%s is not installed (%v): %s", program, err, why))
	}
	return path
}

func missing(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// serviceAccount creates the ServiceAccount name in the harness's namespace and binds it the shipped
// agent role and the sample grant to call issue_refund, as docs/quick-start.md (section 6) does, then
// returns a token for it (TokenRequest) for audience, the apiserver's own when empty, once the grants
// are in force.
func serviceAccount(h *th.Harness, name, audience string) string {
	h.T.Helper()
	ctx := context.Background()
	g := h.G
	g.Expect(h.K8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: name}})).To(Succeed())
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: h.NS, Name: name}}
	for _, role := range append([]string{agent.Role}, agent.CallRoles...) {
		g.Expect(h.K8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: name + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subjects,
		})).To(Succeed())
	}

	// The grants are in force once the ServiceAccount may create a ToolCall of issue_refund (a dry
	// run: admission decides, nothing is stored).
	as := rest.CopyConfig(env.Config)
	as.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + h.NS + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + h.NS, "system:authenticated"},
	}
	c, err := client.New(as, client.Options{Scheme: toolcall.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error {
		return c.Create(ctx, h.NewToolCall("probe", "issue_refund", `{}`, time.Minute, nil), client.DryRunAll)
	}).WithTimeout(30*time.Second).Should(Succeed(), "the grants of %s take effect", name)

	kube, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	tr, err := kube.CoreV1().ServiceAccounts(h.NS).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

// onlyToolCall waits until the namespace holds exactly one ToolCall and returns its name.
func onlyToolCall(h *th.Harness) string {
	h.T.Helper()
	var name string
	h.G.Eventually(func(g Gomega) {
		list := &tg.ToolCallList{}
		g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		name = list.Items[0].Name
	}).WithTimeout(60 * time.Second).Should(Succeed())
	return name
}

// expectRequester asserts that the ToolCall was created as the ServiceAccount sa: the apiserver
// recorded it as the requester.
func expectRequester(h *th.Harness, name, sa string) {
	h.T.Helper()
	requester := h.Get(name).Spec.Requester
	h.G.Expect(requester).NotTo(BeNil())
	h.G.Expect(requester.Username).To(Equal("system:serviceaccount:" + h.NS + ":" + sa))
}

// expectWithdrawn asserts that the ToolCall is gone and its approval request cancelled at the
// provider, and that no tool ran.
func expectWithdrawn(h *th.Harness, name, requestID string) {
	h.T.Helper()
	h.WaitGone(name, 30*time.Second)
	h.G.Eventually(func() (string, error) {
		r, err := h.Provider.Get(requestID)
		return r.Status, err
	}).WithTimeout(30 * time.Second).Should(Equal(h.WithdrawnStatus()))
	h.G.Expect(h.Jobs()).To(BeEmpty())
}

// process is an example running as a child process.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{}
}

// start runs program with args and env (added to the test's environment) in dir ("" for the
// current directory) until it exits or the test ends; its output is logged if the test failed.
func start(t *testing.T, dir string, env []string, program string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(program, args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s %s\nstdout:\n%s\nstderr:\n%s", program, strings.Join(args, " "), p.Stdout(), p.Stderr())
		}
	})
	return p
}

func (p *process) Stdout() string { return p.stdout.String() }
func (p *process) Stderr() string { return p.stderr.String() }

// exitCode waits for the process to exit and returns its exit code.
func (p *process) exitCode(g *WithT) int {
	g.Eventually(p.done).WithTimeout(60*time.Second).Should(BeClosed(), "the example exits")
	return p.cmd.ProcessState.ExitCode()
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
