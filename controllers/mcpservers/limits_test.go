package mcpservers

import (
	"flag"
	"io"
	"strings"
	"testing"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
)

// --mcp-executor-image sets the default image of the calls' Jobs; a value that is not an image
// reference is refused, naming the flag and an example.
func TestExecutorImageFlag(t *testing.T) {
	parse := func(args ...string) (Options, error) {
		var o Options
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.BindFlags(fs)
		return o, fs.Parse(args)
	}
	o, err := parse()
	if err != nil || o.ExecutorImage != "" {
		t.Fatalf("no flag: %q, %v; want no default image", o.ExecutorImage, err)
	}
	o, err = parse("--mcp-executor-image=registry.example.com/toolgate/mcp-call:v0.1.0")
	if err != nil || o.ExecutorImage != "registry.example.com/toolgate/mcp-call:v0.1.0" {
		t.Fatalf("got %q, %v", o.ExecutorImage, err)
	}
	_, err = parse("--mcp-executor-image=Not An Image")
	if err == nil || !strings.Contains(err.Error(), `--mcp-executor-image "Not An Image" is not an image reference`) ||
		!strings.Contains(err.Error(), "such as registry.example.com/toolgate/mcp-call:v0.1.0") {
		t.Fatalf("a bad image: %v", err)
	}
}

// The image of the calls' Jobs: spec.executor.image, else the deprecated spec.executorImage, else the
// manager's default; with none, a Stalled error that names what to set.
func TestExecutorImageOrder(t *testing.T) {
	for _, c := range []struct {
		name, own, deprecated, manager, want string
	}{
		{"spec.executor.image first", "mcp-call:own", "mcp-call:old", "mcp-call:default", "mcp-call:own"},
		{"then spec.executorImage", "", "mcp-call:old", "mcp-call:default", "mcp-call:old"},
		{"then the manager's", "", "", "mcp-call:default", "mcp-call:default"},
	} {
		srv := &tg.MCPServer{}
		srv.Spec.Executor.Image, srv.Spec.ExecutorImage = c.own, c.deprecated
		e, err := executorOf(srv, c.manager)
		if err != nil || e.image != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, e.image, err, c.want)
		}
	}
	_, err := executorOf(&tg.MCPServer{}, "")
	if e, ok := readiness.ErrorOf(err); !ok || e.Reason != tg.ReasonInvalidMCPServerSpec || !strings.Contains(e.Message, "--mcp-executor-image") {
		t.Errorf("no image: %v", err)
	}
}
