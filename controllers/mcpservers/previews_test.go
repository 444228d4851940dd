package mcpservers

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// previewServer is an MCPServer "ledger" exposing transfer and lookup, with previews.
func previewServer(previews ...tg.MCPToolPreview) *tg.MCPServer {
	srv := &tg.MCPServer{}
	srv.Name = "ledger"
	srv.Spec.URL, srv.Spec.Tools, srv.Spec.Previews = "https://mcp.example.com/mcp", []string{"transfer", "look*"}, previews
	return srv
}

func listedTools(names ...string) map[string]*mcp.Tool {
	out := map[string]*mcp.Tool{}
	for _, n := range names {
		out[n] = &mcp.Tool{Name: n}
	}
	return out
}

// The preview of a tool is the Job that calls its preview tool, as the tool's own Job calls the tool,
// with the entry's settings or the Tool CRD's defaults; it keeps the connection's Secrets only when
// the connection reads any.
func TestPreview(t *testing.T) {
	headers := connection{env: []corev1.EnvVar{
		{Name: mcpclient.EnvHeaderName(0), Value: "Authorization"},
		{Name: mcpclient.EnvHeaderValue(0), ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "ledger-token"}, Key: "token"}}},
	}}
	caFromConfigMap := connection{env: []corev1.EnvVar{{Name: mcpclient.EnvCABundle, ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}, Key: "ca.crt"}}}}}
	exec := executor{image: "mcp-call:v1"}
	for _, c := range []struct {
		name         string
		entry        tg.MCPToolPreview
		conn         connection
		timeout      time.Duration
		onFailure    tg.PreviewFailureAction
		allowSecrets bool
	}{
		{"defaults, no Secret", tg.MCPToolPreview{Tool: "transfer", PreviewTool: "transfer_preview"}, connection{}, time.Minute, tg.PreviewFailureDeny, false},
		{"a CA bundle from a ConfigMap reads no Secret", tg.MCPToolPreview{Tool: "transfer", PreviewTool: "transfer_preview"}, caFromConfigMap, time.Minute, tg.PreviewFailureDeny, false},
		{"the entry's settings, header Secrets", tg.MCPToolPreview{Tool: "transfer", PreviewTool: "transfer_preview",
			Timeout: &metav1.Duration{Duration: 30 * time.Second}, OnFailure: tg.PreviewFailureAsk}, headers, 30 * time.Second, tg.PreviewFailureAsk, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := previewServer(tg.MCPToolPreview{Tool: "lookup", PreviewTool: "other"}, c.entry)
			p, err := preview(srv, "transfer", c.conn, exec)
			if err != nil {
				t.Fatal(err)
			}
			if p == nil {
				t.Fatal("no preview for a tool spec.previews names")
			}
			if p.Timeout.Duration != c.timeout || p.OnFailure != c.onFailure || p.AllowSecrets != c.allowSecrets || p.MaxBytes != tg.MaxPreviewBytes {
				t.Errorf("preview timeout %s, onFailure %s, allowSecrets %v, maxBytes %d; want %s, %s, %v, %d",
					p.Timeout.Duration, p.OnFailure, p.AllowSecrets, p.MaxBytes, c.timeout, c.onFailure, c.allowSecrets, tg.MaxPreviewBytes)
			}
			var got batchv1.JobTemplateSpec
			if err := json.Unmarshal(p.JobTemplate.Raw, &got); err != nil {
				t.Fatal(err)
			}
			want := jobTemplate(srv, "transfer_preview", c.conn, exec)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the preview's Job is not the one that calls transfer_preview:\n got %+v\nwant %+v", got, want)
			}
			if got.Spec.Template.Spec.Containers[0].Env[1] != (corev1.EnvVar{Name: mcpclient.EnvTool, Value: "transfer_preview"}) {
				t.Errorf("the preview's Job calls %+v", got.Spec.Template.Spec.Containers[0].Env[1])
			}
		})
	}
	if p, err := preview(previewServer(tg.MCPToolPreview{Tool: "transfer", PreviewTool: "transfer_preview"}), "lookup", connection{}, exec); p != nil || err != nil {
		t.Errorf("a tool spec.previews does not name has a preview: %+v, %v", p, err)
	}
}

// A tool whose preview tool is not listed is refused, naming the entry's field and the fix; entries
// that preview nothing are named.
func TestPreviewToolsNotListed(t *testing.T) {
	srv := previewServer(
		tg.MCPToolPreview{Tool: "refund", PreviewTool: "transfer"},
		tg.MCPToolPreview{Tool: "transfer", PreviewTool: "transfer_preview"},
		tg.MCPToolPreview{Tool: "delete", PreviewTool: "lookup"},
	)
	for _, c := range []struct {
		name   string
		listed map[string]*mcp.Tool
		tool   string
		want   string
	}{
		{"listed", listedTools("transfer", "transfer_preview"), "transfer", ""},
		{"no entry", listedTools("lookup"), "lookup", ""},
		{"not listed", listedTools("transfer", "transfer_previews"), "transfer",
			`spec.previews[1].previewTool is "transfer_preview", which the server does not list: the tool gets no Tool, since its calls must not run without the preview asked for. Name a tool the server lists in spec.previews[1].previewTool, or remove the entry to call transfer without a preview`},
	} {
		if got := previewNotListed(srv, c.tool, c.listed); got != c.want {
			t.Errorf("%s: previewNotListed = %q, want %q", c.name, got, c.want)
		}
	}
	idle := idlePreviews(srv, listedTools("transfer", "transfer_preview", "delete", "lookup"))
	want := []string{`spec.previews[0].tool "refund" is not a tool the server lists`, `spec.previews[2].tool "delete" is not exposed by spec.tools`}
	if strings.Join(idle, "|") != strings.Join(want, "|") {
		t.Errorf("idlePreviews = %q, want %q", idle, want)
	}
	if idle := idlePreviews(previewServer(tg.MCPToolPreview{Tool: "lookup", PreviewTool: "x"}), listedTools("lookup")); len(idle) != 0 {
		t.Errorf("an entry for an exposed, listed tool is idle: %q", idle)
	}
}
