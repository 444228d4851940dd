//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/mcpeverything"
)

// An MCP server in front of which Toolgate puts an approval, on the real kubelet: the reference MCP
// server from npm (server-everything) runs on this machine, behind a proxy that records every
// tools/call it forwards, and an MCPServer exposes its echo tool. A denied and an expired call never
// reach the server; twenty approved calls each reach it exactly once, from the mcp-call container of
// their Job, and each ToolCall's result is the tool's own answer (the figures of decision -> result
// are logged for docs/performance.md); a call whose connection is cut after it was sent ends Failed
// with ToolMayHaveRun, and is never retried.
func TestMCPServerToolRunsOnceInARealPod(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	everything := mcpeverything.Start(t)
	host := nodeAddress(g)
	calls := startCallRecorder(t, g, everything.URL, host, false)
	cutting := startCallRecorder(t, g, everything.URL, host, true)

	toolName := exposeEcho(t, g, ns, "everything", calls.url)
	cutToolName := exposeEcho(t, g, ns, "cut", cutting.url)

	call := func(name, tool, message string) *tg.ToolCall {
		tc := &tg.ToolCall{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: tg.ToolCallSpec{
				Tool:         tool,
				Arguments:    mustRaw(g, map[string]string{"message": message}),
				WaitingLimit: metav1.Duration{Duration: 10 * time.Minute},
			},
		}
		g.Expect(k8s.Create(ctx, tc)).To(Succeed())
		waitPhase(g, tc, tg.PhaseAwaitingApproval, stepTimeout)
		return tc
	}

	denied := call("denied", toolName, "never sent")
	decide(g, denied, false, "")
	waitPhase(g, denied, tg.PhaseDenied, stepTimeout)
	expired := call("expired", toolName, "never sent either")
	decide(g, expired, true, "1s")
	waitPhase(g, expired, tg.PhaseExpired, stepTimeout)
	g.Consistently(calls.count).WithTimeout(5*time.Second).Should(BeZero(), "a denied or expired call never reaches the server")

	const n = 20
	var toResult []time.Duration
	for i := range n {
		message := fmt.Sprintf("approved call %02d: refund $(AMOUNT) to Zoë", i)
		tc := call(fmt.Sprintf("approved-%02d", i), toolName, message)
		decided := time.Now()
		decide(g, tc, true, "10m")
		waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
		toResult = append(toResult, time.Since(decided))
		g.Expect(tc.Status.Result).To(Equal("Echo: "+message), "the tool's own answer, to the approved arguments")
		g.Expect(calls.count()).To(Equal(i+1), "each approved call reaches the server once")
		_, pods := jobsAndPods(g, tc)
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].Spec.Containers[0].Name).To(Equal("mcp-call"))
		g.Expect(pods[0].Status.ContainerStatuses[0].State.Terminated).NotTo(BeNil())
		g.Expect(pods[0].Status.ContainerStatuses[0].State.Terminated.ContainerID).To(HavePrefix("containerd://"))
	}
	t.Logf("%d approved MCP calls, one after another: decision -> result (ToolCall seen Succeeded): %s", n, percentiles(toResult))

	cut := call("cut", cutToolName, "the answer is lost")
	decide(g, cut, true, "10m")
	waitPhase(g, cut, tg.PhaseFailed, stepTimeout)
	g.Expect(cut.Status.Reason).To(Equal(tg.ReasonToolMayHaveRun))
	g.Consistently(cutting.count).WithTimeout(5*time.Second).Should(Equal(1), "sent once, never retried")
	jobs, _ := jobsAndPods(g, cut)
	g.Expect(jobs).To(HaveLen(1))
}

// exposeEcho creates an MCPServer named name for the server at serverURL, exposing its echo tool with
// the mcp-call image of this checkout (unless mutate changes it), waits until its Tool is Ready and
// returns the toolName.
func exposeEcho(t *testing.T, g Gomega, ns, name, serverURL string, mutate ...func(*tg.MCPServer)) string {
	t.Helper()
	ctx := context.Background()
	srv := &tg.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tg.MCPServerSpec{
			URL: serverURL, AllowInsecureHTTP: true, Tools: []string{"echo"},
			Executor:     tg.MCPExecutor{Image: "localhost/toolgate/mcp-call:dev"},
			ToolTemplate: tg.MCPToolTemplate{ExecutionTimeout: &metav1.Duration{Duration: time.Minute}},
		},
	}
	for _, m := range mutate {
		m(srv)
	}
	g.Expect(k8s.Create(ctx, srv)).To(Succeed())
	var toolName string
	g.Eventually(func(g Gomega) {
		got := &tg.MCPServer{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, tg.ConditionReady)).To(BeTrue(), "%v", got.Status.Conditions)
		g.Expect(got.Status.Tools).To(HaveLen(1))
		toolName = got.Status.Tools[0].ToolName
		tool := &tg.Tool{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.Status.Tools[0].Tool}, tool)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(tool.Status.Conditions, tg.ConditionReady)).To(BeTrue())
	}).WithTimeout(stepTimeout).Should(Succeed())
	return toolName
}

// nodeAddress is the node's InternalIP: where its Pods reach this machine.
func nodeAddress(g Gomega) string {
	nodes := &corev1.NodeList{}
	g.Expect(k8s.List(context.Background(), nodes)).To(Succeed())
	g.Expect(nodes.Items).To(HaveLen(1))
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	g.Expect(nodes.Items[0].Status.Addresses).To(ContainElement(HaveField("Type", corev1.NodeInternalIP)))
	return ""
}

// callRecorder forwards MCP requests to the server and records the tools/call requests; with cut, it
// closes the client's connection once the server has answered a tools/call, so that the answer is
// lost after the call ran.
type callRecorder struct {
	url    string
	target string
	cut    bool
	mu     sync.Mutex
	calls  int
}

func startCallRecorder(t *testing.T, g Gomega, target, host string, cut bool) *callRecorder {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	g.Expect(err).NotTo(HaveOccurred())
	r := &callRecorder{target: target, cut: cut}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = (&url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/mcp"}).String()
	return r
}

func (r *callRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

func (r *callRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	isCall := bytes.Contains(body, []byte(`"method":"tools/call"`))
	if isCall {
		r.mu.Lock()
		r.calls++
		r.mu.Unlock()
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, r.target, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if isCall && r.cut {
		_, _ = io.ReadAll(resp.Body)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	// Streamed answers (text/event-stream) are passed on as they come.
	buf := make([]byte, 32*1024)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
