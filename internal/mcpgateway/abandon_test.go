package mcpgateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/test/testenv"
	th "toolgate.dev/toolgate/test/testharness"
)

// abandonBound is the documented bound (docs/mcp-gateway.md) within which the call of a client that
// is gone is abandoned with the default PingInterval: two intervals, plus the time the controller
// takes to delete the ToolCall and cancel its request.
const abandonBound = 30 * time.Second

// agent is an MCP client in a child process (test/mcpagent): the official TypeScript SDK's client
// under Node, or the official Go SDK's client. Its stdout lines arrive on lines.
type agent struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}

	mu     sync.Mutex
	output []string
}

// tsSDKDir is where hack/install-test-deps.sh installs the pinned TypeScript MCP SDK.
func tsSDKDir(t *testing.T) string {
	t.Helper()
	dir, err := testenv.NPMPackageDir("mcpagent", filepath.Join("node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	if err != nil {
		msg := "the TypeScript MCP SDK: " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// startTSAgent runs test/mcpagent/ts/agent.cjs with the official TypeScript SDK client, sending
// token (if any) as its bearer token.
func (w *world) startTSAgent(tool, args string, token ...string) *agent {
	w.T.Helper()
	sdk := tsSDKDir(w.T.(*testing.T))
	root, err := testenv.RepoRoot()
	w.G.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command("node", filepath.Join(root, "test", "mcpagent", "ts", "agent.cjs"), w.url, tool, args)
	cmd.Env = append(os.Environ(), "TOOLGATE_MCP_SDK_DIR="+sdk)
	if len(token) > 0 {
		cmd.Env = append(cmd.Env, "TOOLGATE_MCP_TOKEN="+token[0])
	}
	return w.startAgent(cmd)
}

// startGoAgent runs test/mcpagent with the official Go SDK client, sending token (if any) as its
// bearer token.
func (w *world) startGoAgent(tool, args string, token ...string) *agent {
	w.T.Helper()
	cmd := exec.Command(th.Binary(w.T, "./test/mcpagent"), w.url, tool, args)
	if len(token) > 0 {
		cmd.Env = append(os.Environ(), "TOOLGATE_MCP_TOKEN="+token[0])
	}
	return w.startAgent(cmd)
}

func (w *world) startAgent(cmd *exec.Cmd) *agent {
	w.T.Helper()
	a := &agent{cmd: cmd, exited: make(chan struct{})}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	w.G.Expect(err).NotTo(HaveOccurred())
	a.stdin, err = cmd.StdinPipe()
	w.G.Expect(err).NotTo(HaveOccurred())
	w.G.Expect(cmd.Start()).To(Succeed())
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			a.mu.Lock()
			a.output = append(a.output, lines.Text())
			a.mu.Unlock()
		}
		_ = cmd.Wait()
		close(a.exited)
	}()
	w.T.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-a.exited
		if w.T.Failed() {
			w.T.Logf("agent stdout:\n%s\nagent stderr:\n%s", strings.Join(a.lines(), "\n"), stderr.String())
		}
	})
	return a
}

func (a *agent) lines() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.output...)
}

func (a *agent) send(g *WithT, line string) {
	_, err := io.WriteString(a.stdin, line+"\n")
	g.Expect(err).NotTo(HaveOccurred())
}

// awaitPending waits until the agent's call is a ToolCall whose approval request is pending, and
// returns the ToolCall's name and the request's id.
func (w *world) awaitPending(a *agent) (string, string) {
	w.T.Helper()
	w.G.Eventually(a.lines).WithTimeout(60*time.Second).Should(ContainElement("listed issue_refund"), "the agent lists the tools")
	name := w.toolCallName()
	return name, w.PendingRequest(name).ID
}

// expectAbandoned asserts that the ToolCall is deleted and its approval request cancelled at the
// provider within abandonBound of since, and that no tool ran.
func (w *world) expectAbandoned(name, requestID string, since time.Time) {
	w.T.Helper()
	w.WaitGone(name, abandonBound)
	w.G.Eventually(func() (string, error) {
		r, err := w.Provider.Get(requestID)
		return r.Status, err
	}).WithTimeout(abandonBound - time.Since(since)).Should(Equal(provider.StatusCancelled))
	w.T.Logf("abandoned and cancelled %s after %s", name, time.Since(since).Round(100*time.Millisecond))
	w.G.Expect(w.Jobs()).To(BeEmpty())
}

// An agent built on the official TypeScript SDK, authenticated with its ServiceAccount token and
// killed (SIGKILL) while its call awaits approval: nothing tells the gateway, yet the call is
// abandoned within the documented bound.
func TestKilledTypeScriptAgentsCallIsAbandoned(t *testing.T) {
	w := newAuthWorld(t)
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	token := w.serviceAccount("agent", testAudience, mayCallRule("issue_refund"), agentRule)
	a := w.startTSAgent("issue_refund", th.RefundArgs, token)
	name, req := w.awaitPending(a)

	killed := time.Now()
	w.G.Expect(a.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	w.expectAbandoned(name, req, killed)
}

// The same with an agent built on the official Go SDK, in its own process.
func TestKilledGoAgentsCallIsAbandoned(t *testing.T) {
	w := newAuthWorld(t)
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	token := w.serviceAccount("agent", testAudience, mayCallRule("issue_refund"), agentRule)
	a := w.startGoAgent("issue_refund", th.RefundArgs, token)
	name, req := w.awaitPending(a)

	killed := time.Now()
	w.G.Expect(a.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	w.expectAbandoned(name, req, killed)
}

// The TypeScript SDK's client.close() while a call waits, without cancelling the call first: the
// SDK aborts its connections and sends neither notifications/cancelled nor DELETE. The agent's
// process stays alive, so what abandons the call is the close alone.
func TestTypeScriptCloseWithoutCancelAbandonsTheCall(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 10 * time.Minute})
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	a := w.startTSAgent("issue_refund", th.RefundArgs)
	name, req := w.awaitPending(a)

	closed := time.Now()
	a.send(w.G, "close")
	w.G.Eventually(a.lines).Should(ContainElement("closed"))
	w.expectAbandoned(name, req, closed)
	w.G.Expect(a.exited).NotTo(BeClosed(), "the agent's process is still running")
}

// The TypeScript SDK's terminateSession() (HTTP DELETE of the session) while a call waits.
func TestTypeScriptSessionTerminationAbandonsTheCall(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 10 * time.Minute})
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	a := w.startTSAgent("issue_refund", th.RefundArgs)
	name, req := w.awaitPending(a)

	deleted := time.Now()
	a.send(w.G, "terminate")
	w.G.Eventually(a.lines).Should(ContainElement("terminated"))
	w.expectAbandoned(name, req, deleted)
	w.G.Expect(a.exited).NotTo(BeClosed())
}

// A client whose connection stays open but which answers nothing (a network partition, a frozen
// process): the gateway's ping on the call's stream goes unanswered and the call is abandoned
// within two ping intervals. A client that answers keeps its call waiting.
func TestUnresponsiveClientsCallIsAbandoned(t *testing.T) {
	const interval = 2 * time.Second
	w := newWorld(t, Options{WaitingLimit: 10 * time.Minute, PingInterval: interval})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)

	// A client that answers pings keeps its call for as long as it waits.
	cs := w.connect(nil)
	done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	live := w.toolCallName()
	liveReq := w.PendingRequest(live).ID
	g.Consistently(done).WithTimeout(3 * interval).ShouldNot(Receive())
	g.Expect(w.Get(live).DeletionTimestamp).To(BeNil(), "a client that answers pings keeps its call")
	_, err := w.Provider.Decide(liveReq, provider.StatusDenied, "not now", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.outcome(done).res.IsError).To(BeTrue())
	g.Expect(w.K8s.Delete(context.Background(), w.Get(live))).To(Succeed())
	w.WaitGone(live, 30*time.Second)

	// A client that sends its call and then answers nothing, its connection open.
	session := w.rawPost(g, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"silent","version":"1"}}}`, true)
	w.rawPost(g, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, true)
	go w.rawPost(g, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"issue_refund","arguments":`+th.RefundArgs+`}}`, false)
	name := w.toolCallName()
	req := w.PendingRequest(name).ID
	since := time.Now()
	w.WaitGone(name, 2*interval+10*time.Second)
	g.Eventually(func() (string, error) {
		r, err := w.Provider.Get(req)
		return r.Status, err
	}).Should(Equal(provider.StatusCancelled))
	t.Logf("abandoned %s %s after its request was pending", name, time.Since(since).Round(100*time.Millisecond))
}

// rawPost sends one JSON-RPC message of the streamable HTTP transport by hand and returns the
// session id the gateway answered with. With read false it never reads the response and keeps the
// connection open until the test ends, as a client that stopped answering would.
func (w *world) rawPost(g *WithT, session, body string, read bool) string {
	ctx, cancel := context.WithCancel(context.Background())
	w.T.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if !read {
		if err == nil {
			<-ctx.Done()
			_ = resp.Body.Close()
		}
		return ""
	}
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(BeNumerically("<", 300), "POST %s", body)
	return resp.Header.Get("Mcp-Session-Id")
}

// The Go SDK's ClientSession.Close() while a call waits: it stops answering requests (pings among
// them) and waits for its calls in progress. The unanswered ping abandons the call within two ping
// intervals, and Close returns.
func TestGoCloseWithoutCancelAbandonsTheCall(t *testing.T) {
	const interval = 3 * time.Second
	w := newWorld(t, Options{WaitingLimit: 10 * time.Minute, PingInterval: interval})
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	a := w.startGoAgent("issue_refund", th.RefundArgs)
	name, req := w.awaitPending(a)

	closed := time.Now()
	a.send(w.G, "close")
	w.WaitGone(name, 2*interval+10*time.Second)
	w.expectAbandoned(name, req, closed)
	w.G.Eventually(a.lines).Should(ContainElement("closed"), "Close returns once the call was abandoned")
	w.G.Expect(a.exited).NotTo(BeClosed(), "the agent's process is still running")
}
