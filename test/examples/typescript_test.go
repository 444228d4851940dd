package examples

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/test/testenv"
	th "toolgate.dev/toolgate/test/testharness"
)

// sdkDir is where hack/install-test-deps.sh installs the TypeScript MCP SDK at the version
// test/mcpagent/ts pins, which TestTypeScriptExamplePinsTheTestedSDK checks is the example's.
func sdkDir(t *testing.T) string {
	t.Helper()
	dir, err := testenv.NPMPackageDir("mcpagent", filepath.Join("node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	if err != nil {
		missing(t, "the TypeScript MCP SDK: "+err.Error())
	}
	return dir
}

// tsWorld is a harness with the refund Tool and a second Tool the agent may not call, the MCP
// gateway's command (toolgate-mcp) serving the namespace over HTTP and authenticating its callers
// (tokens for its own URL, its default audience), and a copy of examples/typescript-mcp whose
// node_modules is the installed SDK, as `npm ci` would leave it.
type tsWorld struct {
	*th.Harness
	node, dir, url, token string
}

func newTSWorld(t *testing.T, gatewayFlags ...string) *tsWorld {
	t.Helper()
	node := need(t, "node", "examples/typescript-mcp/agent.mjs runs with it (Node 20 or later)")
	sdk := sdkDir(t)
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.Tool("restart-pod", "restart_pod", "")

	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	for _, f := range []string{"agent.mjs", "package.json"} {
		data, err := os.ReadFile(filepath.Join(root, "examples", "typescript-mcp", f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(dir, f), data, 0o644)).To(Succeed())
	}
	g.Expect(os.Symlink(filepath.Join(sdk, "node_modules"), filepath.Join(dir, "node_modules"))).To(Succeed())

	url := startGateway(h, gatewayFlags...)
	return &tsWorld{Harness: h, node: node, dir: dir, url: url, token: serviceAccount(h, "refund-agent", url)}
}

// startGateway runs toolgate-mcp over HTTP for the harness's namespace, with the admin's kubeconfig,
// and flags, until the test ends, and returns its URL once it is ready.
func startGateway(h *th.Harness, flags ...string) string {
	h.T.Helper()
	t := h.T.(*testing.T)
	g := h.G
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	addr, err := th.FreeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	probes, err := th.FreeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	start(t, "", nil, th.Binary(t, "./cmd/toolgate-mcp"), append([]string{
		"--listen", addr, "--namespace", h.NS, "--kubeconfig", kubeconfig, "--health-probe-bind-address", probes}, flags...)...)
	g.Eventually(func() (int, error) {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}).WithTimeout(60*time.Second).Should(Equal(http.StatusOK), "the gateway is ready")
	return "http://" + addr + "/mcp"
}

// run starts the example with args, pointed at the gateway with the agent's token.
func (w *tsWorld) run(args ...string) *process {
	w.T.Helper()
	return start(w.T.(*testing.T), w.dir, []string{"TOOLGATE_MCP_URL=" + w.url, "TOOLGATE_MCP_TOKEN=" + w.token, "TOOLGATE_WAITING_LIMIT=15m"},
		w.node, append([]string{"agent.mjs"}, args...)...)
}

// awaiting waits until the example listed the tools and its call awaits a human, with the gateway's
// progress notification shown; it returns the ToolCall's name and its request's id.
func (w *tsWorld) awaiting(p *process) (string, string) {
	w.T.Helper()
	w.G.Eventually(p.Stdout).WithTimeout(60 * time.Second).Should(ContainSubstring("calling issue_refund"))
	name := onlyToolCall(w.Harness)
	req := w.PendingRequest(name)
	w.G.Eventually(p.Stderr).Should(ContainSubstring("progress: ToolCall " + name + ": AwaitingApproval: waiting for a human to approve the call"))
	return name, req.ID
}

// The example lists only the tools its ServiceAccount may call, calls issue_refund through the
// gateway (a ToolCall made as the ServiceAccount, with the waiting limit it asked for), shows the
// progress notifications while a human decides, and prints the tool's result once it ran; exit 0.
func TestTypeScriptAgentsCallRunsThroughTheGateway(t *testing.T) {
	w := newTSWorld(t)
	g := w.G
	p := w.run("issue_refund", th.RefundArgs)
	name, req := w.awaiting(p)
	g.Expect(p.Stdout()).To(ContainSubstring("tool issue_refund: "))
	g.Expect(p.Stdout()).NotTo(ContainSubstring("restart_pod"), "a tool the agent may not call is not listed")
	expectRequester(w.Harness, name, "refund-agent")
	tc := w.Get(name)
	g.Expect(string(tc.Spec.Arguments.Raw)).To(MatchJSON(th.RefundArgs))
	g.Expect(tc.Spec.WaitingLimit.Duration).To(Equal(15*time.Minute), "TOOLGATE_WAITING_LIMIT, sent in _meta")

	w.Approve(req, 5*time.Minute)
	running := w.WaitPhase(name, tg.PhaseRunning)
	g.Eventually(p.Stderr).Should(ContainSubstring("progress: ToolCall " + name + ": Running: approved; the tool is running"))
	w.FinishJob(running.Status.JobName, true, Result)

	g.Expect(p.exitCode(g)).To(Equal(0))
	g.Expect(p.Stdout()).To(HaveSuffix("ToolCall " + name + ": Succeeded\nresult: " + Result + "\n"))
}

// A denied call is a tool error: the example prints the gateway's explanation, with the approver's
// note, and exits 4 (Denied), as kubectl toolcall run does.
func TestTypeScriptAgentPrintsTheGatewaysExplanation(t *testing.T) {
	w := newTSWorld(t)
	g := w.G
	p := w.run("issue_refund", th.RefundArgs)
	name, req := w.awaiting(p)

	_, err := w.Provider.Decide(req, provider.StatusDenied, "Not a duplicate charge.", nil)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(p.exitCode(g)).To(Equal(4))
	out := p.Stdout()
	g.Expect(out).To(ContainSubstring("the call did not succeed (Denied):\nThe call to issue_refund did not run: a human denied it.\n"))
	g.Expect(out).To(ContainSubstring("Approver's note: Not a duplicate charge."))
	g.Expect(out).To(ContainSubstring("ToolCall: " + w.NS + "/" + name))
	g.Expect(out).NotTo(ContainSubstring("result:"))
	g.Expect(w.Jobs()).To(BeEmpty())
}

// Ctrl-C while the call awaits a human: the example cancels the request (notifications/cancelled)
// and ends its session before it exits 130, so the gateway deletes the ToolCall and Toolgate cancels
// its approval request. The gateway pings no client here: the example's own doing withdraws the call.
func TestTypeScriptAgentInterruptedCancelsItsCall(t *testing.T) {
	w := newTSWorld(t, "--ping-interval=-1s")
	g := w.G
	p := w.run("issue_refund", th.RefundArgs)
	name, req := w.awaiting(p)

	g.Expect(p.cmd.Process.Signal(os.Interrupt)).To(Succeed())
	g.Expect(p.exitCode(g)).To(Equal(130))
	g.Expect(p.Stderr()).To(ContainSubstring("interrupted: the call was cancelled"))
	expectWithdrawn(w.Harness, name, req)
}

// The example's package.json and package-lock.json pin the SDK the tests install and run it with
// (test/mcpagent/ts, hack/install-test-deps.sh): the same packages at the same versions and hashes.
func TestTypeScriptExamplePinsTheTestedSDK(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	read := func(dir, file string) map[string]any {
		data, err := os.ReadFile(filepath.Join(root, dir, file))
		g.Expect(err).NotTo(HaveOccurred())
		var v map[string]any
		g.Expect(json.Unmarshal(data, &v)).To(Succeed(), file)
		return v
	}
	example, tested := "examples/typescript-mcp", "test/mcpagent/ts"
	g.Expect(read(example, "package.json")["dependencies"]).To(Equal(read(tested, "package.json")["dependencies"]),
		"%s/package.json pins another SDK than %s/package.json, which the tests install", example, tested)
	packages := func(dir string) map[string]any {
		p := read(dir, "package-lock.json")["packages"].(map[string]any)
		delete(p, "") // the project itself: its name
		return p
	}
	g.Expect(packages(example)).To(Equal(packages(tested)),
		"%s/package-lock.json locks other packages than %s/package-lock.json: copy its packages (npm ci installs exactly those)", example, tested)
}
