package readiness_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/test/argohealth"
)

// object is a Tool or provider object of kind at generation 2 whose status the manager wrote for that generation
// with Ready's reason and message and p.
func object(kind string, p readiness.Progress, reason, message string) statused {
	var obj statused
	switch kind {
	case "Tool":
		t := &tg.Tool{}
		readiness.Set(&t.Status.Conditions, 2, p, reason, message)
		t.Status.ObservedGeneration = 2
		obj = t
	case tg.KindApprovalProvider:
		ap := &tg.ApprovalProvider{}
		readiness.Set(&ap.Status.Conditions, 2, p, reason, message)
		ap.Status.ObservedGeneration = 2
		obj = ap
	case tg.KindMCPServer:
		ms := &tg.MCPServer{}
		readiness.Set(&ms.Status.Conditions, 2, p, reason, message)
		ms.Status.ObservedGeneration = 2
		obj = ms
	default:
		cp := &tg.ClusterApprovalProvider{}
		readiness.Set(&cp.Status.Conditions, 2, p, reason, message)
		cp.Status.ObservedGeneration = 2
		obj = cp
	}
	obj.GetObjectKind().SetGroupVersionKind(tg.GroupVersion.WithKind(kind))
	obj.SetName("default")
	obj.SetGeneration(2)
	return obj
}

type statused interface {
	runtime.Object
	SetName(string)
	SetGeneration(int64)
}

// Every reason of the Ready condition of Tools and provider objects reads, with the conditions Set
// writes for it, as its progress says: kstatus (Flux's wait, kapply, Config Sync) Current,
// InProgress or Failed, and Argo CD's health check of config/argocd Healthy, Progressing or Degraded,
// with Ready's reason and message.
func TestEveryReadyReasonReadsAsItsProgress(t *testing.T) {
	rows := controllers.Readiness()
	NewWithT(t).Expect(rows).To(ContainElements(
		readiness.Row{Kind: "Tool", Reason: tg.ReasonInvalidApprovalRules, Progress: readiness.Stalled},
		readiness.Row{Kind: tg.KindClusterApprovalProvider, Reason: tg.ReasonUnreachable, Progress: readiness.Retrying},
		readiness.Row{Kind: tg.KindApprovalProvider, Reason: tg.ReasonReachable, Progress: readiness.Usable}))
	for _, row := range rows {
		t.Run(row.Kind+"/"+row.Reason, func(t *testing.T) {
			g := NewWithT(t)
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(object(row.Kind, row.Progress, row.Reason, "The message."))
			g.Expect(err).NotTo(HaveOccurred())
			res, err := kstatus.Compute(&unstructured.Unstructured{Object: raw})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(res.Status)).To(Equal(row.Progress.Kstatus()))
			if row.Progress != readiness.Usable {
				g.Expect(res.Message).To(Equal("The message."), "kstatus shows Ready's message")
			}

			script, err := argohealth.Script(row.Kind)
			g.Expect(err).NotTo(HaveOccurred())
			health, err := argohealth.Run(script, raw)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(health).To(Equal(argohealth.Status{Status: row.Progress.ArgoCD(), Message: row.Reason + ": The message."}))
		})
	}
}

// Set writes the three conditions for the generation, each with Ready's reason, never Reconciling
// and Stalled True together; set again with the same values it changes nothing (no status write),
// and a new status moves lastTransitionTime of the conditions whose status changed only.
func TestSetWritesTheThreeConditionsWithoutChurn(t *testing.T) {
	g := NewWithT(t)
	for _, p := range []readiness.Progress{readiness.Usable, readiness.Retrying, readiness.Stalled} {
		var conds []metav1.Condition
		readiness.Set(&conds, 3, p, "Why", "What.")
		g.Expect(conds).To(HaveLen(3))
		for _, c := range conds {
			g.Expect(c.Reason).To(Equal("Why"))
			g.Expect(c.ObservedGeneration).To(BeEquivalentTo(3))
		}
		g.Expect(meta.IsStatusConditionTrue(conds, tg.ConditionReady)).To(Equal(p == readiness.Usable), string(p))
		g.Expect(meta.IsStatusConditionTrue(conds, tg.ConditionReconciling)).To(Equal(p == readiness.Retrying), string(p))
		g.Expect(meta.IsStatusConditionTrue(conds, tg.ConditionStalled)).To(Equal(p == readiness.Stalled), string(p))
		again := append([]metav1.Condition(nil), conds...)
		readiness.Set(&again, 3, p, "Why", "What.")
		g.Expect(again).To(Equal(conds), string(p))
	}

	var conds []metav1.Condition
	readiness.Set(&conds, 1, readiness.Stalled, "CredentialUnavailable", "No Secret.")
	past := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for i := range conds {
		conds[i].LastTransitionTime = past
	}
	readiness.Set(&conds, 1, readiness.Stalled, "CredentialRejected", "Refused.")
	for _, c := range conds {
		g.Expect(c.LastTransitionTime).To(Equal(past), "%s kept its status", c.Type)
	}
	readiness.Set(&conds, 1, readiness.Usable, "Reachable", "Read.")
	g.Expect(meta.FindStatusCondition(conds, tg.ConditionReady).LastTransitionTime).NotTo(Equal(past))
	g.Expect(meta.FindStatusCondition(conds, tg.ConditionStalled).LastTransitionTime).NotTo(Equal(past))
	g.Expect(meta.FindStatusCondition(conds, tg.ConditionReconciling).LastTransitionTime).To(Equal(past), "Reconciling stayed False")
}

// Report emits one event when Ready appears or changes status or reason, with Ready's reason and
// message, Normal when usable and Warning otherwise; none when a check finds the same again, even
// with another message.
func TestReportEmitsOnAChangeOfReadyOnly(t *testing.T) {
	g := NewWithT(t)
	rec := events.NewFakeRecorder(10)
	obj := &tg.ApprovalProvider{}
	set := func(p readiness.Progress, reason, message string) []metav1.Condition {
		var c []metav1.Condition
		readiness.Set(&c, 1, p, reason, message)
		return c
	}
	unavailable := set(readiness.Stalled, tg.ReasonCredentialUnavailable, "No Secret a.")
	readiness.Report(rec, obj, nil, unavailable, readiness.Stalled)
	g.Expect(rec.Events).To(Receive(Equal("Warning CredentialUnavailable No Secret a.")))

	readiness.Report(rec, obj, unavailable, set(readiness.Stalled, tg.ReasonCredentialUnavailable, "No Secret b."), readiness.Stalled)
	g.Expect(rec.Events).NotTo(Receive(), "the same reason with another message is no change")

	rejected := set(readiness.Stalled, tg.ReasonCredentialRejected, "Refused.")
	readiness.Report(rec, obj, unavailable, rejected, readiness.Stalled)
	g.Expect(rec.Events).To(Receive(Equal("Warning CredentialRejected Refused.")))

	readiness.Report(rec, obj, rejected, set(readiness.Usable, tg.ReasonReachable, "Read."), readiness.Usable)
	g.Expect(rec.Events).To(Receive(Equal("Normal Reachable Read.")))

	readiness.Report(rec, obj, nil, nil, readiness.Usable)
	g.Expect(rec.Events).NotTo(Receive(), "no Ready condition, nothing to report")
}
