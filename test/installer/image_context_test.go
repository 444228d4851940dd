package installer

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	. "github.com/onsi/gomega"
)

// The Dockerfile builds every program of its image from what its build context holds: the builder
// stage's COPY instructions are applied here to the files .dockerignore's rules leave in the context
// (read with the library Docker uses), and each `go build` of its RUN instruction runs there. A
// package the Dockerfile does not copy, or that .dockerignore leaves out, fails the build here as it
// would in Docker.
func TestDockerfileBuildsFromItsContext(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)

	ignore, err := os.Open(filepath.Join(root, ".dockerignore"))
	g.Expect(err).NotTo(HaveOccurred())
	patterns, err := ignorefile.ReadAll(ignore)
	g.Expect(ignore.Close()).To(Succeed())
	g.Expect(err).NotTo(HaveOccurred())
	pm, err := patternmatcher.New(patterns)
	g.Expect(err).NotTo(HaveOccurred())

	copies, builds := builderStage(g, filepath.Join(root, "Dockerfile"))
	g.Expect(builds).To(HaveKeyWithValue("manager", "./cmd"))
	g.Expect(builds).To(HaveKey("reference-provider"))
	g.Expect(builds).To(HaveKey("toolgate-mcp"))

	workspace := t.TempDir()
	for src, dst := range copies {
		copied, err := copyFromContext(root, pm, src, filepath.Join(workspace, dst))
		g.Expect(err).NotTo(HaveOccurred(), "COPY %s %s", src, dst)
		g.Expect(copied).To(BeNumerically(">", 0), "COPY %s %s: the build context holds nothing there", src, dst)
	}
	for name, pkg := range builds {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(t.TempDir(), name), pkg)
		cmd.Dir = workspace
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "the Dockerfile's build of %s (%s) from its context:\n%s", name, pkg, out)
	}
}

var (
	copyInstruction  = regexp.MustCompile(`^COPY\s+(\S+)\s+(\S+)\s*$`)
	buildInstruction = regexp.MustCompile(`go build .*?-o (\S+) (\./\S*)`)
)

// builderStage reads the Dockerfile's first stage: its COPY instructions from the context (source to
// destination) and the programs its go build commands make (name to package).
func builderStage(g Gomega, dockerfile string) (copies, builds map[string]string) {
	f, err := os.Open(dockerfile)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	copies, builds = map[string]string{}, map[string]string{}
	var run strings.Builder
	stages := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "FROM ") {
			stages++
		}
		if stages != 1 {
			continue
		}
		if m := copyInstruction.FindStringSubmatch(line); m != nil {
			copies[m[1]] = m[2]
		}
		if strings.HasPrefix(line, "RUN ") || run.Len() > 0 {
			run.WriteString(strings.TrimSuffix(line, `\`) + " ")
			if !strings.HasSuffix(line, `\`) {
				for _, m := range buildInstruction.FindAllStringSubmatch(run.String(), -1) {
					builds[m[1]] = m[2]
				}
				run.Reset()
			}
		}
	}
	g.Expect(sc.Err()).NotTo(HaveOccurred())
	g.Expect(copies).NotTo(BeEmpty(), "the builder stage copies nothing")
	return copies, builds
}

// copyFromContext copies what the build context (the files under root that .dockerignore's patterns
// pm leave in) holds at src, a file or a directory, to dst, as COPY does; it returns how many files
// it copied.
func copyFromContext(root string, pm *patternmatcher.PatternMatcher, src, dst string) (int, error) {
	base := filepath.Join(root, src)
	copied := 0
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel)); err != nil || excluded {
			return err
		}
		under, err := filepath.Rel(base, path)
		if err != nil {
			return err
		}
		copied++
		return copyFile(path, filepath.Join(dst, under))
	})
	return copied, err
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
