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
		{"cmd/toolgate-mcp/main.go", "docs/mcp-gateway.md"},
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
