package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// docs/providers.md names a test for every row of its compatibility table, and every test the page
// names exists.
func TestProvidersDocNamesTestsThatExist(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
				defined[fn.Name.Name] = true
			}
		}
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())

	doc := readFile(t, "docs/providers.md")
	testName := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")
	// Every row of the two AAP checklists and of the compatibility table names its test in its last
	// cell; the checklists have one row per item of AAP's section 8.
	for _, sec := range []struct {
		heading string
		rows    int
	}{{"## Adapter checklist", 8}, {"## Provider checklist", 12}, {"## Compatibility table", 10}} {
		_, table, found := strings.Cut(doc, sec.heading)
		g.Expect(found).To(BeTrue(), "docs/providers.md has a section %q", sec.heading)
		if next := strings.Index(table, "\n## "); next >= 0 {
			table = table[:next]
		}
		rows := 0
		for _, line := range strings.Split(table, "\n") {
			if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| Behaviour ") {
				continue
			}
			rows++
			cells := strings.Split(strings.Trim(line, "| "), " | ")
			g.Expect(testName.FindAllString(cells[len(cells)-1], -1)).NotTo(BeEmpty(), "the row names its test: %s", line)
		}
		if sec.heading == "## Compatibility table" {
			g.Expect(rows).To(BeNumerically(">=", sec.rows), sec.heading)
		} else {
			g.Expect(rows).To(Equal(sec.rows), sec.heading)
		}
	}
	for _, m := range testName.FindAllStringSubmatch(doc, -1) {
		g.Expect(defined).To(HaveKey(m[1]), "docs/providers.md names %s, which no _test.go file defines", m[1])
	}
}
