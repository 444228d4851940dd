package installer

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The chart gives the manager a default mcp-call image (--mcp-executor-image), so that an MCPServer
// need not name one: by default the mcp-call image beside the manager's (its repository's last part
// replaced, the manager's tag, else the chart's appVersion); mcpServers.executorImage overrides
// either part. With config/dev/values.yaml it is the mcp-call image hack/cluster.sh builds.
func TestChartSetsTheMCPExecutorImage(t *testing.T) {
	g := NewWithT(t)
	for values, want := range map[string]string{
		``: "mcp-call:0.1.0",
		`image: {repository: registry.example.com/toolgate/toolgate, tag: v1.2.3}`:                                 "registry.example.com/toolgate/mcp-call:v1.2.3",
		`image: {repository: localhost:5000/toolgate}`:                                                             "localhost:5000/mcp-call:0.1.0",
		`mcpServers: {executorImage: {repository: mirror.example.com/mcp-call}}`:                                   "mirror.example.com/mcp-call:0.1.0",
		`{image: {repository: r.example.com/t/toolgate, tag: v2}, mcpServers: {executorImage: {tag: v2-patched}}}`: "r.example.com/t/mcp-call:v2-patched",
	} {
		_, c := managerContainer(g, render(t, values))
		g.Expect(c.Args).To(ContainElement("--mcp-executor-image="+want), values)
		n := 0
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--mcp-executor-image=") {
				n++
			}
		}
		g.Expect(n).To(Equal(1), "passed once: %s", values)
	}

	dev, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "dev", "values.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	_, c := managerContainer(g, render(t, string(dev)))
	g.Expect(c.Args).To(ContainElement("--mcp-executor-image=localhost/toolgate/mcp-call:dev"))
	images, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "images.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(regexp.MustCompile(`(?m)^mcp-call\s`).Match(images)).To(BeTrue(), "hack/cluster.sh builds localhost/toolgate/mcp-call:dev from hack/images.txt")

	for values, want := range map[string]string{
		`mcpServers: {executorImage: "mcp-call:v1"}`:                   "/mcpServers/executorImage",
		`mcpServers: {executorImage: {repo: mcp-call}}`:                "repo",
		`mcpServers: {executorImage: {repository: "Mirror/MCP Call"}}`: "/mcpServers/executorImage/repository",
		`mcpServers: {executorImage: {tag: "v1 beta"}}`:                "/mcpServers/executorImage/tag",
	} {
		_, err := renderWith(t, values)
		g.Expect(err).To(MatchError(ContainSubstring(want)), values)
	}
}
