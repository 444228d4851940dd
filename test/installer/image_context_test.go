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

// The Dockerfile builds every program of hack/images.txt's `release` rows from what its build
// context holds: the builder stage's COPY instructions are applied here to the files .dockerignore's
// rules leave in the context (read with the library Docker uses), and its RUN instructions run there
// with sh, writing to a temporary directory instead of /out. A package the Dockerfile does not copy,
// or that .dockerignore leaves out, fails the build here as it would in Docker.
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

	stages := dockerfileStages(g, filepath.Join(root, "Dockerfile"))
	g.Expect(stages).NotTo(BeEmpty())
	builder := stages[0]
	g.Expect(builder.copies).NotTo(BeEmpty(), "the builder stage copies nothing")

	workspace := t.TempDir()
	for _, c := range builder.copies {
		copied, err := copyFromContext(root, pm, c[0], filepath.Join(workspace, c[1]))
		g.Expect(err).NotTo(HaveOccurred(), "COPY %s %s", c[0], c[1])
		g.Expect(copied).To(BeNumerically(">", 0), "COPY %s %s: the build context holds nothing there", c[0], c[1])
	}
	out := filepath.Join(t.TempDir(), "out")
	for _, run := range builder.runs {
		if strings.HasPrefix(run, "go mod download") {
			continue // the module cache is this machine's
		}
		cmd := exec.Command("sh", "-ec", strings.ReplaceAll(run, "/out", out))
		cmd.Dir = workspace
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "TARGETARCH=")
		output, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "the Dockerfile's RUN %s, from its context:\n%s", run, output)
	}
	for _, img := range readImageList(g, root) {
		if img.where != "release" {
			continue
		}
		g.Expect(filepath.Join(out, img.binary)).To(BeARegularFile(), "the builder stage builds %s (%s)", img.binary, img.pkg)
	}
}

// Every `release` row of hack/images.txt is a target of the Dockerfile named after its image, holding
// its one binary, run as 65532:65532; every other stage is one of them, and the manager's comes last
// (what `docker build .` builds). A row that is not `release` has no target.
func TestDockerfileHasATargetPerImage(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	stages := dockerfileStages(g, filepath.Join(root, "Dockerfile"))
	g.Expect(stages[0].name).To(Equal("builder"))
	targets := map[string]stage{}
	for _, s := range stages[1:] {
		targets[s.name] = s
	}
	release := 0
	for _, img := range readImageList(g, root) {
		if img.where != "release" {
			g.Expect(targets).NotTo(HaveKey(img.image), "%s is not a release image", img.image)
			continue
		}
		release++
		g.Expect(img.where).To(Equal("release"))
		s, ok := targets[img.image]
		g.Expect(ok).To(BeTrue(), "the Dockerfile has no target %q (hack/images.txt)", img.image)
		g.Expect(s.copies).To(Equal([][2]string{{"/out/" + img.binary, "/" + img.binary}}), "target %s", img.image)
		g.Expect(s.user).To(Equal("65532:65532"), "target %s", img.image)
		g.Expect(s.entrypoint).To(Equal(`["/`+img.binary+`"]`), "target %s", img.image)
	}
	g.Expect(targets).To(HaveLen(release), "every target is a release row of hack/images.txt")
	g.Expect(stages[len(stages)-1].name).To(Equal("toolgate"), "the manager's target comes last")
}

type stage struct {
	name             string
	copies           [][2]string // source, destination (the builder's: from the context; others': --from=builder)
	runs             []string
	user, entrypoint string
}

var (
	fromInstruction = regexp.MustCompile(`^FROM\s+\S+\s+AS\s+(\S+)$`)
	copyInstruction = regexp.MustCompile(`^COPY\s+(?:--from=builder\s+)?(\S+)\s+(\S+)\s*$`)
)

// dockerfileStages reads the Dockerfile's stages: their names, COPY, RUN (continuation lines joined),
// USER and ENTRYPOINT instructions.
func dockerfileStages(g Gomega, dockerfile string) []stage {
	f, err := os.Open(dockerfile)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	var stages []stage
	var run strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if m := fromInstruction.FindStringSubmatch(line); m != nil {
			stages = append(stages, stage{name: m[1]})
			continue
		}
		g.Expect(stages).NotTo(BeEmpty(), "an instruction before FROM: %s", line)
		s := &stages[len(stages)-1]
		switch {
		case strings.HasPrefix(line, "RUN ") || run.Len() > 0:
			run.WriteString(strings.TrimSuffix(strings.TrimPrefix(line, "RUN "), `\`) + " ")
			if !strings.HasSuffix(line, `\`) {
				s.runs = append(s.runs, strings.TrimSpace(run.String()))
				run.Reset()
			}
		case copyInstruction.MatchString(line):
			m := copyInstruction.FindStringSubmatch(line)
			s.copies = append(s.copies, [2]string{m[1], m[2]})
		case strings.HasPrefix(line, "USER "):
			s.user = strings.TrimSpace(strings.TrimPrefix(line, "USER "))
		case strings.HasPrefix(line, "ENTRYPOINT "):
			s.entrypoint = strings.TrimSpace(strings.TrimPrefix(line, "ENTRYPOINT "))
		}
	}
	g.Expect(sc.Err()).NotTo(HaveOccurred())
	return stages
}

type imageRow struct{ image, binary, pkg, where string }

// readImageList reads hack/images.txt: image, binary, package, where (release or dev) per line.
func readImageList(g Gomega, root string) []imageRow {
	data, err := os.ReadFile(filepath.Join(root, "hack", "images.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	var rows []imageRow
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		g.Expect(f).To(HaveLen(4), "hack/images.txt: %q", line)
		g.Expect(f[3]).To(BeElementOf("release", "dev"), "hack/images.txt: %q", line)
		rows = append(rows, imageRow{f[0], f[1], f[2], f[3]})
	}
	g.Expect(rows).NotTo(BeEmpty())
	return rows
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
