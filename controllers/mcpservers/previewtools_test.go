package mcpservers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpclient"
	th "toolgate.dev/toolgate/test/testharness"
)

// ledgerServer is the MCP Go SDK's server, on a loopback socket, with the tools named (each answers
// "ok"); the test adds and removes tools on it.
func ledgerServer(t *testing.T, tools ...string) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	for _, name := range tools {
		addLedgerTool(server, name)
	}
	return server
}

func addLedgerTool(server *mcp.Server, name string) {
	server.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "integer"}}}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
}

// ledgerMCPServer creates MCPServer "ledger" for the server at url, exposing transfer and lookup.
func ledgerMCPServer(h *th.Harness, url string, mutate func(*tg.MCPServer)) *tg.MCPServer {
	h.T.Helper()
	srv := &tg.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: h.NS},
		Spec: tg.MCPServerSpec{URL: url, AllowInsecureHTTP: true, Tools: []string{"transfer", "lookup"}, ExecutorImage: "mcp-call:test",
			RefreshInterval: &metav1.Duration{Duration: time.Second}},
	}
	mutate(srv)
	h.G.Expect(h.K8s.Create(context.Background(), srv)).To(Succeed())
	return srv
}

// envOf is the env of the first container of jt, by name.
func envOf(jt batchv1.JobTemplateSpec) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range jt.Spec.Template.Spec.Containers[0].Env {
		out[e.Name] = e
	}
	return out
}

// A tool that spec.previews names gets a Tool whose spec.preview runs the Job that calls its preview
// tool (the tool's own Job but for the tool's name: the executor, the URL and the header from its
// Secret), with the entry's timeout and onFailure and the Secrets kept; another tool gets none. The
// Tool is not written again while nothing changes; a change of the entry, or its removal, changes
// the Tool (a new generation, which withdraws the calls waiting on it).
func TestMCPServerToolsCarryTheirPreview(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	hs := serveMCP(t, ledgerServer(t, "transfer", "transfer_preview", "lookup"))
	g.Expect(h.K8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ledger-token", Namespace: h.NS, Labels: map[string]string{tg.LabelMCPServer: "ledger"}},
		StringData: map[string]string{"token": "Bearer s3cret"},
	})).To(Succeed())
	srv := ledgerMCPServer(h, hs.URL, func(s *tg.MCPServer) {
		s.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "ledger-token", Key: "token"}}}
		s.Spec.Previews = []tg.MCPToolPreview{{Tool: "transfer", PreviewTool: "transfer_preview",
			Timeout: &metav1.Duration{Duration: 30 * time.Second}, OnFailure: tg.PreviewFailureAsk}}
	})

	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).
		Should(Equal([]string{"ledger--lookup", "ledger--transfer"}), "the preview tool is not exposed: it has no Tool of its own")
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "ledger"); return []string{s, r} }).
		Should(Equal([]string{"True", tg.ReasonToolsDiscovered}))

	transfer := getTool(g, h, "ledger--transfer")
	p := transfer.Spec.Preview
	g.Expect(p).NotTo(BeNil())
	g.Expect(p.Timeout.Duration).To(Equal(30 * time.Second))
	g.Expect(p.OnFailure).To(Equal(tg.PreviewFailureAsk))
	g.Expect(p.MaxBytes).To(BeEquivalentTo(tg.MaxPreviewBytes))
	g.Expect(p.AllowSecrets).To(BeTrue(), "the header Secret is the credential to reach the server at all")
	var jt batchv1.JobTemplateSpec
	g.Expect(json.Unmarshal(p.JobTemplate.Raw, &jt)).To(Succeed())
	previewEnv, toolEnv := envOf(jt), envOf(transfer.Spec.JobTemplate)
	g.Expect(previewEnv[mcpclient.EnvTool].Value).To(Equal("transfer_preview"))
	g.Expect(toolEnv[mcpclient.EnvTool].Value).To(Equal("transfer"))
	g.Expect(previewEnv[mcpclient.EnvURL].Value).To(Equal(hs.URL))
	g.Expect(previewEnv[mcpclient.EnvHeaderName(0)].Value).To(Equal("Authorization"))
	g.Expect(previewEnv[mcpclient.EnvHeaderValue(0)].Value).To(BeEmpty(), "the header's value stays in its Secret")
	g.Expect(previewEnv[mcpclient.EnvHeaderValue(0)].ValueFrom.SecretKeyRef.Name).To(Equal("ledger-token"))
	delete(previewEnv, mcpclient.EnvTool)
	delete(toolEnv, mcpclient.EnvTool)
	g.Expect(previewEnv).To(Equal(toolEnv))
	jt.Spec.Template.Spec.Containers[0].Env = nil
	own := transfer.Spec.JobTemplate.DeepCopy()
	own.Spec.Template.Spec.Containers[0].Env = nil
	g.Expect(jt).To(Equal(*own), "the preview's Job is the tool's own but for the tool it calls")
	g.Expect(getTool(g, h, "ledger--lookup").Spec.Preview).To(BeNil())

	gen := transfer.Generation
	g.Consistently(func(g Gomega) int64 { return getTool(g, h, "ledger--transfer").Generation }).
		WithTimeout(3*time.Second).Should(Equal(gen), "listings that find nothing new do not write the Tool")

	editServer(h, srv, func(s *tg.MCPServer) { s.Spec.Previews[0].OnFailure = tg.PreviewFailureDeny })
	g.Eventually(func(g Gomega) tg.PreviewFailureAction {
		t := getTool(g, h, "ledger--transfer")
		g.Expect(t.Generation).To(BeNumerically(">", gen))
		return t.Spec.Preview.OnFailure
	}).Should(Equal(tg.PreviewFailureDeny))

	gen = getTool(g, h, "ledger--transfer").Generation
	editServer(h, srv, func(s *tg.MCPServer) { s.Spec.Previews = nil })
	g.Eventually(func(g Gomega) *tg.ToolPreview { return getTool(g, h, "ledger--transfer").Spec.Preview }).Should(BeNil())
	g.Expect(getTool(g, h, "ledger--transfer").Generation).To(BeNumerically(">", gen))
}

// Fail closed: a tool whose preview tool the server does not list gets no Tool, and the MCPServer is
// Stalled with PreviewToolNotListed, its status.tools entry naming the entry's field and the fix; the
// other tools keep theirs. The server listing the preview tool gives the tool its Tool; the server
// dropping (or renaming) it deletes that Tool. An entry for a tool the server does not list is named
// in Ready's message.
func TestMCPServerToolWithoutItsPreviewToolGetsNoTool(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	server := ledgerServer(t, "transfer", "lookup")
	hs := serveMCP(t, server)
	srv := ledgerMCPServer(h, hs.URL, func(s *tg.MCPServer) {
		s.Spec.Previews = []tg.MCPToolPreview{
			{Tool: "transfer", PreviewTool: "transfer_preview"},
			{Tool: "refund", PreviewTool: "lookup"},
		}
	})

	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "ledger"); return []string{s, r} }).
		Should(Equal([]string{"False", tg.ReasonPreviewToolNotListed}))
	g.Expect(generatedTools(g, h, "ledger")).To(Equal([]string{"ledger--lookup"}))
	got := &tg.MCPServer{}
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, tg.ConditionStalled)).To(BeTrue())
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, tg.ConditionReady).Message).To(ContainSubstring("preview tools of transfer (spec.previews)"))
	g.Expect(got.Status.Tools).To(HaveLen(2))
	g.Expect(got.Status.Tools[1]).To(And(HaveField("Name", "transfer"), HaveField("Tool", ""), HaveField("ToolName", ""),
		HaveField("Message", And(
			ContainSubstring(`spec.previews[0].previewTool is "transfer_preview", which the server does not list`),
			ContainSubstring("Name a tool the server lists in spec.previews[0].previewTool, or remove the entry")))))

	addLedgerTool(server, "transfer_preview")
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).
		Should(Equal([]string{"ledger--lookup", "ledger--transfer"}))
	g.Expect(getTool(g, h, "ledger--transfer").Spec.Preview).NotTo(BeNil())
	g.Eventually(func(g Gomega) string {
		g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, tg.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(tg.ReasonToolsDiscovered))
		return c.Message
	}).Should(ContainSubstring(`spec.previews[1].tool "refund" is not a tool the server lists: such an entry previews nothing`))

	server.RemoveTools("transfer_preview")
	g.Eventually(func(g Gomega) []string { return generatedTools(g, h, "ledger") }).
		Should(Equal([]string{"ledger--lookup"}), "a tool that lost its preview tool loses its Tool")
	g.Eventually(func(g Gomega) []string { s, r := mcpReady(g, h, "ledger"); return []string{s, r} }).
		Should(Equal([]string{"False", tg.ReasonPreviewToolNotListed}))
}
