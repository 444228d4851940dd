package controllers

import (
	"testing"

	. "github.com/onsi/gomega"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

func toolCallAt(phase tg.ToolCallPhase, finalizer bool) *tg.ToolCall {
	tc := &tg.ToolCall{}
	tc.UID = "uid-1"
	tc.Status.Phase = phase
	if finalizer {
		tc.Finalizers = []string{tg.Finalizer}
	}
	return tc
}

// Each of the controller's writes moves a ToolCall to a later stage.
func TestStageOrdersTheControllersWrites(t *testing.T) {
	g := NewWithT(t)
	order := []*tg.ToolCall{
		toolCallAt("", false),
		toolCallAt("", true),
		toolCallAt(tg.PhaseAwaitingApproval, true),
		toolCallAt(tg.PhaseRunning, true),
		toolCallAt(tg.PhaseRunning, false),
		toolCallAt(tg.PhaseSucceeded, true),
		toolCallAt(tg.PhaseSucceeded, false),
	}
	for i := 1; i < len(order); i++ {
		g.Expect(stage(order[i])).To(BeNumerically(">", stage(order[i-1])), "step %d", i)
	}
	g.Expect(stage(toolCallAt(tg.PhaseDenied, false))).To(Equal(stage(toolCallAt(tg.PhaseSucceeded, false))))
}

func TestWriteLogDetectsAStaleRead(t *testing.T) {
	g := NewWithT(t)
	var l writeLog
	g.Expect(l.behind(toolCallAt("", false))).To(BeFalse(), "nothing written yet")

	l.wrote(toolCallAt(tg.PhaseAwaitingApproval, true))
	g.Expect(l.behind(toolCallAt("", true))).To(BeTrue(), "the cache shows the acceptance, not the status write")
	g.Expect(l.behind(toolCallAt(tg.PhaseAwaitingApproval, true))).To(BeFalse(), "caught up")
	g.Expect(l.stages).To(BeEmpty(), "an entry goes once the cache caught up")

	l.wrote(toolCallAt(tg.PhaseRunning, false))
	l.forget("uid-1")
	g.Expect(l.behind(toolCallAt(tg.PhaseRunning, true))).To(BeFalse(), "forgotten on deletion")
}
