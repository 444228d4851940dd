// Package installer checks the two ways users install Toolgate: dist/install.yaml must be what
// `make build-installer` writes from config/default, and the Helm chart under dist/chart, rendered by
// Helm's own engine, must produce the same objects.
package installer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"toolgate.dev/toolgate/test/testenv"
)

// defaultImage is the image dist/install.yaml is committed with (the Makefile's default IMG) and the
// chart's default values.
const (
	defaultImage     = "toolgate:latest"
	defaultNamespace = "toolgate-system"
)

// TestInstallYAMLIsUpToDate builds config/default with the default image, as `make build-installer`
// does, and requires the committed dist/install.yaml to hold exactly those objects.
func TestInstallYAMLIsUpToDate(t *testing.T) {
	g := gomega.NewWithT(t)
	root := repoRoot(t)

	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
		"resources:\n- %s\nimages:\n- name: controller\n  newName: toolgate\n  newTag: latest\n", rel)
	g.Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600)).To(gomega.Succeed())

	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = "kubectl"
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), kubectl, "kustomize", overlay)
	cmd.Stderr = &stderr
	built, err := cmd.Output()
	g.Expect(err).NotTo(gomega.HaveOccurred(), "kubectl kustomize config/default (set KUBECTL to the kubectl to use): %s", stderr.String())

	committed, err := os.ReadFile(filepath.Join(root, "dist", "install.yaml"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(objectsByKey(t, committed)).To(gomega.Equal(objectsByKey(t, built)),
		"dist/install.yaml differs from config/default: run `make build-installer`")
}

// TestChartRendersInstallYAML renders dist/chart with its default values through Helm's engine and
// requires the same objects as dist/install.yaml, field for field.
func TestChartRendersInstallYAML(t *testing.T) {
	g := gomega.NewWithT(t)
	root := repoRoot(t)

	committed, err := os.ReadFile(filepath.Join(root, "dist", "install.yaml"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	want := objectsByKey(t, committed)
	g.Expect(want).To(gomega.HaveLen(countDocuments(committed)), "dist/install.yaml holds duplicate objects")
	g.Expect(len(want)).To(gomega.BeNumerically(">", 10))

	got := objectsByKey(t, renderChart(t, root, nil))
	g.Expect(sortedKeys(got)).To(gomega.Equal(sortedKeys(want)), "the chart renders other objects than dist/install.yaml: run `make build-installer`")
	for key, obj := range want {
		g.Expect(got[key]).To(gomega.Equal(obj), "%s differs between the chart and dist/install.yaml", key)
	}
}

// TestChartValues renders the chart with another image, namespace and provider URL: the manager runs
// that image and reads that URL, and every namespaced object (and the Namespace itself) moves.
func TestChartValues(t *testing.T) {
	g := gomega.NewWithT(t)
	root := repoRoot(t)

	defaults := objectsByKey(t, renderChart(t, root, nil))
	custom := objectsByKey(t, renderChart(t, root, map[string]any{
		"image":     map[string]any{"repository": "registry.example.com/toolgate", "tag": "v1.2.3"},
		"namespace": "agents-gate",
		"provider":  map[string]any{"url": "https://approvals.internal.example:8443/base"},
	}))
	g.Expect(custom).To(gomega.HaveLen(len(defaults)))

	// The provider URL reaches the manager through a ConfigMap whose name changes with it, so that a
	// new URL rolls the Deployment.
	defaultConfig, defaultURL := providerConfig(g, defaults)
	customConfig, customURL := providerConfig(g, custom)
	g.Expect(defaultURL).To(gomega.Equal("https://approvals.example.com"))
	g.Expect(customURL).To(gomega.Equal("https://approvals.internal.example:8443/base"))
	g.Expect(customConfig).NotTo(gomega.Equal(defaultConfig))
	g.Expect(customConfig).To(gomega.MatchRegexp(`^toolgate-provider-config-[0-9a-f]{10}$`))

	moved := 0
	for _, obj := range custom {
		meta := obj["metadata"].(map[string]any)
		g.Expect(meta["namespace"]).NotTo(gomega.Equal(defaultNamespace), "%s/%s", obj["kind"], meta["name"])
		if obj["kind"] == "Namespace" {
			g.Expect(meta["name"]).To(gomega.Equal("agents-gate"))
		}
		if meta["namespace"] == "agents-gate" {
			moved++
		}
		if obj["kind"] == "Deployment" {
			containers := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
			g.Expect(containers[0].(map[string]any)["image"]).To(gomega.Equal("registry.example.com/toolgate:v1.2.3"))
		}
	}
	g.Expect(moved).To(gomega.BeNumerically(">", 5))

	var deployment map[string]any
	for _, obj := range defaults {
		if obj["kind"] == "Deployment" {
			deployment = obj
		}
	}
	g.Expect(deployment).NotTo(gomega.BeNil())
	containers := deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	g.Expect(containers[0].(map[string]any)["image"]).To(gomega.Equal(defaultImage))
}

// providerConfig returns the name of the ConfigMap the manager reads its provider URL from, after
// checking that it is one of the rendered objects, and the URL it holds.
func providerConfig(g gomega.Gomega, objects map[string]map[string]any) (name, url string) {
	for _, obj := range objects {
		if obj["kind"] != "Deployment" {
			continue
		}
		containers := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
		for _, env := range containers[0].(map[string]any)["env"].([]any) {
			from, _ := env.(map[string]any)["valueFrom"].(map[string]any)
			if ref, ok := from["configMapKeyRef"].(map[string]any); ok && ref["key"] == "url" {
				name = ref["name"].(string)
			}
		}
	}
	g.Expect(name).NotTo(gomega.BeEmpty(), "the manager reads its provider URL from a ConfigMap")
	for _, obj := range objects {
		if obj["kind"] == "ConfigMap" && obj["metadata"].(map[string]any)["name"] == name {
			return name, obj["data"].(map[string]any)["url"].(string)
		}
	}
	g.Expect(name).To(gomega.BeEmpty(), "no ConfigMap %s is rendered", name)
	return "", ""
}

// renderChart loads dist/chart and renders it as `helm template` would for an install into the
// chart's namespace, returning all rendered manifests as one multi-document YAML stream.
func renderChart(t *testing.T, root string, values map[string]any) []byte {
	t.Helper()
	g := gomega.NewWithT(t)
	chrt, err := loader.Load(filepath.Join(root, "dist", "chart"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	if values == nil {
		values = map[string]any{}
	}
	renderValues, err := chartutil.ToRenderValues(chrt, values,
		common.ReleaseOptions{Name: "toolgate", Namespace: defaultNamespace, IsInstall: true}, common.DefaultCapabilities)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	rendered, err := engine.Render(chrt, renderValues)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(rendered).NotTo(gomega.BeEmpty())

	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	var out bytes.Buffer
	for _, name := range names {
		out.WriteString("---\n")
		out.WriteString(rendered[name])
		out.WriteString("\n")
	}
	return out.Bytes()
}

// objectsByKey parses a multi-document YAML stream into objects keyed by apiVersion, kind, namespace
// and name.
func objectsByKey(t *testing.T, stream []byte) map[string]map[string]any {
	t.Helper()
	g := gomega.NewWithT(t)
	objects := map[string]map[string]any{}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var obj map[string]any
		err := decoder.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(gomega.HaveOccurred())
		if len(obj) == 0 {
			continue
		}
		meta, ok := obj["metadata"].(map[string]any)
		g.Expect(ok).To(gomega.BeTrue(), "an object without metadata: %v", obj)
		key := fmt.Sprintf("%v %v %v/%v", obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
		objects[key] = obj
	}
	return objects
}

func countDocuments(stream []byte) int {
	return bytes.Count(append([]byte("\n"), stream...), []byte("\n---\n")) + 1
}

func sortedKeys(objects map[string]map[string]any) []string {
	keys := make([]string, 0, len(objects))
	for key := range objects {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

// repoRoot is the checkout's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred())
	return root
}
