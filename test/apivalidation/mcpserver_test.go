package apivalidation_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// What MCPServer accepts and refuses, each refusal naming the field and the fix, and its defaults.
func TestMCPServerValidation(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*tg.MCPServer)
		field  string // "" when accepted
		text   string
	}{
		{name: "https with a path", mutate: func(*tg.MCPServer) {}},
		{name: "http for a development server", mutate: func(s *tg.MCPServer) {
			s.Spec.URL, s.Spec.AllowInsecureHTTP = "http://everything.mcp.svc:3001/mcp", true
		}},
		{name: "http without allowInsecureHTTP", mutate: func(s *tg.MCPServer) { s.Spec.URL = "http://mcp.example.com/mcp" },
			field: "spec", text: "spec.url must be an https:// URL; an http:// URL is accepted only with spec.allowInsecureHTTP: true"},
		{name: "not a URL", mutate: func(s *tg.MCPServer) { s.Spec.URL = "mcp.example.com/mcp" },
			field: "spec.url", text: "spec.url must be an absolute http(s) URL"},
		{name: "user information", mutate: func(s *tg.MCPServer) { s.Spec.URL = "https://user:pw@mcp.example.com/mcp" },
			field: "spec.url", text: "without user information or fragment"},
		{name: "both CA fields", mutate: func(s *tg.MCPServer) {
			s.Spec.CABundle = []byte("pem")
			s.Spec.CABundleRef = &tg.CABundleRef{Kind: "ConfigMap", Name: "ca"}
		}, field: "spec", text: "set at most one of spec.caBundle or spec.caBundleRef"},
		{name: "a header from a Secret", mutate: func(s *tg.MCPServer) {
			s.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "token"}}}
		}},
		{name: "a header the transport sets", mutate: func(s *tg.MCPServer) {
			s.Spec.Headers = []tg.MCPHeader{{Name: "Mcp-Session-Id", SecretKeyRef: tg.SecretKeyRef{Name: "token"}}}
		}, field: "spec.headers[0].name", text: "names a header the MCP transport sets itself"},
		{name: "a header name with a space", mutate: func(s *tg.MCPServer) {
			s.Spec.Headers = []tg.MCPHeader{{Name: "X Team", SecretKeyRef: tg.SecretKeyRef{Name: "token"}}}
		}, field: "spec.headers[0].name", text: "spec.headers[].name must be an HTTP header name"},
		{name: "no executor image: the manager's default", mutate: func(s *tg.MCPServer) { s.Spec.ExecutorImage = "" }},
		{name: "the executor's image, resources and scheduling", mutate: func(s *tg.MCPServer) {
			s.Spec.ExecutorImage = ""
			s.Spec.Executor = tg.MCPExecutor{
				Image: "registry.example.com/toolgate/mcp-call:v0.1.0",
				Resources: &tg.MCPExecutorResources{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
				},
				ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "regcred"}},
				NodeSelector:      map[string]string{"pool": "egress"},
				Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
				PriorityClassName: "agents",
			}
		}},
		{name: "both executor image fields", mutate: func(s *tg.MCPServer) { s.Spec.Executor.Image = "mcp-call:v0.2.0" },
			field: "spec", text: "set the image in spec.executor.image only: spec.executorImage is deprecated, remove it"},
		{name: "a request over its limit", mutate: func(s *tg.MCPServer) {
			s.Spec.Executor.Resources = &tg.MCPExecutorResources{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			}
		}, field: "spec.executor.resources", text: "spec.executor.resources: each request must be at most its limit"},
		{name: "a resource other than cpu, memory and ephemeral-storage", mutate: func(s *tg.MCPServer) {
			s.Spec.Executor.Resources = &tg.MCPExecutorResources{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
		}, field: "spec.executor.resources.limits", text: "spec.executor.resources.limits names cpu, memory or ephemeral-storage only"},
		{name: "too many tolerations", mutate: func(s *tg.MCPServer) {
			s.Spec.Executor.Tolerations = make([]corev1.Toleration, 33)
			for i := range s.Spec.Executor.Tolerations {
				s.Spec.Executor.Tolerations[i] = corev1.Toleration{Key: fmt.Sprintf("t%d", i), Operator: corev1.TolerationOpExists}
			}
		}, field: "spec.executor.tolerations", text: "must have at most 32 items"},
		{name: "a refresh interval below 1s", mutate: func(s *tg.MCPServer) { s.Spec.RefreshInterval = &metav1.Duration{Duration: time.Millisecond} },
			field: "spec.refreshInterval", text: "spec.refreshInterval must be a duration of at least 1s"},
		{name: "a zero execution timeout", mutate: func(s *tg.MCPServer) {
			s.Spec.ToolTemplate.ExecutionTimeout = &metav1.Duration{}
		}, field: "spec.toolTemplate.executionTimeout", text: "spec.toolTemplate.executionTimeout must be a positive duration"},
		{name: "previews", mutate: func(s *tg.MCPServer) {
			s.Spec.Previews = []tg.MCPToolPreview{
				{Tool: "transfer", PreviewTool: "transfer_preview", Timeout: &metav1.Duration{Duration: 10 * time.Minute}, OnFailure: tg.PreviewFailureAsk},
				{Tool: "echo", PreviewTool: "echo_dry_run"},
			}
		}},
		{name: "a tool its own preview", mutate: func(s *tg.MCPServer) {
			s.Spec.Previews = []tg.MCPToolPreview{{Tool: "echo", PreviewTool: "echo"}}
		}, field: "spec.previews[0]", text: "spec.previews[]: previewTool must name another tool than tool"},
		{name: "two previews of one tool", mutate: func(s *tg.MCPServer) {
			s.Spec.Previews = []tg.MCPToolPreview{{Tool: "echo", PreviewTool: "a"}, {Tool: "echo", PreviewTool: "b"}}
		}, field: "spec.previews[1]", text: "Duplicate value"},
		{name: "a preview timeout over 10m", mutate: func(s *tg.MCPServer) {
			s.Spec.Previews = []tg.MCPToolPreview{{Tool: "echo", PreviewTool: "echo_dry_run", Timeout: &metav1.Duration{Duration: 11 * time.Minute}}}
		}, field: "spec.previews[0].timeout", text: "spec.previews[].timeout must be a duration from 1s to 10m"},
		{name: "a preview's onFailure that is no action", mutate: func(s *tg.MCPServer) {
			s.Spec.Previews = []tg.MCPToolPreview{{Tool: "echo", PreviewTool: "echo_dry_run", OnFailure: "Approve"}}
		}, field: "spec.previews[0].onFailure", text: "supported values: \"Deny\", \"Ask\""},
		{name: "a name too long for the toolNames", mutate: func(s *tg.MCPServer) { s.Name = strings.Repeat("m", 64) },
			field: "<nil>", text: "an MCPServer's name is at most 63 characters"},
	}
	ns := newNamespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &tg.MCPServer{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: ns}, Spec: tg.MCPServerSpec{
				URL: "https://mcp.example.com/mcp", ExecutorImage: "mcp-call:v0.1.0", Tools: []string{"echo", "get-*"},
			}}
			tc.mutate(s)
			err := k8s.Create(context.Background(), s)
			if tc.field == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(s.Spec.RefreshInterval.Duration).To(Equal(5*time.Minute), "refreshInterval defaults to 5m")
				g.Expect(s.Spec.ToolTemplate.ExecutionTimeout.Duration).To(Equal(5*time.Minute), "executionTimeout defaults to 5m")
				for _, h := range s.Spec.Headers {
					g.Expect(h.SecretKeyRef.Key).To(Equal("token"))
				}
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(tc.text))
			if tc.field != "<nil>" {
				expectRefused(g, err, tc.field, tc.text)
			}
		})
	}
}
