package controllers

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
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/policy"
)

// ruleCache holds each Tool's compiled approval rules for one generation of it: rules are compiled
// once per generation, by whichever controller needs them first.
type ruleCache struct {
	compiler *policy.Compiler
	mu       sync.Mutex
	tools    map[types.UID]*compiledRules
}

type compiledRules struct {
	generation int64
	rules      *policy.Rules
	err        error
}

func newRuleCache(limits policy.Limits) (*ruleCache, error) {
	c, err := policy.NewCompiler(limits)
	if err != nil {
		return nil, fmt.Errorf("building the approval rules' CEL environment: %w", err)
	}
	return &ruleCache{compiler: c, tools: map[types.UID]*compiledRules{}}, nil
}

// mustRuleCache builds a rule cache with the default limits. The CEL environment is fixed at build
// time, so failing to build it is a programming error.
func mustRuleCache() *ruleCache {
	c, err := newRuleCache(policy.DefaultLimits())
	if err != nil {
		panic(err)
	}
	return c
}

// rules returns the Tool's compiled rules, or the compiler's message for every rule that does not
// compile.
func (c *ruleCache) rules(tool *tg.Tool) (*policy.Rules, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.tools[tool.UID]; ok && e.generation == tool.Generation {
		return e.rules, e.err
	}
	rs, err := c.compiler.Compile(tool.Spec.Approval)
	c.tools[tool.UID] = &compiledRules{generation: tool.Generation, rules: rs, err: err}
	return rs, err
}

// forget drops a deleted Tool's rules.
func (c *ruleCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tools, uid)
}

// ToolReconciler reports on each Tool whether its approval rules compile: the ApprovalRulesReady
// condition, with the compiler's message when they do not, for the generation it describes.
type ToolReconciler struct {
	client.Client
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool

	rules *ruleCache
	// uids remembers each Tool's UID by name, so that a deleted Tool's rules can be forgotten.
	uids sync.Map
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=tools/status,verbs=get;update;patch

// Reconcile compiles the Tool's rules (once per generation) and writes the condition if it changed.
func (r *ToolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tool := &tg.Tool{}
	if err := r.Get(ctx, req.NamespacedName, tool); err != nil {
		if uid, ok := r.uids.LoadAndDelete(req.NamespacedName); ok && client.IgnoreNotFound(err) == nil {
			r.rules.forget(uid.(types.UID))
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if old, loaded := r.uids.Swap(req.NamespacedName, tool.UID); loaded && old.(types.UID) != tool.UID {
		r.rules.forget(old.(types.UID)) // deleted and created again under the same name
	}
	orig := tool.Status.DeepCopy()
	meta.SetStatusCondition(&tool.Status.Conditions, rulesCondition(tool, r.rules))
	tool.Status.ObservedGeneration = tool.Generation
	if equality.Semantic.DeepEqual(*orig, tool.Status) {
		return ctrl.Result{}, nil
	}
	base := tool.DeepCopy()
	base.Status = *orig
	return ctrl.Result{}, client.IgnoreNotFound(r.Status().Patch(ctx, tool, client.MergeFrom(base)))
}

// rulesCondition is the ApprovalRulesReady condition for the Tool's current generation.
func rulesCondition(tool *tg.Tool, c *ruleCache) metav1.Condition {
	cond := metav1.Condition{Type: tg.ConditionApprovalRulesReady, ObservedGeneration: tool.Generation}
	rs, err := c.rules(tool)
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
func (r *ToolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tg.Tool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{SkipNameValidation: &r.SkipNameValidation}).
		Named("tool").
		Complete(r)
}
