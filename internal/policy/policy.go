// Package policy compiles and evaluates a Tool's approval rules: ordered CEL expressions over a call's
// arguments and its requester, each with an action (Deny, Approve, Require). The first rule whose
// expression is true decides; when none is, a human decides (Require).
//
// Rules are compiled with Kubernetes' CEL base environment (the libraries and language settings the
// apiserver uses for CRD validation rules and admission policies), with the same kinds of cost
// limits: a worst-case cost estimated at compile time, and a cost limit per rule and per call at
// evaluation. The environment holds no clock: a rule's answer depends only on the call, so the
// answer is the same on every evaluation of the same call (after a controller restart, on another
// replica), which is what lets the controller re-evaluate a call instead of storing a half-made
// decision.
package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Variables the expressions see.
const (
	// VarArguments is the ToolCall's spec.arguments, a JSON object.
	VarArguments = "arguments"
	// VarRequester is {username, uid, groups}: who created the ToolCall, empty when not recorded.
	VarRequester = "requester"
	// VarPreview is {present, failed, error, format, output, json, digest}: what the Tool's preview
	// said (present false for a Tool without one; json null unless format is json).
	VarPreview = "preview"
)

// Limits bound what rules may cost. Costs are in the units of Kubernetes' CEL cost model.
type Limits struct {
	// MaxEstimatedCost is the largest worst-case cost a rule may have, estimated at compile time with
	// the arguments at their largest (tg.MaxArgumentsBytes serialized). A rule above it does not compile.
	MaxEstimatedCost uint64
	// PerRuleCost stops the evaluation of one rule that costs more.
	PerRuleCost uint64
	// PerCallCost stops the evaluation of a call whose rules together cost more.
	PerCallCost uint64
}

// DefaultLimits are the apiserver's limits for one validation rule and for one object.
func DefaultLimits() Limits {
	return Limits{
		MaxEstimatedCost: celconfig.PerCallLimit,
		PerRuleCost:      celconfig.PerCallLimit,
		PerCallCost:      celconfig.RuntimeCELCostBudget,
	}
}

// Compiler compiles rules. It is safe for concurrent use.
type Compiler struct {
	env    *cel.Env
	limits Limits
}

// NewCompiler builds the expression environment.
func NewCompiler(limits Limits) (*Compiler, error) {
	// The libraries are those of the Kubernetes version this controller is built with (its minimum
	// compatibility version, as the apiserver chooses them), not the cluster's: a Tool's rules compile
	// the same way on every cluster a given controller runs on.
	envSet, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(VarArguments, cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable(VarRequester, cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable(VarPreview, cel.MapType(cel.StringType, cel.DynType)),
		},
	})
	if err != nil {
		return nil, err
	}
	env, err := envSet.Env(environment.NewExpressions)
	if err != nil {
		return nil, err
	}
	return &Compiler{env: env, limits: limits}, nil
}

// Rule is one compiled rule.
type Rule struct {
	Name   string
	Action tg.ApprovalAction
	prog   cel.Program
	// readsPreview says the expression refers to the preview variable.
	readsPreview bool
}

// Rules are a Tool's compiled rules, in order.
type Rules struct {
	rules  []Rule
	limits Limits
}

// Len is the number of rules.
func (rs *Rules) Len() int { return len(rs.rules) }

// CompileError lists every rule that does not compile, each with the compiler's message.
type CompileError struct {
	Problems []string
}

func (e *CompileError) Error() string { return strings.Join(e.Problems, "; ") }

// Compile compiles a Tool's approval rules. A nil policy (or no rules) compiles to no rules: every
// call is put to a human. The error is a *CompileError naming each failing rule by its field path.
func (c *Compiler) Compile(p *tg.ApprovalPolicy) (*Rules, error) {
	rs := &Rules{limits: c.limits}
	if p == nil {
		return rs, nil
	}
	var problems []string
	seen := map[string]bool{}
	for i, r := range p.Rules {
		field := fmt.Sprintf("spec.approval.rules[%d] (%s)", i, r.Name)
		rule, err := c.compileRule(r, seen)
		if err != nil {
			problems = append(problems, field+": "+err.Error())
			continue
		}
		rs.rules = append(rs.rules, rule)
	}
	if len(problems) > 0 {
		return nil, &CompileError{Problems: problems}
	}
	return rs, nil
}

func (c *Compiler) compileRule(r tg.ApprovalRule, seen map[string]bool) (Rule, error) {
	switch {
	case r.Name == "":
		return Rule{}, errors.New("name is empty; give every rule a name")
	case seen[r.Name]:
		return Rule{}, errors.New("name is used by an earlier rule; rule names must be unique")
	}
	seen[r.Name] = true
	switch r.Action {
	case tg.ActionDeny, tg.ActionApprove, tg.ActionRequire:
	default:
		return Rule{}, fmt.Errorf("action %q is not one of Deny, Approve, Require", r.Action)
	}
	if strings.TrimSpace(r.Expression) == "" {
		return Rule{}, errors.New("expression is empty")
	}
	ast, iss := c.env.Compile(r.Expression)
	if iss.Err() != nil {
		var msgs []string
		for _, e := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("at %d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return Rule{}, fmt.Errorf("expression does not compile: %s", strings.Join(msgs, "; "))
	}
	if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
		return Rule{}, fmt.Errorf("expression evaluates to %s; it must evaluate to a bool", out)
	}
	est, err := c.env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: argumentSizes{}})
	if err != nil {
		return Rule{}, fmt.Errorf("expression cost cannot be estimated: %v", err)
	}
	if est.Max > c.limits.MaxEstimatedCost {
		return Rule{}, fmt.Errorf("expression's estimated worst-case cost %d exceeds the limit %d for arguments up to %d bytes; iterate over fewer elements (e.g. no nested all/exists over lists) or check sizes first",
			est.Max, c.limits.MaxEstimatedCost, tg.MaxArgumentsBytes)
	}
	prog, err := c.env.Program(ast, cel.CostLimit(c.limits.PerRuleCost))
	if err != nil {
		return Rule{}, fmt.Errorf("expression cannot be planned: %v", err)
	}
	return Rule{Name: r.Name, Action: r.Action, prog: prog, readsPreview: refersTo(ast, VarPreview)}, nil
}

// refersTo reports whether the checked expression refers to the variable name.
func refersTo(ast *cel.Ast, name string) bool {
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name == name {
			return true
		}
	}
	return false
}

// argumentSizes bounds the size of every value reached from the variables: a string, list or map in
// arguments no larger than the arguments' serialized limit, the requester smaller still, and the
// preview no larger than its output's limit.
type argumentSizes struct{}

func (argumentSizes) EstimateSize(element checker.AstNode) *checker.SizeEstimate {
	if p := element.Path(); len(p) > 0 && (p[0] == VarArguments || p[0] == VarRequester) {
		return &checker.SizeEstimate{Min: 0, Max: tg.MaxArgumentsBytes}
	}
	if p := element.Path(); len(p) > 0 && p[0] == VarPreview {
		return &checker.SizeEstimate{Min: 0, Max: tg.MaxPreviewBytes}
	}
	return nil
}

func (argumentSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// Requester is who created the ToolCall, as admission recorded it. The zero value is "not recorded".
type Requester struct {
	Username string
	UID      string
	Groups   []string
}

// Input is what the rules see of one call.
type Input struct {
	// Arguments is the ToolCall's spec.arguments, serialized JSON.
	Arguments []byte
	Requester Requester
	// Preview is what the Tool's preview said; nil for a Tool without one.
	Preview *Preview
}

// Preview is a preview's outcome as the rules see it.
type Preview struct {
	// Failed says the preview failed (Error says why); Output is then empty.
	Failed bool
	Error  string
	// Format is "json" or "text"; Output the preview's output; Digest sha256:<hex> of it.
	Format string
	Output string
	Digest string
}

// Result is the decision of a Tool's rules on one call.
type Result struct {
	// Action is what to do: Deny, Approve or Require.
	Action tg.ApprovalAction
	// Rule is the rule that decided; empty when no rule matched (Require by default) or when the
	// evaluation failed.
	Rule string
	// Err, when set, is why the rules could not decide (a rule failed or the cost limit was
	// reached). Action is then Require: an error never approves, never denies and never skips a rule.
	Err error
}

// EvaluateBeforePreview runs, in order, the rules before the first that reads the preview: what
// they decide holds whatever the preview will say, since the first rule that matches decides. When
// none of them matches, the result is Require with no rule: the rules decide once the preview is
// known (Evaluate).
func (rs *Rules) EvaluateBeforePreview(in Input) Result {
	if rs == nil {
		return Result{Action: tg.ActionRequire}
	}
	before := &Rules{limits: rs.limits}
	for _, r := range rs.rules {
		if r.readsPreview {
			break
		}
		before.rules = append(before.rules, r)
	}
	return before.Evaluate(in)
}

// Evaluate runs the rules in order on one call; the first rule whose expression is true decides.
// A rule that fails (a missing field, a value of the wrong type, a cost limit) stops the evaluation:
// the call is put to a human, with the failing rule named in Err.
func (rs *Rules) Evaluate(in Input) Result {
	if rs == nil || len(rs.rules) == 0 {
		return Result{Action: tg.ActionRequire}
	}
	vars, err := activation(in)
	if err != nil {
		return Result{Action: tg.ActionRequire, Err: err}
	}
	var spent uint64
	for _, r := range rs.rules {
		out, det, err := r.prog.Eval(vars)
		if det != nil && det.ActualCost() != nil {
			spent += *det.ActualCost()
		}
		if err != nil {
			return Result{Action: tg.ActionRequire, Err: fmt.Errorf("rule %s: %s", r.Name, oneLine(err.Error()))}
		}
		if spent > rs.limits.PerCallCost {
			return Result{Action: tg.ActionRequire, Err: fmt.Errorf("rule %s: the rules together exceeded the cost limit %d for one call", r.Name, rs.limits.PerCallCost)}
		}
		match, err := asBool(out)
		if err != nil {
			return Result{Action: tg.ActionRequire, Err: fmt.Errorf("rule %s: %v", r.Name, err)}
		}
		if match {
			return Result{Action: r.Action, Rule: r.Name}
		}
	}
	return Result{Action: tg.ActionRequire}
}

func asBool(v ref.Val) (bool, error) {
	if b, ok := v.(types.Bool); ok {
		return bool(b), nil
	}
	return false, fmt.Errorf("expression evaluated to %s, not a bool", v.Type().TypeName())
}

// activation decodes the arguments the way the apiserver decodes JSON (whole numbers are ints, others
// doubles) and fills the requester, empty when it was not recorded.
func activation(in Input) (map[string]any, error) {
	var args map[string]any
	if err := json.Unmarshal(in.Arguments, &args); err != nil {
		return nil, fmt.Errorf("spec.arguments is not a JSON object: %v", err)
	}
	if args == nil {
		args = map[string]any{}
	}
	groups := make([]any, len(in.Requester.Groups))
	for i, g := range in.Requester.Groups {
		groups[i] = g
	}
	pv, err := previewVar(in.Preview)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		VarArguments: args,
		VarRequester: map[string]any{"username": in.Requester.Username, "uid": in.Requester.UID, "groups": groups},
		VarPreview:   pv,
	}, nil
}

// previewVar is the preview variable: every field present whatever happened, so that a rule can
// test preview.present or preview.failed without has(); json is the output decoded as the arguments
// are, or null.
func previewVar(p *Preview) (map[string]any, error) {
	if p == nil {
		return map[string]any{"present": false, "failed": false, "error": "", "format": "", "output": "", "json": nil, "digest": ""}, nil
	}
	var decoded any
	if p.Format == string(tg.PreviewFormatJSON) && !p.Failed {
		if err := json.Unmarshal([]byte(p.Output), &decoded); err != nil {
			return nil, fmt.Errorf("the preview's output is recorded as json but does not decode: %v", err)
		}
	}
	return map[string]any{"present": true, "failed": p.Failed, "error": p.Error, "format": p.Format, "output": p.Output, "json": decoded, "digest": p.Digest}, nil
}

// oneLine folds the compiler's multi-line messages (with their caret diagrams) into one line for a
// condition message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
