package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// countingMapper counts the RESTMapping calls that reach it.
type countingMapper struct {
	meta.RESTMapper
	calls int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.calls++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

// A found mapping is answered again without asking; a kind not found, and a choice among versions,
// are asked every time; a caller changing its mapping does not change the next caller's.
func TestMappingsAreKept(t *testing.T) {
	g := NewWithT(t)
	gv := tg.GroupVersion
	defaults := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	defaults.Add(gv.WithKind("ToolCall"), meta.RESTScopeNamespace)
	under := &countingMapper{RESTMapper: defaults}
	m := &keptMappings{RESTMapper: under}
	toolCalls := schema.GroupKind{Group: gv.Group, Kind: "ToolCall"}

	first, err := m.RESTMapping(toolCalls, gv.Version)
	g.Expect(err).NotTo(HaveOccurred())
	first.Scope = meta.RESTScopeRoot
	second, err := m.RESTMapping(toolCalls, gv.Version)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second.Scope.Name()).To(Equal(meta.RESTScopeNameNamespace))
	g.Expect(second.Resource).To(Equal(gv.WithResource("toolcalls")))
	g.Expect(under.calls).To(Equal(1))

	for range 2 {
		_, err = m.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: "Unknown"}, gv.Version)
		g.Expect(meta.IsNoMatchError(err)).To(BeTrue(), "%v", err)
	}
	g.Expect(under.calls).To(Equal(3))

	for range 2 {
		_, err = m.RESTMapping(toolCalls, gv.Version, "v1")
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(under.calls).To(Equal(5))
}
