package mcpgateway

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// tools/list carries the MCP annotation hints a Tool declares, and none for a Tool that declares none.
func TestListAdvertisesTheToolsAnnotationHints(t *testing.T) {
	w := newWorld(t, Options{})
	g := w.G
	w.Tool("lookup", "lookup_order", "", func(tool *tg.Tool) {
		tool.Spec.MCPAnnotations = &tg.MCPToolAnnotations{ReadOnlyHint: ptr.To(true), IdempotentHint: ptr.To(true)}
	})
	w.Tool("delete-db", "delete_database", "", func(tool *tg.Tool) {
		tool.Spec.MCPAnnotations = &tg.MCPToolAnnotations{ReadOnlyHint: ptr.To(false), DestructiveHint: ptr.To(true), IdempotentHint: ptr.To(false)}
	})
	w.Tool("refund", "issue_refund", "", func(tool *tg.Tool) {
		tool.Spec.MCPAnnotations = &tg.MCPToolAnnotations{DestructiveHint: ptr.To(false)}
	})
	w.Tool("restart-pod", "restart_pod", "")

	res, err := w.connect(nil).ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	annotations := map[string]string{}
	for _, tool := range res.Tools {
		b, err := json.Marshal(tool.Annotations)
		g.Expect(err).NotTo(HaveOccurred())
		annotations[tool.Name] = string(b)
	}
	g.Expect(annotations).To(HaveLen(4))
	g.Expect(annotations["lookup_order"]).To(MatchJSON(`{"readOnlyHint":true,"idempotentHint":true}`))
	g.Expect(annotations["delete_database"]).To(MatchJSON(`{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":false}`))
	g.Expect(annotations["issue_refund"]).To(MatchJSON(`{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false}`))
	g.Expect(annotations["restart_pod"]).To(Equal("null"), "a Tool that declares no hints gets none")
}

func TestToolAnnotations(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ToolAnnotations(&tg.Tool{})).To(BeNil())
	tool := &tg.Tool{Spec: tg.ToolSpec{MCPAnnotations: &tg.MCPToolAnnotations{ReadOnlyHint: ptr.To(true)}}}
	g.Expect(ToolAnnotations(tool)).To(Equal(&mcp.ToolAnnotations{ReadOnlyHint: true}))
}
