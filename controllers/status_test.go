package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Executed is True only when a Job was created: an approved call whose Job could not be created
// failed without running.
func TestExecutedFollowsTheJob(t *testing.T) {
	g := NewWithT(t)
	for _, c := range []struct {
		phase tg.ToolCallPhase
		job   string
		want  metav1.ConditionStatus
	}{
		{tg.PhaseRunning, "refund-1", metav1.ConditionTrue},
		{tg.PhaseSucceeded, "refund-1", metav1.ConditionTrue},
		{tg.PhaseFailed, "refund-1", metav1.ConditionTrue},
		{tg.PhaseFailed, "", metav1.ConditionFalse},
		{tg.PhaseDenied, "", metav1.ConditionFalse},
		{tg.PhaseAwaitingApproval, "", metav1.ConditionFalse},
	} {
		tc := &tg.ToolCall{}
		tc.Status.JobName = c.job
		setPhase(tc, c.phase, "Reason", "message")
		g.Expect(meta.FindStatusCondition(tc.Status.Conditions, tg.ConditionExecuted).Status).To(Equal(c.want), "%s job=%q", c.phase, c.job)
	}
}
