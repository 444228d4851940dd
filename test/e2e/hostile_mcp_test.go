//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// hostileBytes bounds what one answer of the hostile server writes: far beyond the manager's memory
// limit (the chart's 256Mi), yet the loop ends by itself.
const hostileBytes = 1 << 30

// hostileServer answers every MCP request without end: "answer" sends one JSON answer that never
// closes, "event" one server-sent event that never ends. It writes until the client goes away or
// hostileBytes are written.
func hostileServer(t *testing.T, g Gomega, host, kind string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	g.Expect(err).NotTo(HaveOccurred())
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			http.Error(w, "no stream here", http.StatusMethodNotAllowed)
			return
		}
		head := `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"hostile","version":"1"},"instructions":"`
		if kind == "event" {
			w.Header().Set("Content-Type", "text/event-stream")
			head = "event: message\ndata: " + head
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write([]byte(head)); err != nil {
			return
		}
		for written := 0; written < hostileBytes; written += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return (&url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/mcp"}).String()
}

// managerRestarts is the sum of the restart counts of the manager's containers, and whether any was
// last killed for memory.
func managerRestarts(g Gomega) (restarts int32, oomKilled bool) {
	for _, p := range managerPods(g) {
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
			if t := cs.LastTerminationState.Terminated; t != nil && t.Reason == "OOMKilled" {
				oomKilled = true
			}
		}
	}
	return restarts, oomKilled
}

// Hostile MCP servers, each offering a gigabyte (an endless answer, an endless event), leave the
// manager within the chart's memory limit: each MCPServer is reported with the limit it crossed, the
// manager is never restarted or killed for memory, and meanwhile a call in another namespace is
// approved and runs in a real Pod.
func TestHostileMCPServersLeaveTheManagerWithinItsLimits(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	restarted, _ := managerRestarts(g)
	hostileNS := newNamespace(t)
	host := nodeAddress(g)
	// An event that never ends, as the answer to a request, crosses whichever limit it reaches first: the
	// event's or the answer's (both 4 MiB by default).
	want := map[string][]string{
		"endless-answer": {tg.ReasonServerResponseTooLarge},
		"endless-event":  {tg.ReasonServerEventTooLarge, tg.ReasonServerResponseTooLarge},
	}
	for name, kind := range map[string]string{"endless-answer": "answer", "endless-event": "event"} {
		srv := &tg.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostileNS, Name: name},
			Spec: tg.MCPServerSpec{URL: hostileServer(t, g, host, kind), AllowInsecureHTTP: true, Tools: []string{"*"},
				ExecutorImage: "localhost/toolgate/mcp-call:dev"},
		}
		g.Expect(k8s.Create(ctx, srv)).To(Succeed())
	}

	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)
	decide(g, tc, true, "5m")
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	expectReceipt(g, tc)

	for name, reasons := range want {
		g.Eventually(func(g Gomega) {
			got := &tg.MCPServer{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: hostileNS, Name: name}, got)).To(Succeed())
			ready := meta.FindStatusCondition(got.Status.Conditions, tg.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(reasons).To(ContainElement(ready.Reason), ready.Message)
			g.Expect(strings.Contains(ready.Message, "--mcp-max-")).To(BeTrue(), "the message names the setting: %s", ready.Message)
		}).WithTimeout(stepTimeout).Should(Succeed(), name)
	}
	restarts, oom := managerRestarts(g)
	g.Expect(oom).To(BeFalse(), "the manager was never killed for memory")
	g.Expect(restarts).To(Equal(restarted), "the manager was never restarted")
}
