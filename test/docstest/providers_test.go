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
	_, table, found := strings.Cut(doc, "## Compatibility table")
	g.Expect(found).To(BeTrue(), "docs/providers.md has a compatibility table")
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| Behaviour ") {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		g.Expect(testName.FindAllString(cells[len(cells)-1], -1)).NotTo(BeEmpty(), "the row names its test: %s", line)
	}
	g.Expect(rows).To(BeNumerically(">=", 10))
	for _, m := range testName.FindAllStringSubmatch(doc, -1) {
		g.Expect(defined).To(HaveKey(m[1]), "docs/providers.md names %s, which no _test.go file defines", m[1])
	}
}
