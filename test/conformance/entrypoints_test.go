package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/mcpgateway"
	"toolgate.dev/toolgate/pkg/toolcall"
	"toolgate.dev/toolgate/test/aapstrict"
	th "toolgate.dev/toolgate/test/testharness"
)

// The Go client's outcomes against a provider that implements only the AAP v1 contract, with and
// without spec.timeout (without it the manager chooses the largest timeout that fits, in one unit):
// an approval returns the tool's result, a denial the human's note, and the request at the provider
// is exactly what was asked.
func TestGoClientOutcomesAgainstAStrictProvider(t *testing.T) {
	for _, c := range []struct {
		name    string
		timeout time.Duration
		want    string
	}{
		{"with spec.timeout", 90 * time.Minute, "90m"},
		{"without spec.timeout", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, nil)
			g := w.G
			cl := toolcall.New(agent.Bind(w.Harness), w.NS)
			type outcome struct {
				res *toolcall.Result
				err error
			}
			approved := make(chan outcome, 1)
			go func() {
				res, err := cl.Call(context.Background(), "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Hour, toolcall.Options{
					Name: "approved", Timeout: c.timeout, Reason: "The customer was charged twice."})
				approved <- outcome{res, err}
			}()
			req := w.pending("approved")
			if c.want != "" {
				g.Expect(req.Timeout).To(Equal(c.want))
			} else {
				g.Expect(req.Timeout).To(MatchRegexp(`^[1-9][0-9]*m$`), "the default timeout is whole minutes")
			}
			g.Expect(req.AgentReasoning).To(HaveValue(Equal("The customer was charged twice.")))
			w.approve(req.ID, 5*time.Minute)
			running := w.WaitPhase("approved", tg.PhaseRunning)
			g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
			w.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)
			var o outcome
			g.Eventually(approved).WithTimeout(30 * time.Second).Should(Receive(&o))
			g.Expect(o.err).NotTo(HaveOccurred())
			g.Expect(o.res.Output).To(Equal(`{"refund_id":"re_1"}`))
			g.Expect(o.res.ToolCall.Status.Phase).To(Equal(tg.PhaseSucceeded))

			denied := make(chan outcome, 1)
			go func() {
				res, err := cl.Call(context.Background(), "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Hour, toolcall.Options{Name: "denied", Timeout: c.timeout})
				denied <- outcome{res, err}
			}()
			req = w.pending("denied")
			_, err := w.P.Deny(req.ID, "Not a duplicate.")
			g.Expect(err).NotTo(HaveOccurred())
			g.Eventually(denied).WithTimeout(30 * time.Second).Should(Receive(&o))
			g.Expect(o.err).To(MatchError(toolcall.ErrDenied))
			var denial *toolcall.Error
			g.Expect(errors.As(o.err, &denial)).To(BeTrue(), "%v", o.err)
			g.Expect(*denial).To(Equal(toolcall.Error{Phase: tg.PhaseDenied, Reason: tg.ReasonDenied, Name: "denied", Note: "Not a duplicate.",
				Message: `A human denied the call: "Not a duplicate.". The call did not run.`}))
			g.Expect(o.err).To(MatchError(`toolcall denied: Denied: A human denied the call: "Not a duplicate.". The call did not run.`))
			g.Expect(o.res.ToolCall.Status.Phase).To(Equal(tg.PhaseDenied))
			g.Expect(o.res.ToolCall.Status.Decision.Note).To(Equal("Not a duplicate."))
			got, _ := w.P.Get(req.ID)
			g.Expect(got.Status).To(Equal(aapstrict.StatusDenied))
		})
	}
}

// mcpGateway serves the MCP gateway for w's namespace on loopback, acting as the test's own (admin)
// identity, and returns its endpoint; it is closed when the test ends.
func mcpGateway(w *world) string {
	w.T.Helper()
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: controllers.Scheme()})
	w.G.Expect(err).NotTo(HaveOccurred())
	gw, err := mcpgateway.New(c, w.NS, mcpgateway.Options{})
	w.G.Expect(err).NotTo(HaveOccurred())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	w.G.Expect(err).NotTo(HaveOccurred())
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- gw.Run(ctx) }()
	srv := &http.Server{Handler: gw.HTTPHandler(nil), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	w.T.Cleanup(func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = gw.Close(closeCtx)
		stop()
		<-ran
		_ = srv.Close()
	})
	return "http://" + ln.Addr().String() + "/mcp"
}

// mcpToolCall waits for the one ToolCall the MCP gateway created in w's namespace.
func mcpToolCall(w *world) string {
	w.T.Helper()
	var name string
	w.G.Eventually(func(g Gomega) {
		list := &tg.ToolCallList{}
		g.Expect(w.K8s.List(context.Background(), list, client.InNamespace(w.NS), client.MatchingLabels{mcpgateway.LabelVia: "mcp"})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		name = list.Items[0].Name
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return name
}

// An MCP tools/call against a provider that implements only the AAP v1 contract. Every MCP call goes
// without spec.timeout, so the manager chooses the timeout: the strict provider accepts it, an
// approval returns the tool's result to the MCP client, and a client that disappears has its call
// withdrawn: the request ends cancelled through DELETE.
func TestMCPGatewayOutcomesAgainstAStrictProvider(t *testing.T) {
	t.Run("approved", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		endpoint := mcpGateway(w)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "conformance-agent", Version: "v1"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = cs.Close() }()
		type outcome struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
			done <- outcome{res, err}
		}()
		name := mcpToolCall(w)
		req := w.pending(name)
		g.Expect(req.Timeout).To(MatchRegexp(`^[1-9][0-9]*m$`), "the manager's own timeout, in one unit")
		w.approve(req.ID, 5*time.Minute)
		running := w.WaitPhase(name, tg.PhaseRunning)
		g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
		w.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)
		var o outcome
		g.Eventually(done).WithTimeout(60 * time.Second).Should(Receive(&o))
		g.Expect(o.err).NotTo(HaveOccurred())
		g.Expect(o.res.IsError).To(BeFalse())
		g.Expect(o.res.Content).To(ContainElement(HaveField("Text", ContainSubstring(`{"refund_id":"re_1"}`))))
	})

	t.Run("client-gone", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		endpoint := mcpGateway(w)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "conformance-agent", Version: "v1"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
		}()
		name := mcpToolCall(w)
		req := w.pending(name)
		cancel() // the agent abandons the call
		_ = cs.Close()
		w.WaitGone(name, 30*time.Second)
		g.Eventually(func() string { got, _ := w.P.Get(req.ID); return got.Status }).WithTimeout(30 * time.Second).Should(Equal(aapstrict.StatusCancelled))
		g.Expect(methods(w.exchanges("", req.ID), http.MethodDelete)).To(ContainElement(HaveField("Status", http.StatusOK)), "by DELETE /v1/requests/{id}")
		g.Expect(w.Jobs()).To(BeEmpty())
	})
}
