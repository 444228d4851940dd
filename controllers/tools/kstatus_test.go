package tools_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// A Tool whose rules compile is Current for kstatus and Healthy for Argo CD; rules that do not
// compile make it Failed (Stalled) and Degraded, with the compiler's message; fixing them makes it
// Current again. Each change of Ready is one event on the Tool; a new generation that changes
// nothing about Ready emits none.
func TestKstatusOfATool(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	tool := h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	key := client.ObjectKeyFromObject(tool)
	h.WaitKstatus("Tool", key, kstatus.CurrentStatus, "")
	h.ExpectEvents(h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 1})

	g.Expect(h.K8s.Get(ctx, key, tool)).To(Succeed())
	tool.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "small", Expression: "amout < 5000", Action: tg.ActionApprove}}}
	g.Expect(h.K8s.Update(ctx, tool)).To(Succeed())
	h.WaitKstatus("Tool", key, kstatus.FailedStatus, "spec.approval.rules[0] (small): expression does not compile")
	h.ExpectEvents(h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 1, "InvalidApprovalRules/Warning": 1})

	// Another generation with the same problem: checked again, reported no more.
	g.Expect(h.K8s.Get(ctx, key, tool)).To(Succeed())
	tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: time.Minute}
	g.Expect(h.K8s.Update(ctx, tool)).To(Succeed())
	h.WaitChecked(tool, func() []metav1.Condition { return tool.Status.Conditions })
	h.WaitKstatus("Tool", key, kstatus.FailedStatus, "")
	h.ExpectEvents(h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 1, "InvalidApprovalRules/Warning": 1})

	g.Expect(h.K8s.Get(ctx, key, tool)).To(Succeed())
	tool.Spec.Approval.Rules[0].Expression = "arguments.amount < 5000"
	g.Expect(h.K8s.Update(ctx, tool)).To(Succeed())
	h.WaitKstatus("Tool", key, kstatus.CurrentStatus, "")
	h.ExpectEvents(h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 2, "InvalidApprovalRules/Warning": 1})
}
