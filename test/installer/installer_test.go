// Package installer checks the ways users install Toolgate: dist/install.yaml must be what
// `make build-installer` writes from config/default; the Helm chart under dist/chart, rendered by
// Helm's own engine, must install the same CRDs, RBAC and policies and a manager that runs as the
// manifest's does, and each of its values must do what values.yaml says; the Dockerfile builds every
// image from its context.
package installer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"toolgate.dev/toolgate/test/testenv"
)

const defaultNamespace = "toolgate-system"

// TestInstallYAMLIsUpToDate builds config/default with the default images, as `make build-installer`
// does (the Makefile's defaults: IMG is toolgate tagged with the chart's appVersion, MCP_CALL_IMG
// mcp-call with the same tag, the manager's --mcp-executor-image), and requires the committed
// dist/install.yaml to hold exactly those objects.
func TestInstallYAMLIsUpToDate(t *testing.T) {
	g := gomega.NewWithT(t)
	root := repoRoot(t)

	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
		"resources:\n- %s\nimages:\n- name: controller\n  newName: toolgate\n  newTag: %q\n"+
		"patches:\n- target: {kind: Deployment, name: toolgate-controller-manager}\n  patch: |-\n"+
		"    - {op: add, path: /spec/template/spec/containers/0/args/-, value: \"--mcp-executor-image=%s\"}\n", rel, appVersion(t), defaultExecutorImage(t))
	g.Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600)).To(gomega.Succeed())

	built := kustomize(t, overlay)

	committed, err := os.ReadFile(filepath.Join(root, "dist", "install.yaml"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(objectsByKey(t, committed)).To(gomega.Equal(objectsByKey(t, built)),
		"dist/install.yaml differs from config/default: run `make build-installer`")
}

// kustomize builds the kustomization in dir with kubectl's kustomize ($KUBECTL, default kubectl).
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = "kubectl"
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	built, err := cmd.Output()
	gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred(), "kubectl kustomize (set KUBECTL to the kubectl to use): %s", stderr.String())
	return built
}

// renderChart loads dist/chart and renders it as `helm template` would for an install into
// namespace, returning all rendered manifests as one multi-document YAML stream, or the error Helm
// gives (the values schema's, a template's).
func renderChart(t *testing.T, root, namespace string, values map[string]any) ([]byte, error) {
	t.Helper()
	g := gomega.NewWithT(t)
	chrt, err := loader.Load(filepath.Join(root, "dist", "chart"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	if values == nil {
		values = map[string]any{}
	}
	renderValues, err := chartutil.ToRenderValues(chrt, values,
		common.ReleaseOptions{Name: "toolgate", Namespace: namespace, IsInstall: true}, newestKubernetes())
	if err != nil {
		return nil, err
	}
	rendered, err := engine.Render(chrt, renderValues)
	if err != nil {
		return nil, err
	}
	g.Expect(rendered).NotTo(gomega.BeEmpty())

	names := make([]string, 0, len(rendered))
	for name := range rendered {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue // printed after an install, not applied
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var out bytes.Buffer
	for _, name := range names {
		out.WriteString("---\n")
		out.WriteString(rendered[name])
		out.WriteString("\n")
	}
	return out.Bytes(), nil
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

// newestKubernetes is what Helm learns from a cluster of the newest supported Kubernetes version, which
// serves MutatingAdmissionPolicy v1 (Helm's defaults, for a client-only render, name an old version).
func newestKubernetes() *common.Capabilities {
	caps := common.DefaultCapabilities.Copy()
	kv, err := common.ParseKubeVersion(fmt.Sprintf("v1.%d.0", testenv.NewestKubernetesMinor))
	if err != nil {
		panic(err)
	}
	caps.KubeVersion = *kv
	caps.APIVersions = append(slices.Clone(caps.APIVersions),
		"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding")
	return caps
}

// defaultExecutorImage is the manager's --mcp-executor-image in dist/install.yaml: the Makefile's
// default MCP_CALL_IMG, mcp-call tagged with the chart's appVersion.
func defaultExecutorImage(t *testing.T) string {
	return "mcp-call:" + appVersion(t)
}
