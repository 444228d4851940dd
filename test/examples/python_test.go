package examples

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/test/testenv"
	th "toolgate.dev/toolgate/test/testharness"
)

// pythonWorld is a harness with the refund Tool, and what examples/python-rest/agent.py needs to run
// outside the cluster as the ServiceAccount refund-agent: the apiserver's URL and CA, a token file
// and the namespace, in the environment variables its README gives.
type pythonWorld struct {
	*th.Harness
	python, script string
	env            []string
}

func newPythonWorld(t *testing.T) *pythonWorld {
	t.Helper()
	python := need(t, "python3", "examples/python-rest/agent.py runs with it")
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	token := serviceAccount(h, "refund-agent", "")

	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	h.G.Expect(os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)).To(Succeed())
	h.G.Expect(os.WriteFile(caFile, env.Config.CAData, 0o600)).To(Succeed())
	server := env.Config.Host
	if !strings.HasPrefix(server, "https://") {
		server = "https://" + server
	}
	root, err := testenv.RepoRoot()
	h.G.Expect(err).NotTo(HaveOccurred())
	return &pythonWorld{
		Harness: h, python: python, script: filepath.Join(root, "examples", "python-rest", "agent.py"),
		env: []string{"TOOLGATE_SERVER=" + server, "TOOLGATE_TOKEN_FILE=" + tokenFile, "TOOLGATE_CA_FILE=" + caFile, "TOOLGATE_NAMESPACE=" + h.NS},
	}
}

// run starts the agent with args after the tool's name.
func (w *pythonWorld) run(args ...string) *process {
	w.T.Helper()
	return start(w.T.(*testing.T), "", w.env, w.python, append([]string{w.script, "issue_refund"}, args...)...)
}

// awaiting waits until the agent's call awaits a human, and the agent says so; it returns the
// ToolCall's name and its request's id.
func (w *pythonWorld) awaiting(p *process) (string, string) {
	w.T.Helper()
	name := onlyToolCall(w.Harness)
	req := w.PendingRequest(name)
	w.G.Eventually(p.Stderr).Should(ContainSubstring("toolcall " + name + ": AwaitingApproval: waiting for a human (request " + req.ID))
	return name, req.ID
}

// The agent creates the ToolCall as its ServiceAccount, with its arguments, reason and waiting
// limit, follows it while a human decides, and once approved and run prints Succeeded and the
// tool's result; it exits 0.
func TestPythonAgentsApprovedCallRuns(t *testing.T) {
	w := newPythonWorld(t)
	g := w.G
	p := w.run("--args", th.RefundArgs, "--reason", "Order 8812 was charged twice.", "--waiting-limit", "10m")
	name, req := w.awaiting(p)
	g.Expect(name).To(HavePrefix("issue-refund-"), "a generated name")
	expectRequester(w.Harness, name, "refund-agent")
	tc := w.Get(name)
	g.Expect(string(tc.Spec.Arguments.Raw)).To(MatchJSON(th.RefundArgs))
	g.Expect(tc.Spec.Reason).To(Equal("Order 8812 was charged twice."))
	g.Expect(tc.Spec.WaitingLimit.Duration).To(Equal(10 * time.Minute))
	g.Expect(p.Stdout()).To(BeEmpty(), "no outcome before the decision")

	w.Approve(req, 5*time.Minute)
	running := w.WaitPhase(name, tg.PhaseRunning)
	g.Eventually(p.Stderr).Should(ContainSubstring("toolcall " + name + ": Running: approved; job " + running.Status.JobName))
	w.FinishJob(running.Status.JobName, true, Result)

	g.Expect(p.exitCode(g)).To(Equal(0))
	g.Expect(p.Stdout()).To(Equal("toolcall " + name + ": Succeeded (reason JobSucceeded)\n" +
		"approver note: The duplicate charge has been confirmed.\n" +
		"result: " + Result + "\n"))
}

// A denied call: the agent prints Denied with the approver's note and exits 4, as kubectl toolcall
// run does; no tool ran.
func TestPythonAgentReportsADenial(t *testing.T) {
	w := newPythonWorld(t)
	g := w.G
	p := w.run("--args", th.RefundArgs)
	name, req := w.awaiting(p)

	_, err := w.Provider.Decide(req, provider.StatusDenied, "Not a duplicate charge.", nil)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(p.exitCode(g)).To(Equal(4))
	g.Expect(p.Stdout()).To(HavePrefix("toolcall " + name + ": Denied (reason Denied)\n"))
	g.Expect(p.Stdout()).To(ContainSubstring("approver note: Not a duplicate charge.\n"))
	g.Expect(p.Stdout()).NotTo(ContainSubstring("result:"))
	g.Expect(w.Jobs()).To(BeEmpty())
}

// Ctrl-C while the call awaits a human: the agent deletes its ToolCall (exit 130), so Toolgate
// cancels the approval request at the provider and nothing runs.
func TestPythonAgentInterruptedWithdrawsItsCall(t *testing.T) {
	w := newPythonWorld(t)
	g := w.G
	p := w.run("--args", th.RefundArgs)
	name, req := w.awaiting(p)

	g.Expect(p.cmd.Process.Signal(os.Interrupt)).To(Succeed())
	g.Expect(p.exitCode(g)).To(Equal(130))
	g.Expect(p.Stderr()).To(ContainSubstring("interrupted; deleted ToolCall " + name + ": its approval request is withdrawn"))
	expectWithdrawn(w.Harness, name, req)
}

// With --name, one per task, a run that crashed (SIGKILL: its ToolCall stays) is resumed by running
// it again: the second run follows the same ToolCall and request rather than asking a human twice. A
// run under that name asking for another call is refused.
func TestPythonAgentRerunUnderItsNameResumesTheCall(t *testing.T) {
	w := newPythonWorld(t)
	g := w.G
	args := []string{"--args", th.RefundArgs, "--name", "refund-order-8812"}
	first := w.run(args...)
	name, req := w.awaiting(first)
	g.Expect(name).To(Equal("refund-order-8812"))
	g.Expect(first.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	g.Eventually(first.done).Should(BeClosed())
	g.Expect(w.Get(name).Status.Phase).To(Equal(tg.PhaseAwaitingApproval), "a crash withdraws nothing")

	other := w.run("--args", `{"payment_id":"payment_999","amount":100,"currency":"GBP"}`, "--name", "refund-order-8812")
	g.Expect(other.exitCode(g)).To(Equal(1))
	g.Expect(other.Stderr()).To(ContainSubstring("a ToolCall named refund-order-8812 already exists in namespace " + w.NS + " and asks for another call"))

	again := w.run(args...)
	g.Eventually(again.Stderr).Should(ContainSubstring("toolcall " + name + ": AwaitingApproval: resumed: this call was created earlier"))
	w.Approve(req, 5*time.Minute)
	running := w.WaitPhase(name, tg.PhaseRunning)
	w.FinishJob(running.Status.JobName, true, Result)
	g.Expect(again.exitCode(g)).To(Equal(0))
	g.Expect(again.Stdout()).To(ContainSubstring("result: " + Result))
	g.Expect(onlyToolCall(w.Harness)).To(Equal(name))
	g.Expect(w.Get(name).Status.RequestID).To(Equal(req), "one approval request")
}
