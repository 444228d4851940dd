package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// What is derived from a Tool is kept for its generation only: an edited Tool is compiled and
// dry-run again.
func TestToolCacheFollowsTheToolsGeneration(t *testing.T) {
	g := NewWithT(t)
	tool := &tg.Tool{}
	tool.UID, tool.Generation, tool.Name, tool.Namespace = "tool-1", 1, "refund", "payments"
	tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(`{"type":"object"}`)}
	var c toolCache

	first, err := c.schema(tool)
	g.Expect(err).NotTo(HaveOccurred())
	again, _ := c.schema(tool)
	g.Expect(again).To(BeIdenticalTo(first), "compiled once per generation")
	g.Expect(c.templateChecked(tool)).To(BeFalse())
	c.templatePassed(tool)
	g.Expect(c.templateChecked(tool)).To(BeTrue())

	tool.Generation = 2
	g.Expect(c.templateChecked(tool)).To(BeFalse(), "a new generation is dry-run again")
	next, err := c.schema(tool)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).NotTo(BeIdenticalTo(first), "a new generation is compiled again")
}
