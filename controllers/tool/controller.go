// Package tool is the Tool controller: it reports on each Tool whether its approval rules compile.
package tool

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/toolcache"
)

// Reconciler reports on each Tool whether its approval rules compile: the ApprovalRulesReady
// condition, with the compiler's message when they do not, for the generation it describes.
type Reconciler struct {
	client.Client

	// Tools is the per-Tool-generation cache shared with the ToolCall controller.
	Tools *toolcache.Cache
	// uids remembers each Tool's UID by name, so that a deleted Tool can be forgotten.
	uids sync.Map
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=tools/status,verbs=get;update;patch

// Reconcile compiles the Tool's rules (once per generation) and writes the condition if it changed.
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
	orig := tool.Status.DeepCopy()
	meta.SetStatusCondition(&tool.Status.Conditions, rulesCondition(tool, r.Tools))
	tool.Status.ObservedGeneration = tool.Generation
	if equality.Semantic.DeepEqual(*orig, tool.Status) {
		return ctrl.Result{}, nil
	}
	base := tool.DeepCopy()
	base.Status = *orig
	return ctrl.Result{}, client.IgnoreNotFound(r.Status().Patch(ctx, tool, client.MergeFrom(base)))
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
	if len(cond.Message) > 32768 { // metav1.Condition's limit
		cond.Message = cond.Message[:32765] + "..."
	}
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
