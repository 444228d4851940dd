package mcpservers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpclient"
	th "toolgate.dev/toolgate/test/testharness"
)

// mcpTestServer is the Go SDK's MCP server over a real socket, with the tools given, that counts the
// tools/list requests it serves, and lets the test answer some requests itself (hostile, which
// returns false to leave a request to the SDK's handler). It counts the bytes the test's own
// answers managed to write, and the standalone SSE streams open.
type mcpTestServer struct {
	*httptest.Server
	listings atomic.Int64
	answered atomic.Int64 // the test's own answers
	written  atomic.Int64
	streams  atomic.Int64
}

func startMCPTestServer(t *testing.T, tools []*mcp.Tool, hostile func(w io.Writer, r *http.Request, body []byte) bool) *mcpTestServer {
	s := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "v1"}, nil)
	for _, tool := range tools {
		s.AddTool(tool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	}
	ts := &mcpTestServer{}
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				ts.listings.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		if hostile != nil && hostile(&flushingWriter{w: w, n: &ts.written}, r, body) {
			ts.answered.Add(1)
			return
		}
		if r.Method == http.MethodGet {
			ts.streams.Add(1)
			defer ts.streams.Add(-1)
		}
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close() })
	return ts
}

type flushingWriter struct {
	w http.ResponseWriter
	n *atomic.Int64
}

func (f *flushingWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.n.Add(int64(n))
	http.NewResponseController(f.w).Flush()
	return n, err
}

func (f *flushingWriter) header(contentType string) {
	f.w.Header().Set("Content-Type", contentType)
	f.w.WriteHeader(http.StatusOK)
}

// endlessAnswer writes prefix and then 256 MiB of filler (or until the reader hangs up).
func endlessAnswer(w io.Writer, contentType, prefix string) bool {
	fw := w.(*flushingWriter)
	fw.header(contentType)
	if _, err := io.WriteString(w, prefix); err != nil {
		return true
	}
	chunk := bytes.Repeat([]byte("a"), 256<<10)
	for range 1024 {
		if _, err := w.Write(chunk); err != nil {
			return true
		}
	}
	return true
}

var echoTool = &mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}}

func mcpCondition(g Gomega, h *th.Harness, ns, name string) *metav1.Condition {
	srv := &tg.MCPServer{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, srv)).To(Succeed())
	c := meta.FindStatusCondition(srv.Status.Conditions, tg.ConditionReady)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.ObservedGeneration).To(Equal(srv.Generation))
	return c
}

// Hostile MCP servers (an endless initialize answer, an endless SSE event, an endless tools/list
// answer, a tool whose schema is over the limit) are each reported on their MCPServer with the limit
// named, the manager's heap stays bounded (each server offers 256 MiB), and meanwhile a ToolCall in
// another namespace is approved and its Job created.
func TestHostileMCPServersLeaveTheManagerUnharmed(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	ctx := context.Background()
	hostileNS := h.NS + "-mcp"
	g.Expect(h.K8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostileNS}})).To(Succeed())
	h.Opts.Namespaces = append(h.Opts.Namespaces, hostileNS)
	h.Start()

	isInitialize := func(body []byte) bool { return bytes.Contains(body, []byte(`"initialize"`)) }
	servers := map[string]*mcpTestServer{
		"big-initialize": startMCPTestServer(t, nil, func(w io.Writer, r *http.Request, body []byte) bool {
			return isInitialize(body) && endlessAnswer(w, "application/json", `{"jsonrpc":"2.0","id":1,"result":{"x":"`)
		}),
		// The event on the stream that follows the server's notifications.
		"endless-event": startMCPTestServer(t, []*mcp.Tool{echoTool}, func(w io.Writer, r *http.Request, body []byte) bool {
			return r.Method == http.MethodGet && endlessAnswer(w, "text/event-stream", "event: message\ndata: ")
		}),
		// An answer as an SSE event: the answers' limit holds it.
		"endless-answer-event": startMCPTestServer(t, nil, func(w io.Writer, r *http.Request, body []byte) bool {
			return isInitialize(body) && endlessAnswer(w, "text/event-stream", "event: message\ndata: ")
		}),
		"big-listing": startMCPTestServer(t, []*mcp.Tool{echoTool}, func(w io.Writer, r *http.Request, body []byte) bool {
			return bytes.Contains(body, []byte(`"tools/list"`)) && endlessAnswer(w, "application/json", `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"`)
		}),
		"big-schema": startMCPTestServer(t, []*mcp.Tool{echoTool, {Name: "huge", InputSchema: map[string]any{
			"type": "object", "description": strings.Repeat("s", 100<<10)}}}, nil),
	}
	want := map[string]string{
		"big-initialize":       tg.ReasonServerResponseTooLarge,
		"endless-event":        tg.ReasonServerEventTooLarge,
		"endless-answer-event": tg.ReasonServerResponseTooLarge,
		"big-listing":          tg.ReasonServerResponseTooLarge,
		"big-schema":           tg.ReasonToolSchemaTooLarge,
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	for name, s := range servers {
		g.Expect(h.K8s.Create(ctx, &tg.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hostileNS},
			Spec: tg.MCPServerSpec{URL: s.URL, AllowInsecureHTTP: true, Tools: []string{"*"}, ExecutorImage: "mcp-call:test",
				RefreshInterval: &metav1.Duration{Duration: time.Second}},
		})).To(Succeed())
	}

	// Meanwhile, a call in the other namespace is approved and runs.
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(h.Jobs()).To(ContainElement(HaveField("Name", running.Status.JobName)))

	for name, reason := range want {
		g.Eventually(func(g Gomega) string {
			c := mcpCondition(g, h, hostileNS, name)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			return c.Reason
		}).Should(Equal(reason), name)
	}
	c := mcpCondition(g, h, hostileNS, "big-initialize")
	g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("larger than %d bytes", mcpclient.DefaultLimits().MaxResponseBytes)))
	g.Expect(c.Message).To(ContainSubstring("--mcp-max-response-bytes"))
	g.Expect(mcpCondition(g, h, hostileNS, "endless-event").Message).To(ContainSubstring("--mcp-max-event-bytes"))
	schema := mcpCondition(g, h, hostileNS, "big-schema")
	g.Expect(schema.Message).To(ContainSubstring("--mcp-max-schema-bytes"))
	srv := &tg.MCPServer{}
	g.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: hostileNS, Name: "big-schema"}, srv)).To(Succeed())
	g.Expect(srv.Status.Tools).To(ConsistOf(
		And(HaveField("Name", "echo"), HaveField("Tool", "big-schema--echo")),
		And(HaveField("Name", "huge"), HaveField("Tool", ""), HaveField("Message", ContainSubstring("inputSchema is larger than")))))

	// Several listings of each have been refused by now (every second): the heap never held an
	// answer whole.
	g.Eventually(func() int64 {
		return servers["big-initialize"].answered.Load() + servers["big-listing"].answered.Load()
	}).Should(BeNumerically(">=", 4))
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("heap in use: %d MiB before, %d MiB at the peak", before.HeapInuse>>20, peak.Load()>>20)
	g.Expect(grew).To(BeNumerically("<", 160<<20), "the heap grew by %d MiB while hostile servers offered 256 MiB each", grew>>20)
	for name, s := range servers {
		// What a server could write is what the manager read, plus what the sockets buffered.
		g.Expect(s.written.Load()).To(BeNumerically("<", 64<<20), name)
	}
}

// However often a server sends notifications/tools/list_changed, it costs at most one listing per
// interval: a flood of 5,000 costs one listing.
func TestAFloodOfListChangedCostsOneListingPerInterval(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	h.Opts.MCP.ListingInterval = time.Hour
	h.Start()
	g := h.G
	const flood = 5000
	var sent atomic.Int64
	var streams atomic.Int64
	start := make(chan struct{})
	s := startMCPTestServer(t, []*mcp.Tool{echoTool}, func(w io.Writer, r *http.Request, _ []byte) bool {
		if r.Method != http.MethodGet {
			return false
		}
		streams.Add(1)
		w.(*flushingWriter).header("text/event-stream")
		select {
		case <-start:
		case <-r.Context().Done():
			return true
		}
		for range flood {
			if _, err := io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"); err != nil {
				return true
			}
			sent.Add(1)
		}
		<-r.Context().Done()
		return true
	})
	mcpServer(h, s.URL, []string{"echo"}, func(m *tg.MCPServer) { m.Spec.RefreshInterval = &metav1.Duration{Duration: time.Hour} })
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"True", tg.ReasonToolsDiscovered}))
	g.Eventually(streams.Load).Should(BeEquivalentTo(1), "the manager listens to the server")
	// The listings before the flood: the first ones, none since.
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "everything") }).Should(Equal([]string{"everything--echo"}))
	var before int64
	g.Eventually(func(g Gomega) {
		before = s.listings.Load()
		g.Consistently(s.listings.Load).WithTimeout(time.Second).Should(Equal(before))
	}).WithTimeout(15 * time.Second).Should(Succeed())

	close(start)
	g.Eventually(sent.Load).Should(BeEquivalentTo(flood))
	// The listing the first notification asked for at once; the others wait for the interval, as one.
	g.Eventually(s.listings.Load).Should(Equal(before + 1))
	g.Consistently(s.listings.Load).WithTimeout(3 * time.Second).Should(Equal(before + 1))
	g.Expect(streams.Load()).To(BeEquivalentTo(1), "one session heard the flood")
}

// The listening session closes when its header's Secret stops consenting (its label removed): it
// does not go on with the old header.
func TestTheListeningSessionClosesWhenConsentIsWithdrawn(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	s := startMCPTestServer(t, []*mcp.Tool{echoTool}, nil)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: h.NS, Labels: map[string]string{tg.LabelMCPServer: "everything"}},
		StringData: map[string]string{"token": "Bearer s3cret"},
	}
	g.Expect(h.K8s.Create(ctx, secret)).To(Succeed())
	mcpServer(h, s.URL, []string{"echo"}, func(m *tg.MCPServer) {
		m.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "token", Key: "token"}}}
	})
	g.Eventually(s.streams.Load).Should(BeEquivalentTo(1), "the manager listens to the server")

	g.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "token"}, secret)).To(Succeed())
	delete(secret.Labels, tg.LabelMCPServer)
	g.Expect(h.K8s.Update(ctx, secret)).To(Succeed())
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "everything"); return []string{s, r} }).
		Should(Equal([]string{"False", tg.ReasonHeaderSecretUnavailable}))
	g.Eventually(s.streams.Load).Should(BeZero(), "the session opened with the withdrawn header is closed")
}

// A listing failure says a stable class in the MCPServer's status, not what answered: no banner, no
// address of what the URL reached.
func TestAnUnreachableServerIsAClassWithoutTheNetworksWords(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	banner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "internal-admin 1.2 on db-7.internal:5432", http.StatusNotFound)
	}))
	t.Cleanup(banner.Close)
	mcpServer(h, banner.URL, []string{"echo"})
	g.Eventually(func(g Gomega) string {
		c := mcpCondition(g, h, h.NS, "everything")
		g.Expect(c.Reason).To(Equal(tg.ReasonServerUnreachable))
		return c.Message
	}).Should(And(ContainSubstring("failed: HTTP 404"), Not(ContainSubstring("internal-admin")), Not(ContainSubstring("db-7"))))
}

// An Approve rule of spec.toolTemplate reaches only the Tools of tools spec.tools names exactly: a
// tool a glob exposes (one the server adds later, say) keeps the Deny and Require rules, and its
// status entry says why the others are not there.
func TestTemplateApproveRulesReachOnlyToolsNamedExactly(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	s := startMCPTestServer(t, []*mcp.Tool{echoTool, {Name: "delete-all", InputSchema: map[string]any{"type": "object"}}}, nil)
	mcpServer(h, s.URL, []string{"echo", "*"}, func(m *tg.MCPServer) {
		m.Spec.ToolTemplate.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{
			{Name: "no-robots", Expression: `requester.username.startsWith("robot")`, Action: tg.ActionDeny},
			{Name: "auto", Expression: "true", Action: tg.ActionApprove},
		}}
	})
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "everything") }).
		Should(Equal([]string{"everything--delete-all", "everything--echo"}))
	g.Expect(getTool(g, h, "everything--echo").Spec.Approval.Rules).To(HaveLen(2))
	g.Expect(getTool(g, h, "everything--delete-all").Spec.Approval.Rules).To(ConsistOf(HaveField("Name", "no-robots")))
	srv := &tg.MCPServer{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "everything"}, srv)).To(Succeed())
	g.Expect(srv.Status.Tools).To(ContainElement(And(HaveField("Name", "delete-all"), HaveField("Tool", "everything--delete-all"),
		HaveField("Message", ContainSubstring("Approve rules of spec.toolTemplate.approval (auto) are not carried")))))
	g.Expect(srv.Status.Tools).To(ContainElement(And(HaveField("Name", "echo"), HaveField("Message", ""))))
}
