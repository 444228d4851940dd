package toolcache

import (
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/policy"
)

// What is derived from a Tool is kept for its generation only: an edited Tool is compiled and
// dry-run again.
func TestToolCacheFollowsTheToolsGeneration(t *testing.T) {
	g := NewWithT(t)
	tool := &tg.Tool{}
	tool.UID, tool.Generation, tool.Name, tool.Namespace = "tool-1", 1, "refund", "payments"
	tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(`{"type":"object"}`)}
	var c Cache

	first, err := c.Schema(tool)
	g.Expect(err).NotTo(HaveOccurred())
	again, _ := c.Schema(tool)
	g.Expect(again).To(BeIdenticalTo(first), "compiled once per generation")
	g.Expect(c.TemplateChecked(tool)).To(BeFalse())
	c.TemplatePassed(tool)
	g.Expect(c.TemplateChecked(tool)).To(BeTrue())

	tool.Generation = 2
	g.Expect(c.TemplateChecked(tool)).To(BeFalse(), "a new generation is dry-run again")
	next, err := c.Schema(tool)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).NotTo(BeIdenticalTo(first), "a new generation is compiled again")
}

// One cache serves both controllers: a generation's approval rules are compiled once, and a deleted
// Tool is forgotten with everything derived from it.
func TestToolCacheCompilesRulesOncePerGenerationAndForgetsDeletedTools(t *testing.T) {
	g := NewWithT(t)
	c, err := New(policy.DefaultLimits())
	g.Expect(err).NotTo(HaveOccurred())
	tool := &tg.Tool{}
	tool.UID, tool.Generation = "tool-1", 1
	tool.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "small", Action: tg.ActionApprove, Expression: "arguments.amount < 100"}}}

	first, err := c.Rules(tool)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Len()).To(Equal(1))
	again, _ := c.Rules(tool)
	g.Expect(again).To(BeIdenticalTo(first), "compiled once per generation")
	c.TemplatePassed(tool)

	c.Forget(tool.UID)
	g.Expect(c.tools).NotTo(HaveKey(tool.UID))
	g.Expect(c.TemplateChecked(tool)).To(BeFalse(), "a Tool created again under the same UID starts afresh")
	next, _ := c.Rules(tool)
	g.Expect(next).NotTo(BeIdenticalTo(first))
}
