package mcpservers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/internal/mcpclient"
	"toolgate.dev/toolgate/test/mcpeverything"
	th "toolgate.dev/toolgate/test/testharness"
)

// mcpServer creates an MCPServer named "everything" for the reference server at url, exposing tools.
func mcpServer(h *th.Harness, url string, tools []string, mutate ...func(*tg.MCPServer)) *tg.MCPServer {
	h.T.Helper()
	srv := &tg.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "everything", Namespace: h.NS},
		Spec: tg.MCPServerSpec{
			URL: url, AllowInsecureHTTP: true, Tools: tools, ExecutorImage: "mcp-call:test",
			RefreshInterval: &metav1.Duration{Duration: time.Second},
			ToolTemplate:    tg.MCPToolTemplate{ExecutionTimeout: &metav1.Duration{Duration: 20 * time.Second}},
		},
	}
	for _, m := range mutate {
		m(srv)
	}
	h.G.Expect(h.K8s.Create(context.Background(), srv)).To(Succeed())
	return srv
}

// ready is the MCPServer's Ready condition's status and reason, "" when it has none for its generation.
func mcpReady(g Gomega, h *th.Harness, name string) (string, string) {
	srv := &tg.MCPServer{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, srv)).To(Succeed())
	c := meta.FindStatusCondition(srv.Status.Conditions, tg.ConditionReady)
	if c == nil || c.ObservedGeneration != srv.Generation {
		return "", ""
	}
	return string(c.Status), c.Reason
}

// generatedTools are the names of the Tools of the namespace that MCPServer name owns.
func generatedTools(g Gomega, h *th.Harness, name string) []string {
	list := &tg.ToolList{}
	g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS), client.MatchingLabels{tg.LabelMCPServer: name})).To(Succeed())
	var names []string
	for _, t := range list.Items {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

func getTool(g Gomega, h *th.Harness, name string) *tg.Tool {
	t := &tg.Tool{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, t)).To(Succeed())
	return t
}

// waitToolReady waits until the Tool name (one an MCPServer generated) is Ready: its schema compiled.
func waitToolReady(h *th.Harness, name string, because ...any) {
	h.T.Helper()
	h.G.Eventually(func(g Gomega) metav1.ConditionStatus {
		c := meta.FindStatusCondition(getTool(g, h, name).Status.Conditions, tg.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		return c.Status
	}).Should(Equal(metav1.ConditionTrue), because...)
}

// Discovery: the exposed tools of the reference server become Tools owned by the MCPServer, with the
// server's schema, annotations and description, a Job that runs mcp-call for that tool, and the
// header from the consenting Secret by reference; a Tool the tool controller finds Ready. Taking a
// glob out of spec.tools deletes its Tools and leaves the others untouched.
func TestMCPServerDiscoversTheExposedTools(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	everything := mcpeverything.Start(t)
	ctx := context.Background()
	g.Expect(h.K8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "everything-token", Namespace: h.NS, Labels: map[string]string{tg.LabelMCPServer: "everything"}},
		StringData: map[string]string{"token": "Bearer s3cret"},
	})).To(Succeed())
	srv := mcpServer(h, everything.URL, []string{"echo", "get-s*"}, func(s *tg.MCPServer) {
		s.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "everything-token", Key: "token"}}}
	})

	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "everything") }).
		Should(Equal([]string{"everything--echo", "everything--get-structured-content", "everything--get-sum"}))
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"True", tg.ReasonToolsDiscovered}))

	got := &tg.MCPServer{}
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
	g.Expect(got.Status.Tools).To(HaveLen(3))
	g.Expect(got.Status.Tools[0]).To(And(
		HaveField("Name", "echo"), HaveField("ToolName", "everything__echo"), HaveField("Tool", "everything--echo"),
		HaveField("SchemaHash", HaveLen(16))))

	echo := getTool(g, h, "everything--echo")
	g.Expect(metav1.IsControlledBy(echo, got)).To(BeTrue())
	g.Expect(echo.Spec.ToolName).To(Equal("everything__echo"))
	g.Expect(echo.Spec.ExecutionTimeout.Duration).To(Equal(20 * time.Second))
	var schema map[string]any
	g.Expect(json.Unmarshal(echo.Spec.ArgumentsSchema.Raw, &schema)).To(Succeed())
	g.Expect(schema).To(HaveKeyWithValue("properties", HaveKey("message")))
	g.Expect(schema).To(HaveKeyWithValue("required", ConsistOf("message")))
	g.Expect(echo.Spec.MCPAnnotations).NotTo(BeNil())
	g.Expect(*echo.Spec.MCPAnnotations.ReadOnlyHint).To(BeTrue())
	g.Expect(echo.Annotations["toolgate.dev/description"]).To(HavePrefix("Echoes back the input string"))
	c := echo.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	g.Expect(c.Image).To(Equal("mcp-call:test"))
	g.Expect(*echo.Spec.JobTemplate.Spec.BackoffLimit).To(BeZero())
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	g.Expect(env[mcpclient.EnvTool].Value).To(Equal("echo"))
	g.Expect(env[mcpclient.EnvURL].Value).To(Equal(everything.URL))
	g.Expect(env[mcpclient.EnvHeaderName(0)].Value).To(Equal("Authorization"))
	g.Expect(env[mcpclient.EnvHeaderValue(0)].Value).To(BeEmpty(), "the header's value stays in its Secret")
	g.Expect(env[mcpclient.EnvHeaderValue(0)].ValueFrom.SecretKeyRef.Name).To(Equal("everything-token"))
	waitToolReady(h, "everything--echo", "the server's inputSchema compiles as the Tool's argumentsSchema")

	// Narrowing spec.tools deletes the Tools of the tools no longer exposed; echo's Tool is not
	// written again (its generation holds, so calls waiting on it are not withdrawn).
	gen := echo.Generation
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
	got.Spec.Tools = []string{"echo"}
	g.Expect(h.K8s.Update(ctx, got)).To(Succeed())
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "everything") }).Should(Equal([]string{"everything--echo"}))
	g.Consistently(func(g Gomega) int64 { return getTool(g, h, "everything--echo").Generation }).
		WithTimeout(3 * time.Second).Should(Equal(gen))

	// A change of the template changes the Tools (a new generation).
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
	got.Spec.ToolTemplate.ExecutionTimeout = &metav1.Duration{Duration: 30 * time.Second}
	g.Expect(h.K8s.Update(ctx, got)).To(Succeed())
	g.Eventually(func(g Gomega) time.Duration { return getTool(g, h, "everything--echo").Spec.ExecutionTimeout.Duration }).
		Should(Equal(30 * time.Second))

	// A generated Tool edited by hand is written back; one whose label was removed is still its own.
	edited := getTool(g, h, "everything--echo")
	base := edited.DeepCopy()
	delete(edited.Labels, tg.LabelMCPServer)
	edited.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image = "someone/else:latest"
	g.Expect(h.K8s.Patch(ctx, edited, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func(g Gomega) []string {
		t := getTool(g, h, "everything--echo")
		return []string{t.Labels[tg.LabelMCPServer], t.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image}
	}).Should(Equal([]string{"everything", "mcp-call:test"}))
}

// The server going away makes the MCPServer Reconciling (ServerUnreachable) and keeps its Tools; the
// server back makes it Ready again.
func TestMCPServerUnreachableThenBack(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	everything := mcpeverything.Start(t)
	mcpServer(h, everything.URL, []string{"echo"})
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"True", tg.ReasonToolsDiscovered}))

	everything.Stop()
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"False", tg.ReasonServerUnreachable}))
	srv := &tg.MCPServer{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "everything"}, srv)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(srv.Status.Conditions, tg.ConditionReconciling)).To(BeTrue())
	g.Expect(meta.IsStatusConditionTrue(srv.Status.Conditions, tg.ConditionStalled)).To(BeFalse())
	g.Expect(generatedTools(g, h, "everything")).To(Equal([]string{"everything--echo"}), "an unreachable server deletes no Tool")

	everything.Restart()
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"True", tg.ReasonToolsDiscovered}))
}

// Settings only a change fixes: a header Secret that does not consent (no label) is answered as
// missing, and a Tool of the name the MCPServer would use that is not its own is left alone.
func TestMCPServerStalls(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	everything := mcpeverything.Start(t)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: h.NS},
		StringData: map[string]string{"token": "Bearer not-for-you"},
	}
	g.Expect(h.K8s.Create(ctx, secret)).To(Succeed())
	h.Tool("everything--echo", "everything__echo", "")
	mcpServer(h, everything.URL, []string{"echo", "get-sum"}, func(s *tg.MCPServer) {
		s.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "someone-elses", Key: "token"}}}
	})
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"False", tg.ReasonHeaderSecretUnavailable}))
	g.Expect(generatedTools(g, h, "everything")).To(BeEmpty())

	// The Secret consents: discovery runs, get-sum gets its Tool, echo's name is taken.
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
	secret.Labels = map[string]string{tg.LabelMCPServer: "everything"}
	g.Expect(h.K8s.Update(ctx, secret)).To(Succeed())
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"False", tg.ReasonToolNameConflict}))
	g.Expect(generatedTools(g, h, "everything")).To(Equal([]string{"everything--get-sum"}))
	theirs := getTool(g, h, "everything--echo")
	g.Expect(theirs.OwnerReferences).To(BeEmpty())
	g.Expect(theirs.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image).To(Equal("busybox:1.36"))
}

// End to end in envtest: a generated Tool's call is put to a human, the approved call's Job carries
// the approved arguments and the server's settings, and mcp-call run with that Job's env (as the
// kubelet would give it) calls the reference server once; its result becomes the ToolCall's.
func TestMCPServerToolCallRunsTheToolOnce(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	everything := mcpeverything.Start(t)
	mcpServer(h, everything.URL, []string{"echo"})
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "everything") }).Should(Equal([]string{"everything--echo"}))
	waitToolReady(h, "everything--echo")

	// The server's schema is the Tool's: a call without the message is rejected before anyone is asked.
	h.ToolCall("no-message", "everything__echo", `{}`, 2*time.Minute, nil)
	g.Expect(h.WaitPhase("no-message", tg.PhaseRejected).Status.Reason).To(Equal(tg.ReasonInvalidArguments))

	args := `{"message":"refund $(AMOUNT) to Zoë"}`
	h.ToolCall("echo", "everything__echo", args, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("echo").ID, 5*time.Minute)
	running := h.WaitPhase("echo", tg.PhaseRunning)
	jobs := h.Jobs()
	g.Expect(jobs).To(HaveLen(1))
	// The kubelet's view of the env: $$ written for each $ comes back as $.
	getenv := map[string]string{}
	for _, e := range jobs[0].Spec.Template.Spec.Containers[0].Env {
		getenv[e.Name] = strings.ReplaceAll(e.Value, "$$", "$")
	}
	g.Expect(getenv["TOOL_ARGUMENTS"]).To(Equal(args))
	o := mcpcall.Run(ctx, mcpcall.FromEnv(func(k string) string { return getenv[k] }, "test"))
	g.Expect(o).To(Equal(mcpcall.Outcome{Code: mcpcall.ExitSucceeded, Message: "Echo: refund $(AMOUNT) to Zoë"}))
	h.FinishJob(running.Status.JobName, true, o.Message)
	done := h.WaitPhase("echo", tg.PhaseSucceeded)
	g.Expect(done.Status.Result).To(Equal("Echo: refund $(AMOUNT) to Zoë"))
}

// A tool whose schema changes at the server changes its Tool, which withdraws the call waiting on
// the old one; a tool that disappears deletes its Tool. The server is the MCP Go SDK's, whose tools
// the test changes (the reference server's are fixed).
func TestMCPServerFollowsTheServersTools(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	server := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	handler := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	schema := func(prop string) map[string]any {
		return map[string]any{"type": "object", "properties": map[string]any{prop: map[string]any{"type": "string"}}, "required": []any{prop}}
	}
	server.AddTool(&mcp.Tool{Name: "lookup", Description: "Looks an entry up", InputSchema: schema("id")}, handler)
	server.AddTool(&mcp.Tool{Name: "delete_entry", InputSchema: schema("id")}, handler)
	hs := serveMCP(t, server)
	srv := &tg.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: h.NS},
		Spec: tg.MCPServerSpec{URL: hs.URL, AllowInsecureHTTP: true, Tools: []string{"*"}, ExecutorImage: "mcp-call:test",
			RefreshInterval: &metav1.Duration{Duration: time.Second},
			ToolTemplate:    tg.MCPToolTemplate{ExecutionTimeout: &metav1.Duration{Duration: 20 * time.Second}}},
	}
	g.Expect(h.K8s.Create(ctx, srv)).To(Succeed())
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).
		Should(Equal([]string{"ledger--delete-entry", "ledger--lookup"}))
	g.Eventually(func(g Gomega) metav1.ConditionStatus {
		c := meta.FindStatusCondition(getTool(g, h, "ledger--lookup").Status.Conditions, tg.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		return c.Status
	}).Should(Equal(metav1.ConditionTrue))
	before := getTool(g, h, "ledger--lookup")
	got := &tg.MCPServer{}
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
	hash := got.Status.Tools[1].SchemaHash

	h.ToolCall("waiting", "ledger__lookup", `{"id":"e-1"}`, 2*time.Minute, nil)
	h.PendingRequest("waiting")

	server.RemoveTools("lookup")
	server.AddTool(&mcp.Tool{Name: "lookup", Description: "Looks an entry up", InputSchema: schema("key")}, handler)
	g.Eventually(func(g Gomega) int64 { return getTool(g, h, "ledger--lookup").Generation }).Should(BeNumerically(">", before.Generation))
	after := getTool(g, h, "ledger--lookup")
	g.Expect(after.UID).To(Equal(before.UID))
	g.Expect(string(after.Spec.ArgumentsSchema.Raw)).To(ContainSubstring(`"key"`))
	g.Eventually(func(g Gomega) string {
		g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
		return got.Status.Tools[1].SchemaHash
	}).ShouldNot(Equal(hash))
	withdrawn := h.WaitPhase("waiting", tg.PhaseCancelled)
	g.Expect(withdrawn.Status.Reason).To(Equal(tg.ReasonToolChanged))

	server.RemoveTools("delete_entry")
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).Should(Equal([]string{"ledger--lookup"}))
}

// finishMCPJob ends the Job of an MCPServer's Tool as the kubelet and the Job controller would once
// mcp-call exited with code exit and message msg.
func finishMCPJob(h *th.Harness, jobName string, exit int32, msg string) {
	h.T.Helper()
	endMCPJob(h, jobName, corev1.ContainerStateTerminated{ExitCode: exit, Message: msg}, "BackoffLimitExceeded")
}

// A call whose mcp-call lost the connection after sending ends Failed with ToolMayHaveRun, never as
// not run; a tool error ends JobFailed with the tool's words.
func TestMCPServerCallLostAfterSendingMayHaveRun(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	everything := mcpeverything.Start(t)
	mcpServer(h, everything.URL, []string{"echo"})
	waitToolReady(h, "everything--echo")

	for _, c := range []struct {
		name   string
		exit   int32
		msg    string
		reason string
	}{
		{"lost", mcpcall.ExitMayHaveRun, "The connection to the MCP server was lost after the call to echo was sent: the tool may have run.", tg.ReasonToolMayHaveRun},
		{"tool-error", mcpcall.ExitToolError, "MCP error -32602: Input validation error", tg.ReasonJobFailed},
	} {
		h.ToolCall(c.name, "everything__echo", `{"message":"x"}`, 2*time.Minute, nil)
		h.Approve(h.PendingRequest(c.name).ID, 5*time.Minute)
		running := h.WaitPhase(c.name, tg.PhaseRunning)
		finishMCPJob(h, running.Status.JobName, c.exit, c.msg)
		done := h.WaitPhase(c.name, tg.PhaseFailed)
		g.Expect(done.Status.Reason).To(Equal(c.reason), c.name)
		g.Expect(done.Status.Result).To(Equal(c.msg))
	}
}

// BenchmarkMCPServerDiscovery100Tools measures, for a server (the MCP Go SDK's, on loopback) with 100
// tools all exposed: the time from creating the MCPServer to it being Ready with its 100 Tools in the
// apiserver (envtest), and one listing of the 100 tools alone (connect, initialize, tools/list).
// go test ./controllers/mcpservers/ -run '^$' -bench BenchmarkMCPServerDiscovery100Tools -benchtime 3x
func BenchmarkMCPServerDiscovery100Tools(b *testing.B) {
	h := th.New(b, env)
	ctx := context.Background()
	server := mcp.NewServer(&mcp.Implementation{Name: "many", Version: "v1"}, nil)
	for i := range 100 {
		server.AddTool(&mcp.Tool{Name: fmt.Sprintf("tool_%03d", i), Description: "One of many.", InputSchema: map[string]any{
			"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}, "amount": map[string]any{"type": "integer"}},
			"required": []any{"id"}}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	hs := serveMCP(b, server)
	var toReady, listing time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("many-%d", i)
		start := time.Now()
		h.G.Expect(h.K8s.Create(ctx, &tg.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.NS},
			Spec:       tg.MCPServerSpec{URL: hs.URL, AllowInsecureHTTP: true, Tools: []string{"*"}, ExecutorImage: "mcp-call:bench"},
		})).To(Succeed())
		h.G.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, name); return []string{s, r} }).
			WithPolling(10 * time.Millisecond).Should(Equal([]string{"True", tg.ReasonToolsDiscovered}))
		toReady += time.Since(start)
		h.G.Expect(generatedTools(h.G, h, name)).To(HaveLen(100))

		start = time.Now()
		tools, err := mcpclient.Discover(ctx, mcpclient.Config{URL: hs.URL, AllowInsecureHTTP: true}, time.Minute)
		listing += time.Since(start)
		h.G.Expect(err).NotTo(HaveOccurred())
		h.G.Expect(tools).To(HaveLen(100))
	}
	b.ReportMetric(float64(toReady.Milliseconds())/float64(b.N), "ms-create-to-ready")
	b.ReportMetric(float64(listing.Microseconds())/1000/float64(b.N), "ms-list-100-tools")
}

// Between the periodic listings (here an hour apart), the manager hears the server's
// notifications/tools/list_changed on the session it keeps open, and lists the tools at once: a tool
// the server adds gets its Tool, and one it removes loses it, within seconds.
func TestMCPServerListsAgainWhenTheServerSaysItsToolsChanged(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	server := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	handler := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}}
	server.AddTool(&mcp.Tool{Name: "lookup", InputSchema: schema}, handler)
	hs := serveMCP(t, server)
	srv := &tg.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: h.NS},
		Spec: tg.MCPServerSpec{URL: hs.URL, AllowInsecureHTTP: true, Tools: []string{"*"}, ExecutorImage: "mcp-call:test",
			RefreshInterval: &metav1.Duration{Duration: time.Hour}},
	}
	g.Expect(h.K8s.Create(ctx, srv)).To(Succeed())
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).Should(Equal([]string{"ledger--lookup"}))

	server.AddTool(&mcp.Tool{Name: "archive", InputSchema: schema}, handler)
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).WithTimeout(15*time.Second).
		Should(Equal([]string{"ledger--archive", "ledger--lookup"}), "listed again on notifications/tools/list_changed, not an hour later")
	server.RemoveTools("lookup")
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).WithTimeout(15 * time.Second).
		Should(Equal([]string{"ledger--archive"}))
}

// serveMCP serves server over streamable HTTP on a loopback socket until the test ends. The manager
// keeps a session open with every server it lists (controllers/mcpservers/listen.go), so the end
// closes the connections rather than waiting for them.
func serveMCP(tb testing.TB, server *mcp.Server) *httptest.Server {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	tb.Cleanup(func() {
		_ = hs.Listener.Close()
		hs.CloseClientConnections()
	})
	return hs
}
