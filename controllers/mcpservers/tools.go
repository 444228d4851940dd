package mcpservers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// What a generated Tool is made of: its names, its spec and the Job that calls the tool.

// toolNamePattern is the Tool CRD's pattern for spec.toolName.
var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// maxToolNameLen is the Tool CRD's limit on spec.toolName.
const maxToolNameLen = 128

// maxDescription bounds the description a generated Tool carries in its annotation.
const maxDescription = 4096

// exposed reports whether the server's tool name is one spec.tools names or matches.
func exposed(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
}

// badPattern is the first entry of spec.tools that is not a valid glob, "" when all are.
func badPattern(patterns []string) string {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return p
		}
	}
	return ""
}

// ToolName is the spec.toolName of the Tool generated for the server's tool: the MCPServer's name and
// the tool's, joined by "__". It says why there is none when the result is not a valid toolName.
func ToolName(server, tool string) (string, error) {
	name := server + "__" + tool
	switch {
	case len(name) > maxToolNameLen:
		return "", fmt.Errorf("%s is longer than a toolName may be (%d characters); give the MCPServer a shorter name", name, maxToolNameLen)
	case !toolNamePattern.MatchString(name):
		return "", fmt.Errorf("%q is not a valid toolName (letters, digits, \"_\", \".\" and \"-\"): the tool's name has other characters", name)
	}
	return name, nil
}

// ObjectNames gives each toolName its Tool's metadata.name: by the convention that RBAC grants and
// config/admission/tool_name_convention.yaml follow (lower case, "_" written "-"), unless that is not
// a valid object name or two toolNames would share it; then the convention's name made DNS-safe,
// with a hash of the exact toolName so that no two collide.
func ObjectNames(toolNames []string) map[string]string {
	conventional := func(n string) string { return strings.ReplaceAll(strings.ToLower(n), "_", "-") }
	count := map[string]int{}
	for _, n := range toolNames {
		count[conventional(n)]++
	}
	out := make(map[string]string, len(toolNames))
	for _, n := range toolNames {
		c := conventional(n)
		if count[c] == 1 && len(c) <= 63 && len(validation.IsDNS1123Subdomain(c)) == 0 {
			out[n] = c
			continue
		}
		sum := sha256.Sum256([]byte(n))
		safe := strings.Trim(regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(c, "-"), "-")
		if len(safe) > 50 {
			safe = strings.TrimRight(safe[:50], "-")
		}
		out[n] = strings.TrimLeft(safe+"-"+hex.EncodeToString(sum[:])[:8], "-")
	}
	return out
}

// SchemaHash is the first 16 hex digits of the SHA-256 of schema as canonical JSON (keys sorted).
func SchemaHash(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])[:16]
}

// canonicalSchema is the tool's inputSchema as JSON with its keys sorted.
func canonicalSchema(t *mcp.Tool) ([]byte, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("its inputSchema is not a JSON object")
	}
	return json.Marshal(v)
}

// connection is what a call's Job needs to reach the server, besides its URL: the env that carries
// the CA bundle and the request headers (values read from their Secrets by the kubelet).
type connection struct {
	env []corev1.EnvVar
}

// carriedApproval is spec.toolTemplate.approval as the Tool of the server's tool named tool carries
// it: whole when spec.tools names the tool exactly; without its Approve rules when only a glob
// exposes it, so that a tool the server adds later (a destructive one, say) is not approved without a
// human by a rule written before it existed. It returns the names of the rules left out.
func carriedApproval(srv *tg.MCPServer, tool string) (*tg.ApprovalPolicy, []string) {
	a := srv.Spec.ToolTemplate.Approval
	if a == nil || slices.Contains(srv.Spec.Tools, tool) {
		return a.DeepCopy(), nil
	}
	var kept []tg.ApprovalRule
	var dropped []string
	for _, rule := range a.Rules {
		if rule.Action == tg.ActionApprove {
			dropped = append(dropped, rule.Name)
			continue
		}
		kept = append(kept, rule)
	}
	if len(kept) == 0 {
		return nil, dropped
	}
	return &tg.ApprovalPolicy{Rules: kept}, dropped
}

// desiredSpec is the spec of the Tool generated for the server's tool t, with its preview when
// spec.previews has one for it (previews.go).
func desiredSpec(srv *tg.MCPServer, toolName string, t *mcp.Tool, schema []byte, conn connection, exec executor) (tg.ToolSpec, error) {
	pv, err := preview(srv, t.Name, conn, exec)
	if err != nil {
		return tg.ToolSpec{}, err
	}
	tt := srv.Spec.ToolTemplate.DeepCopy()
	approval, _ := carriedApproval(srv, t.Name)
	timeout := tt.ExecutionTimeout
	if timeout == nil {
		timeout = &metav1.Duration{}
		_ = timeout.UnmarshalJSON([]byte(`"` + tg.DefaultExecutionTimeout + `"`))
	}
	return tg.ToolSpec{
		ToolName:         toolName,
		JobTemplate:      jobTemplate(srv, t.Name, conn, exec),
		ExecutionTimeout: timeout,
		ArgumentsSchema:  &apiextensionsv1.JSON{Raw: schema},
		Approval:         approval,
		ProviderRef:      tt.ProviderRef,
		FinishedCallTTL:  tt.FinishedCallTTL,
		Preview:          pv,
		MCPAnnotations:   annotations(t.Annotations),
	}, nil
}

// annotations maps the tool's MCP annotations to the Tool's hints.
func annotations(a *mcp.ToolAnnotations) *tg.MCPToolAnnotations {
	if a == nil {
		return nil
	}
	return &tg.MCPToolAnnotations{
		ReadOnlyHint:    ptr.To(a.ReadOnlyHint),
		DestructiveHint: a.DestructiveHint,
		IdempotentHint:  ptr.To(a.IdempotentHint),
	}
}

// description is the generated Tool's toolgate.dev/description: the tool's own, with the approval it
// now needs, bounded.
func description(srv *tg.MCPServer, t *mcp.Tool) string {
	d := strings.TrimSpace(t.Description)
	if d == "" {
		d = strings.TrimSpace(t.Title)
	}
	d += fmt.Sprintf(" (Tool %s of MCP server %s, through Toolgate: a human must approve each call before it runs.)", t.Name, srv.Name)
	d = strings.TrimSpace(d)
	if len(d) > maxDescription {
		d = strings.ToValidUTF8(d[:maxDescription-3], "") + "..."
	}
	return d
}

// jobTemplate is the Job that calls the server's tool once: Toolgate's executor image, with the
// server's URL, the tool's name, the CA bundle and the headers in its env, its resources and
// scheduling from spec.executor (executor.go). The ToolCall controller adds TOOL_ARGUMENTS (and the
// other call env) and backoffLimit 0 keeps it from being run twice.
func jobTemplate(srv *tg.MCPServer, tool string, conn connection, exec executor) batchv1.JobTemplateSpec {
	env := []corev1.EnvVar{
		{Name: mcpclient.EnvURL, Value: literalEnv(srv.Spec.URL)},
		{Name: mcpclient.EnvTool, Value: literalEnv(tool)},
	}
	if srv.Spec.AllowInsecureHTTP {
		env = append(env, corev1.EnvVar{Name: mcpclient.EnvAllowInsecureHTTP, Value: "true"})
	}
	env = append(env, conn.env...)
	// No labels: the Tool CRD keeps no metadata of the templates (the Job's Pods carry Toolgate's
	// own labels, toolgate.dev/tool naming the toolName).
	jt := batchv1.JobTemplateSpec{
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:                     mcpcall.Container,
						Image:                    exec.image,
						Env:                      env,
						Resources:                exec.resources(),
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	exec.schedule(&jt.Spec.Template.Spec)
	return jt
}

// literalEnv writes v as an env value the container receives unchanged: the kubelet expands $(VAR)
// and turns $$ into $, so every $ is doubled (as the ToolCall controller writes TOOL_ARGUMENTS).
func literalEnv(v string) string { return strings.ReplaceAll(v, "$", "$$") }

// descriptionAnnotation is the annotation the MCP gateway reads a Tool's description from
// (mcpgateway.AnnotationDescription, which this package cannot import: the gateway's tests import the
// controllers).
const descriptionAnnotation = "toolgate.dev/description"
