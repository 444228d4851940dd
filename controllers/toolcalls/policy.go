package toolcalls

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/policy"
	"toolgate.dev/toolgate/internal/provider"
)

// The Tool's approval rules decide, before any human is asked, whether a call is denied, approved by
// policy, or put to a human. Their answer depends only on the Tool's generation (bound at acceptance)
// and the ToolCall's immutable spec, so evaluating them again after a crash gives the same answer.

// acceptedCall is an accepted ToolCall's Tool and what its approval rules decided.
type acceptedCall struct {
	tool    *tg.Tool
	verdict policy.Result
}

// applyRules compiles (once per Tool generation) and runs the Tool's approval rules on the call. A
// Tool whose rules do not compile, and a Deny rule, reject the call; otherwise the verdict is
// Approve or Require.
//
// The rules of a Tool with a preview decide after it (decideWithPreview). At acceptance only a Deny
// rule before the first rule that reads the preview rejects the call (the preview does not run);
// otherwise the verdict is Require: the preview runs, and the human (or an Approve rule) judges the
// call with what it said.
func (r *Reconciler) applyRules(tc *tg.ToolCall, tool *tg.Tool) (*acceptedCall, *lifecycle.Status) {
	rules, err := r.Tools.Rules(tool)
	if err != nil {
		return nil, lifecycle.RulesInvalid.Status(tool.Name, err)
	}
	if tool.Spec.Preview != nil {
		before := rules.EvaluateBeforePreview(policy.Input{Arguments: tc.Spec.Arguments.Raw, Requester: requesterOf(tc)})
		if before.Action == tg.ActionDeny {
			return nil, policyDenial(tc, tool, before.Rule)
		}
		return &acceptedCall{tool: tool, verdict: policy.Result{Action: tg.ActionRequire}}, nil
	}
	verdict := r.evaluateRules(tc, tool, rules, nil)
	if verdict.Action == tg.ActionDeny {
		return nil, policyDenial(tc, tool, verdict.Rule)
	}
	return &acceptedCall{tool: tool, verdict: verdict}, nil
}

// evaluateRules runs the Tool's rules on the call. A rule that cannot be evaluated puts the call to a
// human and says so in a Warning event.
func (r *Reconciler) evaluateRules(tc *tg.ToolCall, tool *tg.Tool, rules *policy.Rules, preview *tg.PreviewRecord) policy.Result {
	res := rules.Evaluate(policy.Input{Arguments: tc.Spec.Arguments.Raw, Requester: requesterOf(tc), Preview: previewInput(tool, preview)})
	if res.Err != nil {
		r.emit(tc, tool, lifecycle.RulesUndecided, tool.Name, res.Err)
	}
	return res
}

// previewInput is the preview as the rules see it: nil for a Tool without one.
func previewInput(tool *tg.Tool, p *tg.PreviewRecord) *policy.Preview {
	if tool.Spec.Preview == nil || p == nil {
		return nil
	}
	return &policy.Preview{Failed: p.Error != "", Error: p.Error, Format: string(p.Format), Output: p.Output, Digest: p.Digest}
}

// decideWithPreview runs the rules of a Tool with a preview, once the preview is recorded: a Deny
// rule rejects the call (its status is returned), an Approve rule becomes adm's verdict.
func (r *Reconciler) decideWithPreview(sc *scope, adm *acceptedCall) *lifecycle.Status {
	rules, err := r.Tools.Rules(adm.tool)
	if err != nil {
		return lifecycle.RulesInvalid.Status(adm.tool.Name, err)
	}
	adm.verdict = r.evaluateRules(sc.tc, adm.tool, rules, sc.preview)
	if adm.verdict.Action == tg.ActionDeny {
		return policyDenial(sc.tc, adm.tool, adm.verdict.Rule)
	}
	return nil
}

// policyDenial is the outcome of a call a Deny rule matched: Rejected, the rule recorded as the
// decision's source.
func policyDenial(tc *tg.ToolCall, tool *tg.Tool, rule string) *lifecycle.Status {
	tc.Status.Decision = &tg.Decision{Status: provider.StatusDenied, Source: tg.DecisionSourcePolicy, Rule: rule}
	return lifecycle.PolicyDenied.Status(rule, tool.Name)
}

// recordPolicyApproval records an Approve rule's decision. A policy approval is valid as long as a
// human's could be: the approval timeout fixed at acceptance, and never past the waiting limit's room
// to run the tool. It is recorded once: a repeated evaluation (after a failed Job create) keeps the
// first decision and its expiry.
func recordPolicyApproval(tc *tg.ToolCall, rule string, w lifecycle.Window, approvalTimeout time.Duration, t lifecycle.Timing, now time.Time) {
	// Whole seconds, as the status stores them: what is checked before the Job is what is recorded.
	expiry := func(decided time.Time) time.Time {
		expires := decided.Add(approvalTimeout)
		if limit := t.ApprovalLimit(w).Truncate(time.Second); limit.Before(expires) {
			return limit
		}
		return expires
	}
	now = now.Truncate(time.Second)
	if d := tc.Status.Decision; d != nil && approvedByPolicy(tc) && d.Rule == rule && d.DecidedAt != nil && d.ExpiresAt != nil &&
		!d.DecidedAt.After(now) && !d.ExpiresAt.After(expiry(d.DecidedAt.Time)) {
		// Kept only if this controller could have written it: the status is not its alone, and a
		// longer validity there must not outlive what the rule grants.
		return
	}
	expires := expiry(now)
	tc.Status.Decision = &tg.Decision{
		Status:    provider.StatusApproved,
		Source:    tg.DecisionSourcePolicy,
		Rule:      rule,
		DecidedAt: metaTime(&now),
		ExpiresAt: metaTime(&expires),
	}
}

// approveByPolicy records an Approve rule's decision and starts the Job, with every check a human's
// approval gets immediately before it.
func (r *Reconciler) approveByPolicy(ctx context.Context, sc *scope, adm *acceptedCall) (ctrl.Result, error) {
	acc, err := sc.accepted()
	if err != nil {
		return ctrl.Result{}, err
	}
	rule := adm.verdict.Rule
	recordPolicyApproval(sc.tc, rule, acc.Window, acc.Submission.Timeout, r.Timing, r.Clock.Now())
	setStatus(sc.tc, lifecycle.PolicyApproved.Status(rule, adm.tool.Name))
	return r.startJob(ctx, sc)
}

// ruleApprovalHolds reports whether the rule approval recorded in tc's status is the Tool's rules'
// own: the Tool is the version the call was accepted against and its rules approve the call by that
// rule. A Tool that is no longer that version also holds: the run gate then ends the call without
// running it, as it ends any approval of another version.
func (r *Reconciler) ruleApprovalHolds(ctx context.Context, sc *scope) (bool, error) {
	tc := sc.tc
	tool, rej, err := r.findTool(ctx, tc)
	if err != nil || rej != nil {
		return rej != nil, err
	}
	if lifecycle.ToolVersionMismatch(tc, tool) != "" {
		return true, nil
	}
	rules, err := r.Tools.Rules(tool)
	if err != nil {
		return false, nil
	}
	if tool.Spec.Preview != nil && sc.preview == nil {
		return false, nil // its rules decide once the preview is recorded
	}
	verdict := r.evaluateRules(tc, tool, rules, sc.preview)
	return verdict.Action == tg.ActionApprove && verdict.Rule == tc.Status.Decision.Rule, nil
}

// decidedByPolicy reports whether the ToolCall's decision came from an approval rule.
func decidedByPolicy(tc *tg.ToolCall) bool {
	return tc.Status.Decision != nil && tc.Status.Decision.Source == tg.DecisionSourcePolicy
}

// approvedByPolicy reports whether an Approve rule approved the ToolCall.
func approvedByPolicy(tc *tg.ToolCall) bool {
	return decidedByPolicy(tc) && tc.Status.Decision.Status == provider.StatusApproved
}

// requesterOf is who created the ToolCall, as admission recorded it in spec.requester; empty when
// not recorded.
func requesterOf(tc *tg.ToolCall) policy.Requester {
	r := tc.Spec.Requester
	if r == nil {
		return policy.Requester{}
	}
	return policy.Requester{Username: r.Username, UID: r.UID, Groups: r.Groups}
}

// reportPolicyDecision counts a rule's decision and, for an approval (whose phase event is the Job's),
// says which rule approved.
func (r *Reconciler) reportPolicyDecision(tc *tg.ToolCall) {
	d := tc.Status.Decision
	if d.Status == provider.StatusApproved {
		policyDecisions.WithLabelValues(string(tg.ActionApprove)).Inc()
		r.emit(tc, nil, lifecycle.RuleApproved, d.Rule)
		return
	}
	policyDecisions.WithLabelValues(string(tg.ActionDeny)).Inc()
}
