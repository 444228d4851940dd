package mcpservers

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The previews of spec.previews: the Tool of a tool that has one carries, as its spec.preview, the
// Job that calls the preview tool with the same arguments. A tool whose preview tool the server does
// not list gets no Tool at all (fail closed).

// previewEntry is the index and the entry of spec.previews for the server's tool named tool, -1 and
// nil when it has none.
func previewEntry(srv *tg.MCPServer, tool string) (int, *tg.MCPToolPreview) {
	i := slices.IndexFunc(srv.Spec.Previews, func(p tg.MCPToolPreview) bool { return p.Tool == tool })
	if i < 0 {
		return -1, nil
	}
	return i, &srv.Spec.Previews[i]
}

// previewNotListed says why the server's tool named tool gets no Tool: its spec.previews entry names
// a preview tool the server does not list (listed). "" when it has no entry, or its preview tool is
// listed.
func previewNotListed(srv *tg.MCPServer, tool string, listed map[string]*mcp.Tool) string {
	i, p := previewEntry(srv, tool)
	if p == nil || listed[p.PreviewTool] != nil {
		return ""
	}
	return fmt.Sprintf("spec.previews[%d].previewTool is %q, which the server does not list: the tool gets no Tool, since its calls must not run without the preview asked for. Name a tool the server lists in spec.previews[%d].previewTool, or remove the entry to call %s without a preview",
		i, p.PreviewTool, i, tool)
}

// preview is the spec.preview of the Tool generated for the server's tool named tool: nil when
// spec.previews has no entry for it. Its Job is the one that calls the preview tool, with the same
// connection as the tool's own; allowSecrets keeps the Secrets that connection reads (the header
// values, a CA bundle from a Secret), the credentials to reach the server at all. The defaults are
// written out, as the Tool CRD would, so that the Tool read back is the one wanted.
func preview(srv *tg.MCPServer, tool string, conn connection, exec executor) (*tg.ToolPreview, error) {
	_, p := previewEntry(srv, tool)
	if p == nil {
		return nil, nil
	}
	jt, err := json.Marshal(jobTemplate(srv, p.PreviewTool, conn, exec))
	if err != nil {
		return nil, fmt.Errorf("writing the preview Job of tool %s: %w", tool, err)
	}
	timeout := p.Timeout.DeepCopy()
	if timeout == nil {
		timeout = &metav1.Duration{}
		if err := timeout.UnmarshalJSON([]byte(`"` + tg.DefaultPreviewTimeout + `"`)); err != nil {
			return nil, err
		}
	}
	onFailure := p.OnFailure
	if onFailure == "" {
		onFailure = tg.PreviewFailureDeny
	}
	return &tg.ToolPreview{
		JobTemplate:  &apiextensionsv1.JSON{Raw: jt},
		Timeout:      timeout,
		MaxBytes:     tg.MaxPreviewBytes,
		OnFailure:    onFailure,
		AllowSecrets: conn.readsSecrets(),
	}, nil
}

// readsSecrets reports whether the connection's env reads a Secret.
func (c connection) readsSecrets() bool {
	return slices.ContainsFunc(c.env, func(e corev1.EnvVar) bool { return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil })
}

// idlePreviews says, for each entry of spec.previews whose tool the server does not list (listed)
// or spec.tools does not expose, that it previews nothing.
func idlePreviews(srv *tg.MCPServer, listed map[string]*mcp.Tool) []string {
	var out []string
	for i, p := range srv.Spec.Previews {
		switch {
		case listed[p.Tool] == nil:
			out = append(out, fmt.Sprintf("spec.previews[%d].tool %q is not a tool the server lists", i, p.Tool))
		case !exposed(srv.Spec.Tools, p.Tool):
			out = append(out, fmt.Sprintf("spec.previews[%d].tool %q is not exposed by spec.tools", i, p.Tool))
		}
	}
	return out
}
