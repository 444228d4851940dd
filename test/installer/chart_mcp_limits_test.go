package installer

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The chart's mcpServers values become the manager's --mcp-* flags; left empty, none is passed (the
// manager's defaults hold), and a value that is not a positive number is refused with its path.
func TestChartPassesTheMCPServerLimits(t *testing.T) {
	g := NewWithT(t)
	_, c := managerContainer(g, render(t, `mcpServers: {maxResponseBytes: 8388608, maxEventBytes: "1048576", maxTools: 500, maxSchemaBytes: 32768, maxDescriptionBytes: 4096, maxToolNameBytes: 64, listingInterval: 30s}`))
	g.Expect(c.Args).To(ContainElements("--mcp-max-response-bytes=8388608", "--mcp-max-event-bytes=1048576", "--mcp-max-tools=500",
		"--mcp-max-schema-bytes=32768", "--mcp-max-description-bytes=4096", "--mcp-max-tool-name-bytes=64", "--mcp-listing-interval=30s"))

	_, c = managerContainer(g, render(t, ``))
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--mcp-executor-image=") {
			continue // not a limit: TestChartSetsTheMCPExecutorImage
		}
		g.Expect(strings.HasPrefix(a, "--mcp-")).To(BeFalse(), "by default the chart passes no %s", a)
	}

	for values, want := range map[string]string{
		`mcpServers: {maxTools: 0}`:              "/mcpServers/maxTools",
		`mcpServers: {maxResponseBytes: "4Mi"}`:  "/mcpServers/maxResponseBytes",
		`mcpServers: {listingInterval: often}`:   "/mcpServers/listingInterval",
		`mcpServers: {maxResponsBytes: 1048576}`: "maxResponsBytes",
	} {
		_, err := renderWith(t, values)
		g.Expect(err).To(MatchError(ContainSubstring(want)), values)
	}
}
