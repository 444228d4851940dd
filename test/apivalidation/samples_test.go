package apivalidation_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"toolgate.dev/toolgate/test/testenv"
)

// The shipped samples are accepted by the real apiserver as they are.
func TestSamplesAreAccepted(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	// The Tool first: a ToolCall names it.
	for _, file := range []string{"v1alpha1_tool.yaml", "v1alpha1_toolcall.yaml", "v1alpha1_approvalprovider.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "config", "samples", file))
		g.Expect(err).NotTo(HaveOccurred())
		obj := &unstructured.Unstructured{}
		g.Expect(yaml.Unmarshal(data, &obj.Object)).To(Succeed(), file)
		obj.SetNamespace(ns)
		g.Expect(k8s.Create(context.Background(), obj)).To(Succeed(), file)
	}
}

// A Job template the Go types cannot decode (a command item that YAML read as a map) is refused when
// the Tool is written, so one bad Tool cannot break the controller's view of its namespace.
func TestMalformedJobTemplateIsRefused(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	tool := validToolU(ns, "malformed")
	containers, _, _ := unstructured.NestedSlice(tool.Object, "spec", "jobTemplate", "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["command"] = []any{"/bin/sh", "-c", map[string]any{"echo refund for call ${TOOLCALL_NAME}": "${TOOL_ARGUMENTS}"}}
	g.Expect(unstructured.SetNestedSlice(tool.Object, containers, "spec", "jobTemplate", "spec", "template", "spec", "containers")).To(Succeed())
	expectRefused(g, k8s.Create(context.Background(), tool), "spec.jobTemplate.spec.template.spec.containers[0].command[2]", "must be of type string")
}
