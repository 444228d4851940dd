package docs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// Every Go file that a comment or a Markdown page names exists, so that the maps of the code
// (controllers/doc.go, the README's layout, the comments that say where a step lives) follow the files
// when they move.
//
// Where names are looked for: the comments of every .go file of the repository, tests included, and
// every .md file; vendor, testdata, node_modules, bin and dot directories are skipped. In a comment
// or a page, a name is a token ending in ".go" that is not part of a longer word, a glob (*_test.go)
// or a URL (every "scheme://..." is dropped first: names inside links to other repositories are
// theirs). A name may carry a line, as in "cmd/mcp-call/main.go:10" (also ":10-12" and ":10,12").
//
// How a name resolves:
//   - A name with a slash (controllers/toolcalls/job.go, toolcalls/job.go, ../../cmd/mcp-call/main.go)
//     exists relative to the repository root, relative to the directory of the file that names it,
//     or as the end of a repository path after a slash (toolcalls/job.go is controllers/toolcalls/job.go).
//     The module path (toolgate.dev/toolgate/) is dropped first.
//   - A bare name (job.go) in a Go comment exists in that file's own directory (its package), or
//     somewhere under a directory that the same paragraph of the comment names as a path (an item of
//     the map of controllers/doc.go names controllers/toolcalls, then its files by name). A paragraph
//     ends at a blank comment line, at the start of a list item ("- ") and where the comment ends.
//   - A bare name in a Markdown page exists somewhere in the repository.
//   - A line, if given, is within the file.
//
// A comment is a run of comments on consecutive lines with no code between. The files are those on disk, so that a rename
// not committed yet is seen. The failure lists every stale name as "file:line: name (why)", in order.
//
// Names that are not files of this repository (another module's file named without its URL, a file a
// test writes into a temporary directory) are listed in notRepositoryFiles, each with its reason; none
// is needed today.
func TestCommentsAndDocsNameGoFilesThatExist(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	repo := goFilesOf(t, root)
	var refs []goFileRef
	for _, rel := range sourceFiles(t, root, ".go") {
		refs = append(refs, goCommentRefs(t, root, rel)...)
	}
	inGo := len(refs)
	for _, rel := range sourceFiles(t, root, ".md") {
		refs = append(refs, markdownRefs(t, root, rel)...)
	}
	// A scan that finds nothing proves nothing: the maps name dozens of files.
	g.Expect(inGo).To(BeNumerically(">", 30), "suspiciously few Go file names found in Go comments")
	g.Expect(len(refs)-inGo).To(BeNumerically(">", 10), "suspiciously few Go file names found in Markdown")

	var stale []string
	for _, r := range refs {
		if _, ok := notRepositoryFiles[r.name]; ok {
			continue
		}
		if problem := repo.resolve(r); problem != "" {
			stale = append(stale, fmt.Sprintf("%s: %s (%s)", r.where, r.text, problem))
		}
	}
	slices.SortFunc(stale, compareWhere)
	g.Expect(strings.Join(stale, "\n")).To(BeEmpty(), "these comments and pages name Go files that do not exist "+
		"(as where: name); write the file's path as it is now (relative to the repository root when in doubt), "+
		"or, for a file of another repository, add it to notRepositoryFiles with the reason")
}

// compareWhere orders "file:line: ..." by file, then by line.
func compareWhere(a, b string) int {
	fa, ra, _ := strings.Cut(a, ":")
	fb, rb, _ := strings.Cut(b, ":")
	if c := strings.Compare(fa, fb); c != 0 {
		return c
	}
	la, _ := strconv.Atoi(ra[:strings.IndexByte(ra+":", ':')])
	lb, _ := strconv.Atoi(rb[:strings.IndexByte(rb+":", ':')])
	return la - lb
}

// notRepositoryFiles are names that look like this repository's Go files but are not: the name as
// written (without its line), and why it is not one.
var notRepositoryFiles = map[string]string{}

// goFileRef is one name of a Go file in a comment or a page.
type goFileRef struct {
	where string // repository-relative file:line of the mention
	dir   string // repository-relative directory of the file that names it
	text  string // the name as written, with its line if any
	name  string // the name without its line
	line  int    // the line it names, 0 for none
	// dirs are the repository-relative directories the surrounding comment names (Go comments only);
	// markdown is true for a mention in a Markdown page.
	dirs     []string
	markdown bool
}

var (
	goFileName = regexp.MustCompile(`(?:^|[^\w./*-])((?:[\w.-]+/)*[\w.-]*\w\.go)(?::(\d+)(?:[-,]\d+)*)?(?:[^\w/]|$)`)
	dirName    = regexp.MustCompile(`(?:^|[^\w./*-])((?:\.\.?/)*[\w.-]+(?:/[\w.-]+)+)/?(?:[^\w/]|$)`)
	urlPattern = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)>\]"'` + "`" + `]*`)
)

const modulePrefix = "toolgate.dev/toolgate/"

// namesIn returns the Go file names of text, one line of a comment or a page.
func namesIn(text string) [][2]string {
	text = urlPattern.ReplaceAllString(text, " ")
	var out [][2]string
	// The pattern consumes the character on each side of a name: scan on from the end of each
	// name's own text, so that two names a space apart are both found.
	for rest := text; ; {
		loc := goFileName.FindStringSubmatchIndex(rest)
		if loc == nil {
			return out
		}
		name, line := rest[loc[2]:loc[3]], ""
		end := loc[3]
		if loc[4] >= 0 {
			line, end = rest[loc[4]:loc[5]], loc[5]
		}
		out = append(out, [2]string{name, line})
		rest = rest[end:]
	}
}

// newRef makes the reference to name (and line, "" for none) from where, in a file of dir.
func newRef(where, dir, name, line string) goFileRef {
	r := goFileRef{where: where, dir: dir, text: name, name: strings.TrimPrefix(name, modulePrefix)}
	if line != "" {
		r.text += ":" + line
		r.line, _ = strconv.Atoi(line)
	}
	return r
}

// goCommentRefs returns the names in the comments of the Go file rel. The directories a paragraph
// of a comment names (see startsParagraph) are where its bare names may be.
func goCommentRefs(t *testing.T, root, rel string) []goFileRef {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	// Errors are the compiler's to report: a file another change left broken still has its comments.
	s.Init(fset.AddFile(rel, -1, len(src)), src, func(token.Position, string) {}, scanner.ScanComments)
	var out, group []goFileRef
	var dirs []string
	endLine := -2
	flush := func() {
		for i := range group {
			group[i].dirs = dirs
		}
		out, group, dirs = append(out, group...), nil, nil
	}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.COMMENT {
			if tok != token.SEMICOLON || lit != "\n" { // code between two comments parts them
				endLine = -2
			}
			continue
		}
		start := fset.Position(pos).Line
		if start > endLine+1 {
			flush()
		}
		for i, line := range strings.Split(lit, "\n") {
			if startsParagraph(line) {
				flush()
			}
			for _, n := range namesIn(line) {
				group = append(group, newRef(fmt.Sprintf("%s:%d", rel, start+i), filepath.ToSlash(filepath.Dir(rel)), n[0], n[1]))
			}
			dirs = append(dirs, dirsIn(root, rel, line)...)
		}
		endLine = start + strings.Count(lit, "\n")
	}
	flush()
	return out
}

// startsParagraph reports whether a comment's line is blank or starts an item of a list, where the
// directories its earlier lines name stop holding the bare names that follow.
func startsParagraph(line string) bool {
	text := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(line), "//"), "/*"))
	return text == "" || text == "*/" || strings.HasPrefix(text, "- ") || strings.HasPrefix(text, "* ")
}

// dirsIn returns the repository directories that line names as paths (relative to the root, or to
// the directory of rel).
func dirsIn(root, rel, line string) []string {
	var out []string
	for _, m := range dirName.FindAllStringSubmatch(urlPattern.ReplaceAllString(line, " "), -1) {
		name := strings.TrimPrefix(m[1], modulePrefix)
		for _, cand := range []string{path.Clean(name), path.Join(filepath.ToSlash(filepath.Dir(rel)), name)} {
			if fi, err := os.Stat(filepath.Join(root, cand)); err == nil && fi.IsDir() && !strings.HasPrefix(cand, "..") {
				out = append(out, cand)
			}
		}
	}
	return out
}

// markdownRefs returns the names in the Markdown page rel.
func markdownRefs(t *testing.T, root, rel string) []goFileRef {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []goFileRef
	lines := bufio.NewScanner(bytes.NewReader(data))
	lines.Buffer(nil, 1<<20)
	for n := 1; lines.Scan(); n++ {
		for _, m := range namesIn(lines.Text()) {
			r := newRef(fmt.Sprintf("%s:%d", rel, n), filepath.ToSlash(filepath.Dir(rel)), m[0], m[1])
			r.markdown = true
			out = append(out, r)
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	return out
}

// goFiles are the repository's Go files: their repository-relative paths and their lengths in lines.
type goFiles map[string]int

// goFilesOf walks the repository for its Go files, testdata's included (comments may name them).
func goFilesOf(t *testing.T, root string) goFiles {
	t.Helper()
	files := goFiles{}
	for _, rel := range walkFiles(t, root, ".go", true) {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		files[rel] = bytes.Count(data, []byte("\n")) + 1
	}
	return files
}

// resolve says why r names no file of the repository, "" when it does.
func (files goFiles) resolve(r goFileRef) string {
	var found []string
	switch {
	case strings.Contains(r.name, "/"):
		for _, cand := range []string{path.Clean(r.name), path.Join(r.dir, r.name)} {
			if _, ok := files[cand]; ok {
				found = append(found, cand)
			}
		}
		for f := range files {
			if strings.HasSuffix(f, "/"+path.Clean(r.name)) {
				found = append(found, f)
			}
		}
		if len(found) == 0 {
			return "no such file"
		}
	case r.markdown:
		for f := range files {
			if path.Base(f) == r.name {
				found = append(found, f)
			}
		}
		if len(found) == 0 {
			return "no file of that name in the repository"
		}
	default:
		if _, ok := files[path.Join(r.dir, r.name)]; ok {
			found = append(found, path.Join(r.dir, r.name))
			break
		}
		for f := range files {
			if path.Base(f) == r.name && slices.ContainsFunc(r.dirs, func(d string) bool { return strings.HasPrefix(f, d+"/") }) {
				found = append(found, f)
			}
		}
		if len(found) == 0 {
			return notFound(r)
		}
	}
	if r.line > 0 && !slices.ContainsFunc(found, func(f string) bool { return files[f] >= r.line }) {
		return fmt.Sprintf("%s has fewer than %d lines", found[0], r.line)
	}
	return ""
}

// notFound says where a bare name of a Go comment was looked for.
func notFound(r goFileRef) string {
	dirs := slices.Compact(slices.Sorted(slices.Values(r.dirs)))
	switch {
	case len(dirs) == 0:
		return "not in " + r.dir
	case len(dirs) > 3:
		return fmt.Sprintf("not in %s nor under any of the %d directories its paragraph names", r.dir, len(dirs))
	}
	return "not in " + r.dir + " nor under " + strings.Join(dirs, " nor under ")
}

// sourceFiles returns the repository-relative paths of the files ending in ext, outside vendor,
// testdata, node_modules, bin and dot directories.
func sourceFiles(t *testing.T, root, ext string) []string {
	t.Helper()
	return walkFiles(t, root, ext, false)
}

// walkFiles returns the repository-relative paths of the files ending in ext, outside vendor,
// node_modules, bin and dot directories, and outside testdata unless withTestdata.
func walkFiles(t *testing.T, root, ext string, withTestdata bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case p == root:
			case strings.HasPrefix(name, "."), name == "vendor", name == "node_modules", name == "bin",
				name == "testdata" && !withTestdata:
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ext) {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The rules of TestCommentsAndDocsNameGoFilesThatExist, on names and files of their own.
func TestGoFileNamesAreFoundAndResolved(t *testing.T) {
	for _, c := range []struct {
		line string
		want [][2]string
	}{
		{"each step has a file: acceptance.go, policy.go and job.go", [][2]string{{"acceptance.go", ""}, {"policy.go", ""}, {"job.go", ""}}},
		{"(approvalprovider/controller.go:67,76)", [][2]string{{"approvalprovider/controller.go", "67"}}},
		{"`controllers/doc.go:10-12`: the map", [][2]string{{"controllers/doc.go", "10"}}},
		{"see toolgate.dev/toolgate/internal/mcpcall/call.go.", [][2]string{{"toolgate.dev/toolgate/internal/mcpcall/call.go", ""}}},
		{"[link](../controllers/doc.go)", [][2]string{{"../controllers/doc.go", ""}}},
		{"https://github.com/kubernetes/client-go/blob/master/tools/cache/reflector.go#L1", nil},
		{"every *_test.go and zz_generated.*.go", nil},
		{"go.mod, golang.org/x/time, foo.golang, .go, cmd.go_", nil},
	} {
		if got := namesIn(c.line); !slices.Equal(got, c.want) {
			t.Errorf("namesIn(%q) = %q, want %q", c.line, got, c.want)
		}
	}

	files := goFiles{"controllers/doc.go": 40, "controllers/toolcalls/job.go": 300, "cmd/mcp-call/main.go": 80, "internal/mcpcall/call.go": 100}
	for _, c := range []struct {
		name     string
		ref      goFileRef
		wantFail string
	}{
		{"a path from the root", newRef("x", "test/docstest", "controllers/toolcalls/job.go", ""), ""},
		{"the end of a path", newRef("x", "test/docstest", "toolcalls/job.go", "299"), ""},
		{"a path from the naming file", newRef("x", "test/docstest", "../../cmd/mcp-call/main.go", ""), ""},
		{"the module's import path", newRef("x", "cmd/mcp-call", "toolgate.dev/toolgate/internal/mcpcall/call.go", ""), ""},
		{"a path that is no file", newRef("x", "test/docstest", "controllers/job.go", ""), "no such file"},
		{"half a directory name", newRef("x", "test/docstest", "call/job.go", ""), "no such file"},
		{"a line past the end", newRef("x", "test/docstest", "controllers/doc.go", "41"), "controllers/doc.go has fewer than 41 lines"},
		{"a bare name in its package", newRef("x", "controllers/toolcalls", "job.go", ""), ""},
		{"a bare name of another package", newRef("x", "controllers", "job.go", ""), "not in controllers"},
		{"a bare name under a directory the comment names", withDirs(newRef("x", "controllers", "job.go", ""), "controllers/toolcalls"), ""},
		{"a bare name not under the directory the comment names", withDirs(newRef("x", "controllers", "call.go", ""), "controllers/toolcalls"), "not in controllers nor under controllers/toolcalls"},
		{"a bare name in a page", inMarkdown(newRef("x", "docs", "call.go", "")), ""},
		{"a bare name in a page that is no file", inMarkdown(newRef("x", "docs", "calls.go", "")), "no file of that name in the repository"},
	} {
		if got := files.resolve(c.ref); got != c.wantFail {
			t.Errorf("%s: resolve(%s in %s) = %q, want %q", c.name, c.ref.text, c.ref.dir, got, c.wantFail)
		}
	}
}

// The directories a comment names hold the bare names of its paragraph only: a blank line, a list
// item or the end of the comment ends it.
func TestGoCommentParagraphsScopeTheirDirectories(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	for _, dir := range []string{"pkg/a", "pkg/b", "pkg/c"} {
		g.Expect(os.MkdirAll(filepath.Join(root, dir), 0o755)).To(Succeed())
	}
	src := `// Package p is mapped here.
//   - pkg/a: one.go and
//     two.go.
//   - pkg/b (see ../pkg/c): three.go.
//
// four.go
package p

// five.go, after the package's comment ended.
func f() {} // six.go, parted from the comment above by code
`
	g.Expect(os.WriteFile(filepath.Join(root, "pkg", "p.go"), []byte(src), 0o644)).To(Succeed())
	dirs := map[string][]string{}
	for _, r := range goCommentRefs(t, root, "pkg/p.go") {
		dirs[r.where+" "+r.name] = r.dirs
	}
	g.Expect(dirs).To(Equal(map[string][]string{
		"pkg/p.go:2 one.go":   {"pkg/a"},
		"pkg/p.go:3 two.go":   {"pkg/a"},
		"pkg/p.go:4 three.go": {"pkg/b", "pkg/c"},
		"pkg/p.go:6 four.go":  nil,
		"pkg/p.go:9 five.go":  nil,
		"pkg/p.go:10 six.go":  nil,
	}))
}

func withDirs(r goFileRef, dirs ...string) goFileRef {
	r.dirs = dirs
	return r
}

func inMarkdown(r goFileRef) goFileRef {
	r.markdown = true
	return r
}
