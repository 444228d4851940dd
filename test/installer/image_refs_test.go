package installer

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// appVersion is the chart's appVersion: the tag the Makefile, dist/install.yaml and the chart's
// defaults give every image.
func appVersion(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "dist", "chart", "Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var chart struct{ AppVersion string }
	g.Expect(yaml.Unmarshal(data, &chart)).To(Succeed())
	g.Expect(chart.AppVersion).NotTo(BeEmpty(), "dist/chart/Chart.yaml has an appVersion")
	return chart.AppVersion
}

// latestTag is an image reference that names the tag latest (or none, which means latest), in an
// `image:` field or a kustomize `newTag:`.
var latestTag = regexp.MustCompile(`(?:^|\s)(?:image:\s*["']?[^\s"'@]+:latest["']?\s*$|newTag:\s*["']?latest["']?\s*$)`)

// No manifest names `latest`: every image in dist/ and config/ names a version (the chart's
// appVersion for Toolgate's own), so that what runs is what was released, and the Makefile's TAG
// follows the chart.
func TestNoManifestNamesLatest(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	var found []string
	for _, dir := range []string{"dist", "config"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			lines := bufio.NewScanner(bytes.NewReader(data))
			lines.Buffer(nil, 1<<20)
			for n := 1; lines.Scan(); n++ {
				if l := lines.Text(); latestTag.MatchString(l) {
					found = append(found, rel+":"+strconv.Itoa(n)+": "+strings.TrimSpace(l))
				}
			}
			return lines.Err()
		})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(found).To(BeEmpty(), "name a version tag (the chart's appVersion, %s) instead of latest", appVersion(t))

	install, err := os.ReadFile(filepath.Join(root, "dist", "install.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(install)).To(ContainSubstring("image: toolgate:"+appVersion(t)+"\n"), "dist/install.yaml runs the chart's appVersion")
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(makefile)).To(MatchRegexp(`(?m)^TAG \?= \$\(shell sed .*appVersion.* dist/chart/Chart\.yaml\)$`), "the Makefile's TAG defaults to the chart's appVersion")
}

// The finder above finds what it must: a tag latest in an image field or newTag, quoted or not.
func TestLatestTagFinder(t *testing.T) {
	g := NewWithT(t)
	for _, l := range []string{`        image: toolgate:latest`, `  image: "registry.example.com/toolgate:latest"`, `  newTag: latest`, `- image: x/y:latest `} {
		g.Expect(latestTag.MatchString(l)).To(BeTrue(), l)
	}
	for _, l := range []string{`        image: toolgate:0.1.0`, `  newTag: 0.1.0`, `  Servers should convert recognized schemas to the latest internal value`, `violates PodSecurity "restricted:latest"`} {
		g.Expect(latestTag.MatchString(l)).To(BeFalse(), l)
	}
}

// image.digest and mcpGateway.image.digest pin the images: repository@digest, whatever the tag; the
// schema takes only sha256:<64 hex digits> and names the value it refuses.
func TestChartImageDigests(t *testing.T) {
	g := NewWithT(t)
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	r := render(t, `
image: {repository: registry.example.com/toolgate/toolgate, tag: "9.9.9", digest: "`+digest+`"}
imagePullSecrets: [{name: regcred}]
mcpGateway: {enabled: true, callers: [agent], image: {repository: registry.example.com/toolgate/toolgate-mcp, digest: "`+digest+`"}}`)
	d, c := managerContainer(g, r)
	g.Expect(c.Image).To(Equal("registry.example.com/toolgate/toolgate@" + digest))
	g.Expect(d.Spec.Template.Spec.ImagePullSecrets).To(HaveLen(1))
	gw := as[appsv1.Deployment](g, r, "Deployment "+release+"/toolgate-mcp")
	g.Expect(gw.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.example.com/toolgate/toolgate-mcp@" + digest))
	g.Expect(gw.Spec.Template.Spec.ImagePullSecrets).To(HaveLen(1))

	// Without a digest, the tag; without a tag, the chart's appVersion.
	_, c = managerContainer(g, render(t, `image: {repository: registry.example.com/toolgate/toolgate}`))
	g.Expect(c.Image).To(Equal("registry.example.com/toolgate/toolgate:" + appVersion(t)))

	for values, path := range map[string]string{
		`image: {repository: toolgate, digest: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`: "/image/digest",
		`image: {repository: toolgate, digest: "sha256:ABC"}`:                                                       "/image/digest",
		`image: {repository: toolgate, digest: ""}`:                                                                 "/image/digest",
		`mcpGateway: {image: {repository: toolgate-mcp, digest: "sha512:00"}}`:                                      "/mcpGateway/image/digest",
	} {
		_, err := renderWith(t, values)
		g.Expect(err).To(MatchError(ContainSubstring(path)), values)
	}
}
