package mcpservers

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/util/validation"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpgateway"
)

// The generated Tools carry their description where the MCP gateway reads it.
func TestDescriptionAnnotationIsTheGateways(t *testing.T) {
	if descriptionAnnotation != mcpgateway.AnnotationDescription {
		t.Fatalf("%q is not the gateway's %q", descriptionAnnotation, mcpgateway.AnnotationDescription)
	}
}

func TestExposed(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		name     string
		want     bool
	}{
		{nil, "echo", false},
		{[]string{"echo"}, "echo", true},
		{[]string{"echo"}, "echo2", false},
		{[]string{"get-*"}, "get-sum", true},
		{[]string{"get-*"}, "toggle-logging", false},
		{[]string{"*"}, "anything.at_all", true},
		{[]string{"get-?um"}, "get-sum", true},
		{[]string{"[abc]*"}, "bravo", true},
		{[]string{"[", "echo"}, "echo", true},
	} {
		if got := exposed(c.patterns, c.name); got != c.want {
			t.Errorf("exposed(%q, %q) = %v, want %v", c.patterns, c.name, got, c.want)
		}
	}
	if badPattern([]string{"echo", "get-*"}) != "" || badPattern([]string{"echo", "["}) != "[" {
		t.Error("badPattern does not find the invalid glob")
	}
}

func TestToolName(t *testing.T) {
	for _, c := range []struct {
		server, tool, want, err string
	}{
		{"github", "create_issue", "github__create_issue", ""},
		{"everything", "get-sum", "everything__get-sum", ""},
		{"fs", "read/file", "", "not a valid toolName"},
		{"fs", "lire fichier", "", "not a valid toolName"},
		{"x", strings.Repeat("t", 126), "", "longer than a toolName may be"},
	} {
		got, err := ToolName(c.server, c.tool)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ToolName(%q, %q) = %q, %v; want %q, %q", c.server, c.tool, got, err, c.want, c.err)
		}
	}
}

// Object names follow the toolName convention when they can, are valid object names always, and
// never collide.
func TestObjectNames(t *testing.T) {
	in := []string{"github__create_issue", "fs__Read", "fs__read", "x__" + strings.Repeat("a", 80), "x__.dot"}
	got := ObjectNames(in)
	if got["github__create_issue"] != "github--create-issue" {
		t.Errorf("conventional name: got %q", got["github__create_issue"])
	}
	seen := map[string]string{}
	for _, n := range in {
		o := got[n]
		if errs := validation.IsDNS1123Subdomain(o); len(errs) > 0 || len(o) > 63 {
			t.Errorf("%q -> %q is not a valid name: %v", n, o, errs)
		}
		if other, dup := seen[o]; dup {
			t.Errorf("%q and %q share the name %q", n, other, o)
		}
		seen[o] = n
	}
	if got["fs__Read"] == "fs--read" || got["fs__read"] == "fs--read" {
		t.Error("two toolNames of one conventional name keep it")
	}
}

func TestAnnotationsAndSchema(t *testing.T) {
	f := false
	a := annotations(&mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &f})
	if !*a.ReadOnlyHint || *a.DestructiveHint || *a.IdempotentHint {
		t.Errorf("annotations: %+v", a)
	}
	if annotations(nil) != nil {
		t.Error("no annotations, no hints")
	}
	s1, err := canonicalSchema(&mcp.Tool{InputSchema: map[string]any{"type": "object", "properties": map[string]any{"b": 1, "a": 2}}})
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := canonicalSchema(&mcp.Tool{InputSchema: map[string]any{"properties": map[string]any{"a": 2, "b": 1}, "type": "object"}})
	if string(s1) != string(s2) || SchemaHash(s1) != SchemaHash(s2) || len(SchemaHash(s1)) != 16 {
		t.Errorf("the same schema hashes differently: %s %s", s1, s2)
	}
	if _, err := canonicalSchema(&mcp.Tool{InputSchema: []any{1}}); err == nil {
		t.Error("a schema that is not an object is refused")
	}
}

// The Job's env carries values as the container must see them: every $ doubled.
func TestJobTemplateWritesLiteralEnv(t *testing.T) {
	srv := &tg.MCPServer{}
	srv.Name = "s"
	srv.Spec.URL, srv.Spec.ExecutorImage = "https://mcp.example.com/$(HOME)/mcp", "mcp-call:v1"
	jt := jobTemplate(srv, "t$$", connection{}, executor{image: "mcp-call:v1"})
	env := jt.Spec.Template.Spec.Containers[0].Env
	if env[0].Value != "https://mcp.example.com/$$(HOME)/mcp" || env[1].Value != "t$$$$" {
		t.Errorf("env %+v", env)
	}
	if *jt.Spec.BackoffLimit != 0 || *jt.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("the Job is retried, or mounts a token")
	}
}
