package toolcalls

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
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

// kstatus, the library Flux's wait, kapply and Config Sync read resources with, over a ToolCall in
// every row of the outcome table: a call under way is InProgress, a succeeded one Current, and every
// other outcome (the tool did not run, or it failed) Failed, never Current.
func TestKstatusFollowsEveryOutcome(t *testing.T) {
	for _, row := range lifecycle.Rows() {
		t.Run(string(row.Phase)+"/"+row.Reason, func(t *testing.T) {
			g := NewWithT(t)
			tc := &tg.ToolCall{}
			tc.APIVersion, tc.Kind = tg.GroupVersion.String(), "ToolCall"
			tc.Name, tc.Namespace, tc.Generation = "refund", "shop", 1
			tc.Status.JobName = "refund-1"
			setPhase(tc, row.Phase, row.Reason, "The message.")
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc)
			g.Expect(err).NotTo(HaveOccurred())
			res, err := kstatus.Compute(&unstructured.Unstructured{Object: raw})
			g.Expect(err).NotTo(HaveOccurred())
			switch {
			case !row.Phase.IsTerminal():
				g.Expect(res.Status).To(Equal(kstatus.InProgressStatus))
			case row.Phase == tg.PhaseSucceeded:
				g.Expect(res.Status).To(Equal(kstatus.CurrentStatus))
			default:
				g.Expect(res.Status).To(Equal(kstatus.FailedStatus))
				g.Expect(res.Message).To(Equal("The message."))
			}
		})
	}
}

// A ToolCall the controller has not written yet (no status) and one whose status describes an older
// generation are InProgress, never Current.
func TestKstatusBeforeTheControllerWrote(t *testing.T) {
	g := NewWithT(t)
	tc := &tg.ToolCall{}
	tc.APIVersion, tc.Kind = tg.GroupVersion.String(), "ToolCall"
	tc.Name, tc.Namespace, tc.Generation = "refund", "shop", 2
	setPhase(tc, tg.PhaseSucceeded, tg.ReasonJobSucceeded, "Done.")
	tc.Status.ObservedGeneration = 1
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc)
	g.Expect(err).NotTo(HaveOccurred())
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: raw})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(kstatus.InProgressStatus))
}
