package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane every scenario of this package shares; each scenario has its own
// namespace, reference provider and Toolgate manager (test/testharness).
var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }

// world is one scenario: a harness, a gateway for its namespace served over streamable HTTP on a
// loopback socket, and the gateway's endpoint.
type world struct {
	*th.Harness
	gw  *Gateway
	url string
}

func newWorld(t *testing.T, o Options) *world {
	t.Helper()
	return newWorldAs(t, o, func(*th.Harness) *rest.Config { return env.Config })
}

// newWorldAs is newWorld with the gateway running as the identity identity returns for the
// scenario's harness.
func newWorldAs(t *testing.T, o Options, identity func(*th.Harness) *rest.Config) *world {
	t.Helper()
	h := th.New(t, env)
	cfg := identity(h)
	if o.Auth != nil {
		o.Auth.Config = cfg
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: controllers.Scheme()})
	h.G.Expect(err).NotTo(HaveOccurred())
	if o.Logger.GetSink() == nil && os.Getenv("TOOLGATE_TEST_VERBOSE") != "" {
		o.Logger = logf.Log.WithName("mcp-gateway") // the tests' logger (th.Main), debug when verbose
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	h.G.Expect(err).NotTo(HaveOccurred())
	url := "http://" + ln.Addr().String() + "/mcp"
	if o.Auth != nil && o.Auth.ResourceURL == "" {
		o.Auth.ResourceURL = url
	}
	gw, err := New(c, h.NS, o)
	h.G.Expect(err).NotTo(HaveOccurred())

	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- gw.Run(ctx) }()

	srv := &http.Server{Handler: gw.HTTPHandler(nil), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := gw.Close(closeCtx); err != nil {
			t.Errorf("closing the gateway: %v", err)
		}
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving HTTP: %v", err)
		}
	})
	return &world{Harness: h, gw: gw, url: url}
}

// connect opens an MCP session with the SDK's own client over the streamable HTTP transport.
func (w *world) connect(opts *mcp.ClientOptions) *mcp.ClientSession {
	w.T.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, opts)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: w.url}, nil)
	w.G.Expect(err).NotTo(HaveOccurred())
	w.T.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call runs tools/call in the background; the result arrives on the returned channel.
func (w *world) call(ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) <-chan callOutcome {
	out := make(chan callOutcome, 1)
	go func() {
		res, err := cs.CallTool(ctx, params)
		out <- callOutcome{res, err}
	}()
	return out
}

type callOutcome struct {
	res *mcp.CallToolResult
	err error
}

// toolCallName waits for the one ToolCall the gateway created and returns its name.
func (w *world) toolCallName() string {
	w.T.Helper()
	var name string
	w.G.Eventually(func(g Gomega) {
		list := &tg.ToolCallList{}
		g.Expect(w.K8s.List(context.Background(), list, client.InNamespace(w.NS), client.MatchingLabels{LabelVia: "mcp"})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		name = list.Items[0].Name
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return name
}

func (w *world) outcome(ch <-chan callOutcome) callOutcome {
	w.T.Helper()
	var o callOutcome
	w.G.Eventually(ch).WithTimeout(60 * time.Second).Should(Receive(&o))
	return o
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func schemaJSON(g *WithT, schema any) string {
	b, err := json.Marshal(schema)
	g.Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// tools/list shows every Tool of the namespace by its toolName, with its argumentsSchema as the
// inputSchema (made an object schema where it did not say so) and its description.
func TestListShowsTheNamespacesToolsWithTheirSchemas(t *testing.T) {
	w := newWorld(t, Options{})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema, func(tool *tg.Tool) {
		tool.Annotations = map[string]string{AnnotationDescription: "Refunds a card payment."}
	})
	w.Tool("restart-pod", "restart_pod", "")
	w.Tool("lookup", "lookup_order", `{"properties":{"order":{"type":"string"}},"required":["order"]}`)
	other := th.New(t, env) // a Tool in another namespace is not served
	other.Tool("elsewhere", "elsewhere", "")

	cs := w.connect(nil)
	g.Expect(cs.InitializeResult().Capabilities.Tools).NotTo(BeNil())
	g.Expect(cs.InitializeResult().Capabilities.Tools.ListChanged).To(BeTrue())
	res, err := cs.ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	byName := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
	}
	g.Expect(byName).To(HaveLen(3))
	g.Expect(byName).To(HaveKey("issue_refund"))
	g.Expect(byName).To(HaveKey("restart_pod"))
	g.Expect(byName).To(HaveKey("lookup_order"))

	g.Expect(byName["issue_refund"].Description).To(Equal("Refunds a card payment."))
	g.Expect(schemaJSON(g, byName["issue_refund"].InputSchema)).To(MatchJSON(th.RefundSchema))
	g.Expect(byName["restart_pod"].Description).To(ContainSubstring("A human must approve each call"))
	g.Expect(schemaJSON(g, byName["restart_pod"].InputSchema)).To(MatchJSON(`{"type":"object"}`))
	g.Expect(schemaJSON(g, byName["lookup_order"].InputSchema)).To(MatchJSON(
		`{"type":"object","properties":{"order":{"type":"string"}},"required":["order"]}`))

	list := &tg.ToolCallList{}
	g.Expect(w.K8s.List(context.Background(), list, client.InNamespace(w.NS))).To(Succeed())
	g.Expect(list.Items).To(BeEmpty(), "listing tools creates no ToolCall")
}

// The seed's flow through MCP: the call waits while a human decides, the approved tool runs, and
// the call answers with the tool's result. Progress notifications carry the phases meanwhile.
func TestApprovedCallAnswersWithTheToolsResult(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 2 * time.Minute, Progress: true, Labels: map[string]string{"team": "payments"}})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)

	var (
		mu       sync.Mutex
		progress []string
	)
	cs := w.connect(&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		if r.Params.ProgressToken == "refund-1" {
			progress = append(progress, r.Params.Message)
		}
	}})
	done := w.call(context.Background(), cs, &mcp.CallToolParams{
		Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs), Meta: mcp.Meta{"progressToken": "refund-1"},
	})

	name := w.toolCallName()
	tc := w.Get(name)
	g.Expect(tc.Spec.Tool).To(Equal("issue_refund"))
	g.Expect(string(tc.Spec.Arguments.Raw)).To(MatchJSON(th.RefundArgs))
	g.Expect(tc.Spec.WaitingLimit.Duration).To(Equal(2 * time.Minute))
	g.Expect(tc.Labels).To(HaveKeyWithValue(LabelVia, "mcp"))
	g.Expect(tc.Labels).To(HaveKeyWithValue("team", "payments"))

	req := w.PendingRequest(name)
	g.Expect(req.Tool).To(Equal("issue_refund"))
	g.Consistently(done).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "the call answers only once the tool ran")
	w.Approve(req.ID, 5*time.Minute)
	running := w.WaitPhase(name, tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	w.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)

	o := w.outcome(done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(o.res.IsError).To(BeFalse(), text(o.res))
	g.Expect(text(o.res)).To(Equal(`{"refund_id":"re_1"}`))
	g.Expect(o.res.Meta).To(HaveKeyWithValue(MetaToolCall, name))
	g.Expect(o.res.Meta).To(HaveKeyWithValue(MetaPhase, "Succeeded"))
	g.Eventually(func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), progress...)
	}).Should(ContainElements(
		ContainSubstring("AwaitingApproval: waiting for a human"),
		ContainSubstring("Running: approved"),
	))
	g.Expect(w.Jobs()).To(HaveLen(1))
}

// A call that did not run, or ran and failed, is a tool error (isError) the agent can read, not a
// protocol error: phase, reason, message, and the approver's note or the tool's output.
func TestOutcomesOtherThanSuccessAreToolErrors(t *testing.T) {
	cases := []struct {
		name   string
		settle func(w *world, tcName string)
		want   []string
	}{{
		name: "denied",
		settle: func(w *world, tcName string) {
			_, err := w.Provider.Decide(w.PendingRequest(tcName).ID, provider.StatusDenied, "Refunds over 40 GBP need a manager.", nil)
			w.G.Expect(err).NotTo(HaveOccurred())
		},
		want: []string{
			"The call to issue_refund did not run: a human denied it.",
			"Phase: Denied (reason: Denied)",
			"Approver's note: Refunds over 40 GBP need a manager.",
		},
	}, {
		name: "failed",
		settle: func(w *world, tcName string) {
			w.Approve(w.PendingRequest(tcName).ID, 5*time.Minute)
			running := w.WaitPhase(tcName, tg.PhaseRunning)
			w.G.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
			w.FinishJob(running.Status.JobName, false, "card network declined the refund")
		},
		want: []string{
			"The call to issue_refund ran and failed.",
			"Phase: Failed (reason: JobFailed)",
			"Output: card network declined the refund",
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, Options{WaitingLimit: 2 * time.Minute})
			g := w.G
			w.Tool("issue-refund", "issue_refund", th.RefundSchema)
			cs := w.connect(nil)
			done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
			name := w.toolCallName()
			c.settle(w, name)

			o := w.outcome(done)
			g.Expect(o.err).NotTo(HaveOccurred(), "an outcome is a tool result, not a protocol error")
			g.Expect(o.res.IsError).To(BeTrue())
			for _, want := range c.want {
				g.Expect(text(o.res)).To(ContainSubstring(want))
			}
			g.Expect(text(o.res)).To(ContainSubstring("ToolCall: " + w.NS + "/" + name))
			g.Expect(o.res.Meta).To(HaveKeyWithValue(MetaToolCall, name))
		})
	}
}

// Arguments that break the Tool's argumentsSchema (here an argument the schema does not know) are
// rejected by the controller before any human is asked, and the agent is told why. A waiting limit
// the gateway cannot read is refused before any ToolCall is created.
func TestBadInputIsRejectedBeforeAnyHumanIsAsked(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 2 * time.Minute})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	cs := w.connect(nil)

	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name:      "issue_refund",
		Arguments: map[string]any{"payment_id": "payment_123", "amount": 4900, "currency": "GBP", "reason": "duplicate"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(text(res)).To(ContainSubstring("did not run: it was rejected before any human was asked"))
	g.Expect(text(res)).To(ContainSubstring("Phase: Rejected (reason: InvalidArguments)"))
	g.Expect(text(res)).To(ContainSubstring("argumentsSchema"))
	g.Expect(text(res)).To(ContainSubstring("reason"), "the message names the unknown argument")
	g.Expect(res.Meta).To(HaveKeyWithValue(MetaPhase, "Rejected"))

	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs), Meta: mcp.Meta{MetaWaitingLimit: "soon"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(text(res)).To(ContainSubstring(`_meta "toolgate.dev/waitingLimit" is "soon", which is not a duration`))

	// A name that no Tool carries is a protocol error, as MCP has it for unknown tools.
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "issue_refunds", Arguments: json.RawMessage(th.RefundArgs)})
	g.Expect(err).To(MatchError(ContainSubstring(`unknown tool "issue_refunds"`)))

	list := &tg.ToolCallList{}
	g.Expect(w.K8s.List(context.Background(), list, client.InNamespace(w.NS))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1), "only the first call created a ToolCall")
	g.Expect(w.Provider.Stats().Creates).To(BeZero(), "no human was asked")
}

// A client that cancels its tools/call while the human has not decided abandons the call: the
// ToolCall is deleted, so Toolgate cancels the approval request and the tool never runs. The call's
// own waiting limit from _meta is honoured.
func TestClientCancellationAbandonsTheCall(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 2 * time.Minute})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	cs := w.connect(nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := w.call(ctx, cs, &mcp.CallToolParams{
		Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs), Meta: mcp.Meta{MetaWaitingLimit: "90s"},
	})
	name := w.toolCallName()
	g.Expect(w.Get(name).Spec.WaitingLimit.Duration).To(Equal(90 * time.Second))
	req := w.PendingRequest(name)

	cancel()
	o := w.outcome(done)
	g.Expect(o.err).To(MatchError(context.Canceled))
	w.WaitGone(name, 30*time.Second)
	g.Eventually(func() (string, error) {
		r, err := w.Provider.Get(req.ID)
		return r.Status, err
	}).Should(Equal(provider.StatusCancelled))
	g.Expect(w.Jobs()).To(BeEmpty())

	// The session is still usable.
	_, err := cs.ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
}

// A client that ends its session (HTTP DELETE with its Mcp-Session-Id) while a call waits abandons
// that call too. (The Go SDK's ClientSession.Close waits for the calls in progress first; other
// clients terminate the session at once.)
func TestEndingTheSessionAbandonsItsCalls(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 2 * time.Minute})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	cs := w.connect(nil)
	done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name := w.toolCallName()
	req := w.PendingRequest(name)

	del, err := http.NewRequest(http.MethodDelete, w.url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	del.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := http.DefaultClient.Do(del)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Body.Close()).To(Succeed())
	g.Expect(resp.StatusCode).To(Equal(http.StatusNoContent))

	w.WaitGone(name, 30*time.Second)
	g.Eventually(func() (string, error) {
		r, err := w.Provider.Get(req.ID)
		return r.Status, err
	}).Should(Equal(provider.StatusCancelled))
	// The session's streams are gone: the client is told its call ended without an answer.
	g.Expect(w.outcome(done).err).To(MatchError(`calling "tools/call": request terminated without response`))
}

// Tools created or deleted while a session is open are announced with notifications/tools/list_changed
// and listed by the next tools/list; a new tool can be called at once.
func TestToolChangesDuringASessionAreAnnouncedAndListed(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 2 * time.Minute})
	g := w.G
	changed := make(chan struct{}, 10)
	cs := w.connect(&mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	res, err := cs.ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Tools).To(BeEmpty())
	// Notifications travel on the session's standalone event stream, which the client opens in the
	// background: a server-to-client ping succeeds once it is there.
	g.Eventually(func() error {
		for ss := range w.gw.Server().Sessions() {
			return ss.Ping(context.Background(), nil)
		}
		return errors.New("no session yet")
	}).Should(Succeed())
	g.Expect(changed).NotTo(Receive(), "nothing changed yet")

	// Nothing but the gateway's watch can publish this Tool: no tools/list is sent before the
	// notification arrives.
	w.Tool("lookup", "lookup_order", `{"type":"object","properties":{"order":{"type":"string"}}}`)
	g.Eventually(changed).WithTimeout(30 * time.Second).Should(Receive())
	res, err = cs.ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Tools).To(HaveLen(1))
	g.Expect(res.Tools[0].Name).To(Equal("lookup_order"))
	g.Expect(schemaJSON(g, res.Tools[0].InputSchema)).To(MatchJSON(`{"type":"object","properties":{"order":{"type":"string"}}}`))

	// A Tool created just now can be called before any notification or tools/list: the call looks
	// the Tool up itself.
	w.Tool("restart-pod", "restart_pod", "")
	done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "restart_pod", Arguments: map[string]any{"pod": "web-0"}})
	name := w.toolCallName()
	g.Expect(w.Get(name).Spec.Tool).To(Equal("restart_pod"))
	_, err = w.Provider.Decide(w.PendingRequest(name).ID, provider.StatusDenied, "not now", nil)
	g.Expect(err).NotTo(HaveOccurred())
	denied := w.outcome(done)
	g.Expect(denied.err).NotTo(HaveOccurred(), "a denial is a tool result, not a protocol error")
	g.Expect(denied.res.IsError).To(BeTrue())
	g.Expect(text(denied.res)).To(And(
		ContainSubstring("The call to restart_pod did not run: a human denied it."),
		ContainSubstring("Phase: Denied (reason: Denied)"),
		ContainSubstring("Approver's note: not now")))

	for len(changed) > 0 {
		<-changed
	}
	g.Expect(w.K8s.Delete(context.Background(), &tg.Tool{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "lookup"}})).To(Succeed())
	g.Eventually(changed).WithTimeout(30 * time.Second).Should(Receive())
	res, err = cs.ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Tools).To(ConsistOf(HaveField("Name", "restart_pod")))
}

// Closing the gateway abandons the calls still waiting, so that none of them runs for a client
// that is gone, and refuses new ones.
func TestCloseAbandonsCallsInProgress(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 2 * time.Minute})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	cs := w.connect(nil)
	done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name := w.toolCallName()
	req := w.PendingRequest(name)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g.Expect(w.gw.Close(ctx)).To(Succeed())
	w.WaitGone(name, 30*time.Second)
	g.Eventually(func() (string, error) {
		r, err := w.Provider.Get(req.ID)
		return r.Status, err
	}).Should(Equal(provider.StatusCancelled))
	g.Expect(w.outcome(done).err).To(MatchError(`calling "tools/call": the MCP gateway is shutting down`))

	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(text(res)).To(ContainSubstring("the gateway is shutting down"))
}

// The command serves the gateway on stdio to the SDK's own client (as an MCP host launches it), and
// on SIGTERM abandons the calls still waiting before it exits.
func TestCommandServesStdioAndAbandonsCallsOnSIGTERM(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())

	var stderr bytes.Buffer
	cmd := exec.Command(th.Binary(t, "./cmd/toolgate-mcp"), "--stdio", "--namespace", h.NS, "--kubeconfig", kubeconfig, "--waiting-limit", "2m")
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "v1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("toolgate-mcp stderr:\n%s", stderr.String())
		}
	})

	res, err := cs.ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Tools).To(ConsistOf(HaveField("Name", "issue_refund")))
	g.Expect(schemaJSON(g, res.Tools[0].InputSchema)).To(MatchJSON(th.RefundSchema))

	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
		done <- err
	}()
	w := &world{Harness: h}
	name := w.toolCallName()
	g.Expect(w.Get(name).Spec.WaitingLimit.Duration).To(Equal(2 * time.Minute))
	req := h.PendingRequest(name)

	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	h.WaitGone(name, 30*time.Second)
	g.Eventually(func() (string, error) {
		r, err := h.Provider.Get(req.ID)
		return r.Status, err
	}).Should(Equal(provider.StatusCancelled))
	// The gateway answers the call that it is shutting down; the process may exit before that answer
	// is written, and then the client sees its connection closed, as the SDK's error for it or as the
	// end of the pipe (io.EOF), depending on which it noticed first. Nothing else ends the call.
	var callErr error
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&callErr))
	g.Expect(callErr).To(Or(MatchError(`calling "tools/call": the MCP gateway is shutting down`), MatchError(mcp.ErrConnectionClosed), MatchError(io.EOF)))
}

// An MCP host that closes the command's stdin while a call waits (as hosts do when they stop)
// abandons the call.
func TestCommandAbandonsTheCallWhenStdinCloses(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())

	var stderr bytes.Buffer
	cmd := exec.Command(th.Binary(t, "./cmd/toolgate-mcp"), "--stdio", "--namespace", h.NS, "--kubeconfig", kubeconfig)
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	g.Expect(err).NotTo(HaveOccurred())
	cmd.Stdout = io.Discard
	g.Expect(cmd.Start()).To(Succeed())
	var exitErr error
	exited := make(chan struct{})
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("toolgate-mcp stderr:\n%s", stderr.String())
		}
	})

	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"issue_refund","arguments":` + th.RefundArgs + `}}`,
	} {
		_, err := io.WriteString(stdin, line+"\n")
		g.Expect(err).NotTo(HaveOccurred())
	}
	w := &world{Harness: h}
	name := w.toolCallName()
	req := h.PendingRequest(name)

	g.Expect(stdin.Close()).To(Succeed())
	h.WaitGone(name, 30*time.Second)
	g.Eventually(func() (string, error) {
		r, err := h.Provider.Get(req.ID)
		return r.Status, err
	}).Should(Equal(provider.StatusCancelled))
	g.Eventually(exited).WithTimeout(30*time.Second).Should(BeClosed(), "the command exits once its client is gone")
	g.Expect(exitErr).NotTo(HaveOccurred(), "the command exits 0")
}

func TestWaitingLimitFromMeta(t *testing.T) {
	const def = 10 * time.Minute
	cases := []struct {
		name    string
		meta    mcp.Meta
		want    time.Duration
		wantErr string
	}{
		{"absent", nil, def, ""},
		{"null", mcp.Meta{MetaWaitingLimit: nil}, def, ""},
		{"duration string", mcp.Meta{MetaWaitingLimit: "90s"}, 90 * time.Second, ""},
		{"seconds as a JSON number", mcp.Meta{MetaWaitingLimit: float64(300)}, 5 * time.Minute, ""},
		{"json.Number", mcp.Meta{MetaWaitingLimit: json.Number("120")}, 2 * time.Minute, ""},
		{"not a duration", mcp.Meta{MetaWaitingLimit: "soon"}, 0, `is "soon", which is not a duration`},
		{"zero", mcp.Meta{MetaWaitingLimit: "0s"}, 0, "must be positive"},
		{"negative seconds", mcp.Meta{MetaWaitingLimit: float64(-5)}, 0, "must be positive"},
		{"wrong type", mcp.Meta{MetaWaitingLimit: true}, 0, "must be a duration string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := waitingLimit(c.meta, def)
			if c.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(c.wantErr)))
				g.Expect(err.Error()).To(ContainSubstring(MetaWaitingLimit))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(c.want))
		})
	}
}

func TestInputSchema(t *testing.T) {
	cases := []struct {
		name, schema, want string
	}{
		{"none", "", `{"type":"object"}`},
		{"object schema kept", th.RefundSchema, th.RefundSchema},
		{"type added", `{"properties":{"a":{"type":"integer"}}}`, `{"type":"object","properties":{"a":{"type":"integer"}}}`},
		{"$defs kept at the root", `{"$defs":{"id":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/id"}}}`,
			`{"type":"object","$defs":{"id":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/id"}}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			tool := &tg.Tool{}
			if c.schema != "" {
				tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(c.schema)}
			}
			g.Expect(schemaJSON(g, InputSchema(tool))).To(MatchJSON(c.want))
		})
	}
}
