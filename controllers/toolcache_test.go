package controllers

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

// One cache serves both controllers: a generation's approval rules are compiled once, and a deleted
// Tool is forgotten with everything derived from it.
func TestToolCacheCompilesRulesOncePerGenerationAndForgetsDeletedTools(t *testing.T) {
	g := NewWithT(t)
	c, err := newToolCache(policy.DefaultLimits())
	g.Expect(err).NotTo(HaveOccurred())
	tool := &tg.Tool{}
	tool.UID, tool.Generation = "tool-1", 1
	tool.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "small", Action: tg.ActionApprove, Expression: "arguments.amount < 100"}}}

	first, err := c.rules(tool)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Len()).To(Equal(1))
	again, _ := c.rules(tool)
	g.Expect(again).To(BeIdenticalTo(first), "compiled once per generation")
	c.templatePassed(tool)

	c.forget(tool.UID)
	g.Expect(c.tools).NotTo(HaveKey(tool.UID))
	g.Expect(c.templateChecked(tool)).To(BeFalse(), "a Tool created again under the same UID starts afresh")
	next, _ := c.rules(tool)
	g.Expect(next).NotTo(BeIdenticalTo(first))
}
