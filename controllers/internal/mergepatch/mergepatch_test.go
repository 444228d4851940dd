package mergepatch

import (
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// patchOf decodes what p sends for obj.
func patchOf(g Gomega, p client.Patch, obj client.Object) map[string]any {
	data, err := p.Data(obj)
	g.Expect(err).NotTo(HaveOccurred())
	var m map[string]any
	g.Expect(json.Unmarshal(data, &m)).To(Succeed(), "%s", data)
	return m
}

// A status write sends what client.MergeFrom sends for a change of the status: set, changed and
// cleared fields, conditions, and a notification recorded.
func TestStatusPatchIsMergeFromOfTheStatus(t *testing.T) {
	read := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "refund-1", ResourceVersion: "7",
		Finalizers: []string{tg.Finalizer}, Annotations: map[string]string{"a": "b"}}}
	read.Spec.Tool = "issue_refund"
	read.Status.RequestID = "req-1"
	read.Status.DeadlineAt = &metav1.Time{Time: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	setPhase(read, tg.PhaseAwaitingApproval, tg.ReasonAwaitingApproval, "waiting")
	for name, change := range map[string]func(tc *tg.ToolCall){
		"phase and conditions": func(tc *tg.ToolCall) {
			tc.Status.JobName = "refund-1-x"
			setPhase(tc, tg.PhaseRunning, tg.ReasonJobCreated, "running")
		},
		"a field cleared": func(tc *tg.ToolCall) { tc.Status.DeadlineAt = nil },
		"a notification recorded": func(tc *tg.ToolCall) {
			tc.Status.Notification = &tg.Notification{ID: "msg_1", ReceivedAt: metav1.NewTime(time.Date(2026, 12, 5, 12, 1, 0, 0, time.UTC))}
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			written := read.DeepCopy()
			change(written)
			g.Expect(patchOf(g, Status(*read.Status.DeepCopy()), written)).
				To(Equal(patchOf(g, client.MergeFrom(read), written)))
		})
	}
	g := NewWithT(t)
	_, err := Status(read.Status).Data(&tg.Tool{})
	g.Expect(err).To(MatchError(ContainSubstring("applied to a *v1alpha1.Tool")))
}

// A finalizer removal sends what client.MergeFromWithOptimisticLock sends: the finalizers left (none:
// null) and the resourceVersion they were read at.
func TestFinalizersPatchIsMergeFromWithOptimisticLock(t *testing.T) {
	for name, finalizers := range map[string][]string{
		"one of two left": {"example.com/other", tg.Finalizer},
		"none left":       {tg.Finalizer},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			read := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "refund-1", ResourceVersion: "7", Finalizers: finalizers}}
			read.Status.RequestID = "req-1"
			written := read.DeepCopy()
			controllerutil.RemoveFinalizer(written, tg.Finalizer)
			p, err := Finalizers(written)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(patchOf(g, p, written)).
				To(Equal(patchOf(g, client.MergeFromWithOptions(read, client.MergeFromWithOptimisticLock{}), written)))
		})
	}
}

// setPhase changes what a step's status write changes: the phase, its reason and message, and a
// condition derived from them.
func setPhase(tc *tg.ToolCall, phase tg.ToolCallPhase, reason, message string) {
	tc.Status.Phase, tc.Status.Reason, tc.Status.Message = phase, reason, message
	meta.SetStatusCondition(&tc.Status.Conditions, metav1.Condition{Type: tg.ConditionReady, Status: metav1.ConditionFalse,
		Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))})
}
