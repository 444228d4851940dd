// Package tools is the Tool controller: it reports on each Tool whether its approval rules and its
// argumentsSchema compile, in ApprovalRulesReady and in the conditions kstatus reads (Ready,
// Reconciling, Stalled), and emits an event when Ready changes.
package tools

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/controllers/internal/toolcache"
)

// Reconciler reports on each Tool whether its approval rules compile (the ApprovalRulesReady
// condition, with the compiler's message when they do not) and whether calls to it can be accepted
// (Ready, with kstatus's Reconciling and Stalled: see readiness.Set), for the generation they
// describe.
type Reconciler struct {
	client.Client
	// Recorder emits the event of a change of Ready.
	Recorder events.EventRecorder

	// Tools is the per-Tool-generation cache shared with the ToolCall controller.
	Tools *toolcache.Cache
	// ClusterProvidersOff: the manager uses no ClusterApprovalProvider (--cluster-approval-providers=false),
	// so a Tool whose spec.providerRef names one cannot accept calls.
	ClusterProvidersOff bool
	// uids remembers each Tool's UID by name, so that a deleted Tool can be forgotten.
	uids sync.Map
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=tools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile compiles the Tool's rules and argumentsSchema (once per generation), and writes the
// conditions if they changed, in one patch, reporting a change of Ready once that patch is written
// (readiness.Writer).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tool := &tg.Tool{}
	if err := r.Get(ctx, req.NamespacedName, tool); err != nil {
		if uid, ok := r.uids.LoadAndDelete(req.NamespacedName); ok && client.IgnoreNotFound(err) == nil {
			r.Tools.Forget(uid.(types.UID))
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if old, loaded := r.uids.Swap(req.NamespacedName, tool.UID); loaded && old.(types.UID) != tool.UID {
		r.Tools.Forget(old.(types.UID)) // deleted and created again under the same name
	}
	w := readiness.Begin(tool, &tool.Status, &tool.Status.Conditions)
	rules := rulesCondition(tool, r.Tools)
	meta.SetStatusCondition(&tool.Status.Conditions, rules)
	message, problem := ready(tool, rules, r.Tools)
	if ref := tool.Spec.ProviderRef; problem == nil && r.ClusterProvidersOff && ref != nil && ref.Kind == tg.KindClusterApprovalProvider {
		problem = readiness.Stalledf(tg.ReasonClusterProvidersOff, "%s. Calls to this Tool end Rejected (%s) until an admin changes it.",
			providercache.ClusterProvidersOffMessage(ref.Name), tg.ReasonClusterProvidersOff)
	}
	tool.Status.ObservedGeneration = tool.Generation
	res, err := w.Write(ctx, r.Client, r.Recorder, problem, tg.ReasonSpecCompiled, message)
	if err != nil {
		return ctrl.Result{}, err
	}
	return res.RequeueAfter(0), nil
}

// Readiness is every reason of a Tool's Ready condition, with what it means for kstatus.
func Readiness() []readiness.Row {
	return []readiness.Row{
		{Kind: "Tool", Reason: tg.ReasonSpecCompiled, Progress: readiness.Usable},
		{Kind: "Tool", Reason: tg.ReasonInvalidApprovalRules, Progress: readiness.Stalled},
		{Kind: "Tool", Reason: tg.ReasonInvalidArgumentsSchema, Progress: readiness.Stalled},
		{Kind: "Tool", Reason: tg.ReasonClusterProvidersOff, Progress: readiness.Stalled},
		{Kind: "Tool", Reason: tg.ReasonInvalidPreview, Progress: readiness.Stalled},
	}
}

// ready is the Tool's Ready condition: its calls can be accepted when its approval rules (rules, the
// ApprovalRulesReady condition) and its argumentsSchema compile (nil, with the message of Ready);
// either one not compiling is a configuration error only a change of the Tool fixes (a Stalled
// *readiness.Error).
func ready(tool *tg.Tool, rules metav1.Condition, c *toolcache.Cache) (string, error) {
	schema := "No spec.argumentsSchema."
	if s := tool.Spec.ArgumentsSchema; s != nil && len(s.Raw) > 0 {
		schema = "spec.argumentsSchema compiled."
		if _, err := c.Schema(tool); err != nil {
			schema = "spec.argumentsSchema does not compile: " + err.Error() + ". Calls to this Tool end Rejected (InvalidTool) until an admin fixes it."
			if rules.Status == metav1.ConditionTrue {
				return "", readiness.Stalledf(tg.ReasonInvalidArgumentsSchema, "%s", schema)
			}
			return "", readiness.Stalledf(rules.Reason, "%s %s", rules.Message, schema)
		}
	}
	if rules.Status != metav1.ConditionTrue {
		return "", readiness.Stalledf(rules.Reason, "%s", rules.Message)
	}
	if tool.Spec.Preview != nil {
		if _, err := c.PreviewTemplate(tool); err != nil {
			return "", readiness.Stalledf(tg.ReasonInvalidPreview, "%s. Calls to this Tool end Rejected (InvalidTool) until an admin fixes it.", err.Error())
		}
		schema += " spec.preview is read: each call runs its preview before a human is asked."
	}
	return rules.Message + " " + schema, nil
}

// rulesCondition is the ApprovalRulesReady condition for the Tool's current generation.
func rulesCondition(tool *tg.Tool, c *toolcache.Cache) metav1.Condition {
	cond := metav1.Condition{Type: tg.ConditionApprovalRulesReady, ObservedGeneration: tool.Generation}
	rs, err := c.Rules(tool)
	switch {
	case err != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, tg.ReasonInvalidApprovalRules
		cond.Message = "spec.approval does not compile: " + err.Error() + ". Calls to this Tool end Rejected until an admin fixes the rules."
	case rs.Len() == 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, tg.ReasonApprovalRulesCompiled
		cond.Message = "No approval rules: a human decides every call."
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, tg.ReasonApprovalRulesCompiled
		cond.Message = fmt.Sprintf("%d approval rules compiled; a call no rule matches is put to a human.", rs.Len())
	}
	cond.Message = readiness.Truncate(cond.Message)
	return cond
}

// SetupWithManager registers the Tool controller. Creation, deletion and spec changes (a new
// generation) trigger it; its own status writes do not.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tg.Tool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("tool").
		Complete(r)
}
