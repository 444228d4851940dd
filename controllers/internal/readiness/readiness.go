// Package readiness writes, on the objects whose Ready condition says whether they can be used (Tools, MCPServers,
// ApprovalProviders and ClusterApprovalProviders), Ready and the conditions kstatus reads besides it:
// Reconciling and Stalled, derived from what Ready's reason means (its Progress). Why an object cannot
// be used is an *Error (error.go), which carries that progress, the reason and the message; Writer
// (write.go) is the one status write of those kinds: it sets the three conditions from the Error, or
// Usable, patches the status once against the resourceVersion read, and reports a change of Ready as
// one event. ToolCalls derive theirs from their phase (controllers/toolcalls).
package readiness

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Progress is what a reason of the Ready condition says about the object: usable, not usable for a
// while (the manager retries), or not usable until someone changes its configuration.
type Progress string

const (
	// Usable: Ready True, Reconciling and Stalled False. kstatus: Current; Argo CD: Healthy.
	Usable Progress = "Usable"
	// Retrying: Ready False, Reconciling True while the manager tries again (an unreachable
	// provider), Stalled False. kstatus: InProgress; Argo CD: Progressing.
	Retrying Progress = "Retrying"
	// Stalled: Ready False, Reconciling False, Stalled True: a configuration error that only a change
	// fixes (rules that do not compile, a missing or refused credential). kstatus: Failed; Argo CD:
	// Degraded.
	Stalled Progress = "Stalled"
)

// Kstatus is the status kstatus computes for an object of the current generation in this state.
func (p Progress) Kstatus() string {
	switch p {
	case Usable:
		return "Current"
	case Retrying:
		return "InProgress"
	}
	return "Failed"
}

// ArgoCD is the health Toolgate's Argo CD health check gives an object of the current generation in
// this state.
func (p Progress) ArgoCD() string {
	switch p {
	case Usable:
		return "Healthy"
	case Retrying:
		return "Progressing"
	}
	return "Degraded"
}

// EventType is the type of the event that reports Ready changing to a reason with this progress.
func (p Progress) EventType() string {
	if p == Usable {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}

// Row is one reason of a kind's Ready condition with its progress. Each controller has a table of
// them (controllers.Readiness gives them all), which docs/gitops.md and docs/troubleshooting.md list.
type Row struct {
	Kind, Reason string
	Progress     Progress
}

// Messages of Reconciling and Stalled while they are False: short and fixed, so that a probe that
// finds the same again writes nothing. The True ones carry Ready's message, which kstatus shows.
const (
	checkedMessage   = "The manager checked this generation."
	noProblemMessage = "No configuration error."
)

// Set writes Ready (status from p, reason and message) and kstatus's Reconciling and Stalled, all
// three for generation gen and with Ready's reason. meta.SetStatusCondition keeps each one's
// lastTransitionTime while its status holds. A message over metav1.Condition's limit is truncated.
func Set(conds *[]metav1.Condition, gen int64, p Progress, reason, message string) {
	message = Truncate(message)
	set := func(typ string, status metav1.ConditionStatus, msg string) {
		meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	switch p {
	case Usable:
		set(tg.ConditionReady, metav1.ConditionTrue, message)
		set(tg.ConditionReconciling, metav1.ConditionFalse, checkedMessage)
		set(tg.ConditionStalled, metav1.ConditionFalse, noProblemMessage)
	case Retrying:
		set(tg.ConditionReady, metav1.ConditionFalse, message)
		set(tg.ConditionReconciling, metav1.ConditionTrue, message)
		set(tg.ConditionStalled, metav1.ConditionFalse, noProblemMessage)
	default:
		set(tg.ConditionReady, metav1.ConditionFalse, message)
		set(tg.ConditionReconciling, metav1.ConditionFalse, checkedMessage)
		set(tg.ConditionStalled, metav1.ConditionTrue, message)
	}
}

// maxMessage is metav1.Condition's limit of a message.
const maxMessage = 32768

// Truncate keeps a condition's message within metav1.Condition's limit.
func Truncate(message string) string {
	if len(message) > maxMessage {
		return message[:maxMessage-3] + "..."
	}
	return message
}

// Action is the action of the events Report emits.
const Action = "Check"

// Report emits one event on obj when its Ready condition changed between before and after (the
// conditions before and after a status write that succeeded): appeared, or changed status or reason.
// A check that finds the same again, even with another message, emits nothing. The event's type is
// p's, its reason Ready's reason and its note Ready's message.
func Report(rec events.EventRecorder, obj runtime.Object, before, after []metav1.Condition, p Progress) {
	now := meta.FindStatusCondition(after, tg.ConditionReady)
	if now == nil {
		return
	}
	if was := meta.FindStatusCondition(before, tg.ConditionReady); was != nil && was.Status == now.Status && was.Reason == now.Reason {
		return
	}
	rec.Eventf(obj, nil, p.EventType(), now.Reason, Action, "%s", now.Message)
}
