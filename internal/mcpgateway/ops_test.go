package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// The command serves probes and metrics apart from the MCP endpoint: /readyz once it lists the
// namespace's Tools, and the calls it answered by outcome, the sessions it holds and the tools it
// lists, as a scraper reads them.
func TestCommandServesProbesAndMetrics(t *testing.T) {
	w, kubeconfig := commandWorld(t)
	h, g := w.Harness, w.G
	addrs := make([]string, 3)
	for i := range addrs {
		var err error
		addrs[i], err = th.FreeAddr()
		g.Expect(err).NotTo(HaveOccurred())
	}
	listen, metricsAddr, probeAddr := addrs[0], addrs[1], addrs[2]
	startCommand(t, g, "--listen", listen, "--namespace", h.NS, "--kubeconfig", kubeconfig, "--unauthenticated",
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", probeAddr)

	status := func(url string) func() (int, error) {
		return func() (int, error) {
			resp, err := http.Get(url)
			if err != nil {
				return 0, err
			}
			_ = resp.Body.Close()
			return resp.StatusCode, nil
		}
	}
	g.Eventually(status("http://" + probeAddr + "/readyz")).WithTimeout(30 * time.Second).Should(Equal(http.StatusOK))
	g.Expect(status("http://" + probeAddr + "/healthz")()).To(Equal(http.StatusOK))
	g.Expect(status("http://" + probeAddr + "/readyz/tools")()).To(Equal(http.StatusOK))
	g.Expect(status("http://"+listen+"/readyz")()).NotTo(Equal(http.StatusOK), "the MCP endpoint serves no probes")

	g.Eventually(func(g Gomega) {
		g.Expect(scrape(g, metricsAddr, "toolgate_mcp_tools", "")).To(Equal(1.0), "the refund Tool")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(scrape(g, metricsAddr, "toolgate_mcp_calls_total", OutcomeDenied)).To(BeZero())

	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + listen + "/mcp"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = cs.Close() }()
	w.url = "http://" + listen + "/mcp"
	done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name := w.toolCallName()
	g.Eventually(func(g Gomega) {
		g.Expect(scrape(g, metricsAddr, "toolgate_mcp_calls_in_progress", "")).To(Equal(1.0))
		g.Expect(scrape(g, metricsAddr, "toolgate_mcp_sessions", "")).To(Equal(1.0))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	_, err = h.Provider.Decide(h.PendingRequest(name).ID, provider.StatusDenied, "no", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.outcome(done).res.IsError).To(BeTrue())

	g.Eventually(func(g Gomega) {
		g.Expect(scrape(g, metricsAddr, "toolgate_mcp_calls_total", OutcomeDenied)).To(Equal(1.0))
		g.Expect(scrape(g, metricsAddr, "toolgate_mcp_calls_in_progress", "")).To(BeZero())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(scrape(g, metricsAddr, "toolgate_mcp_calls_total", OutcomeSucceeded)).To(BeZero())
}

// scrape reads the value of metric at addr's /metrics: the series with outcome label outcome, or the
// only series when outcome is "".
func scrape(g Gomega, addr, metric, outcome string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(families).To(HaveKey(metric))
	for _, m := range families[metric].GetMetric() {
		if outcome == "" || labelValue(m, "outcome") == outcome {
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	g.Expect(fmt.Errorf("%s has no series with outcome %q", metric, outcome)).NotTo(HaveOccurred())
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
