package docs_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The flag tables say what the commands take: every flag a command defines has a row in its page,
// and every flag a row names exists (or is one of controller-runtime's zap flags, which
// zap.Options.BindFlags defines). Flags that drifted out of the pages, or rows for flags that were
// renamed, fail here.
func TestFlagTablesMatchTheCommands(t *testing.T) {
	// Flags the libraries define: controller-runtime's zap options and its --kubeconfig.
	zapFlags := []string{"zap-devel", "zap-encoder", "zap-log-level", "zap-stacktrace-level", "zap-time-encoding", "kubeconfig"}
	for _, c := range []struct{ source, doc string }{
		{"cmd/main.go", "docs/behaviour.md"},
		{"cmd/toolgate-mcp/flags.go", "docs/mcp-gateway.md"},
	} {
		t.Run(c.source, func(t *testing.T) {
			g := NewWithT(t)
			defined := flagsDefined(readFile(t, c.source))
			g.Expect(len(defined)).To(BeNumerically(">", 5), "%s: no flags found; has the way it defines them changed?", c.source)
			documented := flagsDocumented(readFile(t, c.doc))
			for _, f := range defined {
				g.Expect(documented).To(ContainElement(f), "%s defines --%s, which the flag table of %s does not list", c.source, f, c.doc)
			}
			for _, f := range documented {
				g.Expect(slices.Contains(defined, f) || slices.Contains(zapFlags, f)).To(BeTrue(),
					"%s lists --%s, which %s does not define", c.doc, f, c.source)
			}
		})
	}
}

var flagDefinition = regexp.MustCompile(`flag\.(?:String|Bool|Duration|Int|Int64|Float64|Uint)(?:Var)?\((?:&[\w.]+, )?"([a-z0-9-]+)"`)

func flagsDefined(source string) []string {
	var out []string
	for _, m := range flagDefinition.FindAllStringSubmatch(source, -1) {
		out = append(out, m[1])
	}
	return out
}

var flagInCell = regexp.MustCompile("`--([a-z0-9-]+)`")

// flagsDocumented returns the flags named in the first cell of the page's table rows.
func flagsDocumented(doc string) []string {
	var out []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, m := range flagInCell.FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// Every command block that binds the agent role also grants a tool to call: the agent role alone
// lets an agent create no ToolCall at all (the admission policy toolgate-toolcall-authorization
// refuses a call of a tool it was not granted), so a page that shows only the first binding leaves its
// reader with an agent that cannot work.
func TestAgentBindingsComeWithACallGrant(t *testing.T) {
	g := NewWithT(t)
	checked := 0
	for _, file := range markdownFiles(t) {
		for _, block := range fencedBlocks(readFile(t, file), "sh") {
			if !strings.Contains(block, "--clusterrole=toolgate-toolcall-agent") {
				continue
			}
			checked++
			g.Expect(block).To(MatchRegexp(`--clusterrole=toolgate-call-[a-z0-9-]+`),
				"%s binds toolgate-toolcall-agent without a call grant in the same commands:\n%s", file, block)
		}
	}
	g.Expect(checked).To(BeNumerically(">=", 3))
}

// fencedBlocks returns the contents of the doc's fenced code blocks of language lang.
func fencedBlocks(doc, lang string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && trimmed == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

// Toolgate's metrics are described in one table, docs/metrics.md's: a second copy elsewhere drifts
// (one listed metrics and labels that were no longer registered).
func TestMetricsAreTabledOnlyInTheMetricsPage(t *testing.T) {
	g := NewWithT(t)
	row := regexp.MustCompile("(?m)^\\| `toolgate_[a-z_]+` \\|")
	for _, file := range markdownFiles(t) {
		if file == "docs/metrics.md" {
			continue
		}
		g.Expect(row.FindString(readFile(t, file))).To(BeEmpty(), "%s has a table row of a metric: link to docs/metrics.md instead", file)
	}
	g.Expect(row.MatchString(readFile(t, "docs/metrics.md"))).To(BeTrue())
}
