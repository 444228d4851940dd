package toolcalls

import (
	"bytes"
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/providercache"
)

// accept checks everything that can be checked before asking a human, runs the Tool's approval rules,
// then records acceptance: the finalizer (so no request is ever left behind) and the acceptance
// record (lifecycle.Record): the Tool's executionTimeout and the approval timeout (so the ToolCall's
// timing and its request body stay fixed), the Tool's UID and generation (so that only this version
// of the Tool runs), its provider and the rule that approved it. The reconcile goes on with the
// record as written (sc.took).
func (r *Reconciler) accept(ctx context.Context, sc *scope) (*acceptedCall, *lifecycle.Status, error) {
	tc := sc.tc
	tool, rej, err := r.checkInput(ctx, tc)
	if err != nil || rej != nil {
		return nil, rej, err
	}
	adm, rej := r.applyRules(tc, tool)
	if rej != nil {
		return nil, rej, nil
	}
	w := lifecycle.NewWindow(tc, lifecycle.ExecutionTimeout(tool))
	// The request is submitted once the Tool's preview (if any) has said what the call would do: the
	// approval timeout counts from then.
	submitted := r.Clock.Now().Add(previewReserve(tool))
	timeout := r.Timing.RequestedTimeout(w, durationPtr(tc.Spec.Timeout), submitted)
	if err := r.Timing.CheckFits(w, timeout, submitted); err != nil {
		if reserve := previewReserve(tool); reserve > 0 {
			err = fmt.Errorf("%w; the Tool's preview comes first and takes up to %s of it (its spec.preview.timeout and %s more)", err, reserve, previewGrace)
		}
		return nil, lifecycle.TimeoutDoesNotFit.Status(err), nil
	}
	// The Job the approval would start must be valid before anyone is asked to approve it. The
	// template decides that, so the dry run runs once per Tool generation.
	if !r.Tools.TemplateChecked(tool) {
		dry := buildJob(tc, tool, int64(w.ExecutionTimeout/time.Second))
		if err := r.Create(ctx, dry, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return nil, lifecycle.JobTemplateInvalid.Status(tool.Name, apierrors.ReasonForError(err)), nil
			}
			return nil, nil, fmt.Errorf("dry-running the Job of Tool %s: %w", tool.Name, err)
		}
		r.Tools.TemplatePassed(tool)
	}
	if ref := tool.Spec.ProviderRef; ref != nil && ref.Kind == tg.KindClusterApprovalProvider && r.Providers.ClusterProvidersOff() {
		return nil, lifecycle.ClusterProviderOff.Status(tool.Name, ref.Name, tool.Namespace), nil
	}
	pk, err := r.Providers.Resolve(ctx, tool)
	if err != nil {
		return nil, nil, err
	}
	rec := lifecycle.Record{
		ExecutionTimeout: w.ExecutionTimeout,
		ApprovalTimeout:  timeout,
		Tool:             lifecycle.VersionOf(tool),
		Provider:         pk.Ref(),
		Instance:         r.Providers.InstanceOf(ctx, pk),
		RuleApproved:     adm.verdict.Action == tg.ActionApprove,
	}
	if rec.RuleApproved {
		rec.Rule = adm.verdict.Rule
	}
	base := tc.DeepCopy()
	controllerutil.AddFinalizer(tc, tg.Finalizer)
	rec.Write(tc)
	if err := r.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, nil, fmt.Errorf("recording the acceptance (finalizer and annotations): %w", err)
	}
	r.written.wrote(tc)
	sc.took(rec)
	return adm, nil, nil
}

// checkInput finds the ToolCall's Tool and checks the arguments: their size and depth, then the Tool's
// argumentsSchema. It returns the Tool only when every check passed.
func (r *Reconciler) checkInput(ctx context.Context, tc *tg.ToolCall) (*tg.Tool, *lifecycle.Status, error) {
	tool, rej, err := r.findTool(ctx, tc)
	if err != nil || rej != nil {
		return nil, rej, err
	}
	if rej := checkArguments(tc.Spec.Arguments.Raw); rej != nil {
		return nil, rej, nil
	}
	if rej := r.Tools.ValidateArguments(tool, tc.Spec.Arguments.Raw); rej != nil {
		return nil, rej, nil
	}
	return tool, nil, nil
}

// MaxArgumentsDepth bounds how deeply arguments may nest.
const MaxArgumentsDepth = 32

// checkArguments checks size, depth and numbers: an object of at most MaxArgumentsBytes, nested at most
// MaxArgumentsDepth, whose numbers the canonical form approvals are compared in keeps exactly.
func checkArguments(raw []byte) *lifecycle.Status {
	if len(raw) > tg.MaxArgumentsBytes {
		return lifecycle.ArgumentsTooLarge.Status(len(raw), tg.MaxArgumentsBytes)
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return lifecycle.ArgumentsNotObject.Status()
	}
	depth, maxDepth, inString, escaped := 0, 0, false, false
	for _, c := range trimmed {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			maxDepth = max(maxDepth, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	if maxDepth > MaxArgumentsDepth {
		return lifecycle.ArgumentsTooDeep.Status(maxDepth, MaxArgumentsDepth)
	}
	if at, n := lifecycle.InexactNumber(trimmed); at != "" {
		return lifecycle.ArgumentsInexactNumber.Status(at, n)
	}
	return nil
}

// checkAcceptance checks the acceptance record of a ToolCall that carries the finalizer, before its
// request is submitted (again). It repeats every check of accept that does not depend on the instant
// of acceptance, and requires the annotations to be values accept could have written: the Tool's
// executionTimeout, and an approval timeout that is spec.timeout when set and fits the waiting limit
// counted from creation. A genuine record passes, so a submission repeated after a crash is still the
// same POST. The Job dry run is not repeated: it checks the Tool, not the ToolCall, it would add an
// apiserver request to every repeated submission, and the Job is validated when it is created. The
// Tool must still be the version the record names; its approval rules then decide again, as they
// did at acceptance.
func (r *Reconciler) checkAcceptance(ctx context.Context, sc *scope) (*acceptedCall, *lifecycle.Status, error) {
	tc, rec := sc.tc, sc.rec()
	if err := rec.Problem(tg.AnnotationExecutionTimeout, tg.AnnotationApprovalTimeout); err != nil {
		return nil, notAccepted(err.Error()), nil
	}
	exec, timeout := rec.ExecutionTimeout, rec.ApprovalTimeout
	tool, rej, err := r.checkInput(ctx, tc)
	if err != nil || rej != nil {
		return nil, rej, err
	}
	if want := lifecycle.ExecutionTimeout(tool); exec != want {
		return nil, notAccepted(fmt.Sprintf("annotation %s is %s while Tool %s has executionTimeout %s (if the Tool was changed after the ToolCall was accepted, create the ToolCall again)",
			tg.AnnotationExecutionTimeout, exec, tool.Name, want)), nil
	}
	if tc.Spec.Timeout != nil {
		if want := tc.Spec.Timeout.Duration.Truncate(time.Second); timeout != want {
			return nil, notAccepted(fmt.Sprintf("annotation %s is %s while spec.timeout is %s", tg.AnnotationApprovalTimeout, timeout, want)), nil
		}
	}
	w := lifecycle.NewWindow(tc, exec)
	if timeout != timeout.Truncate(time.Second) || r.Timing.CheckFits(w, timeout, w.Created) != nil {
		most := max(r.Timing.ApprovalLimit(w).Sub(w.Created)-r.Timing.FinalStateMargin, 0).Truncate(time.Second)
		return nil, notAccepted(fmt.Sprintf("annotation %s is %s while the approval timeouts that fit this ToolCall's waiting limit are whole seconds from 1s to %s",
			tg.AnnotationApprovalTimeout, timeout, most)), nil
	}
	// The Tool must still be the accepted version: a record without the version is not one this
	// controller writes; a record of another version is a Tool that changed before the request was
	// submitted (again).
	if err := rec.Missing(tg.AnnotationToolUID, tg.AnnotationToolGeneration); err != nil {
		return nil, notAccepted(err.Error()), nil
	}
	if mismatch := lifecycle.ToolVersionMismatch(tc, tool); mismatch != "" {
		return nil, lifecycle.ToolChangedBeforeSubmission.Status(mismatch), nil
	}
	if rej, err := r.acceptedProviderOf(ctx, tc, rec, tool); err != nil || rej != nil {
		return nil, rej, err
	}
	adm, rej := r.applyRules(tc, tool)
	if rej != nil {
		return nil, rej, nil
	}
	// The same rules at the same generation decide the same way: a record that disagrees with them
	// about whether a rule approved the call is not one this controller wrote.
	approved := adm.verdict.Action == tg.ActionApprove
	if rec.RuleApproved != approved || (approved && rec.Rule != adm.verdict.Rule) {
		return nil, notAccepted(fmt.Sprintf("annotation %s is %q while the Tool's approval rules decide %s%s",
			tg.AnnotationApprovalRule, rec.Rule, adm.verdict.Action, ruleSuffix(adm.verdict.Rule))), nil
	}
	return adm, nil, nil
}

// acceptedProviderOf checks the provider the record names against the Tool: what it resolves to now
// (its spec.providerRef, or the first default that is not being deleted), or a default being deleted
// ahead of it, which still serves the calls it has (Registry.StillServes).
func (r *Reconciler) acceptedProviderOf(ctx context.Context, tc *tg.ToolCall, rec lifecycle.Record, tool *tg.Tool) (*lifecycle.Status, error) {
	k, err := providercache.Recorded(tc, rec)
	if err != nil {
		return notAccepted(err.Error()), nil
	}
	ok, cur, err := r.Providers.StillServes(ctx, tool, k)
	if err != nil || ok {
		return nil, err
	}
	return notAccepted(fmt.Sprintf("annotation %s is %q while the calls of Tool %s go to %s", tg.AnnotationProvider, rec.Provider, tool.Name, cur)), nil
}

// ruleSuffix names the rule that decided, if one did.
func ruleSuffix(rule string) string {
	if rule == "" {
		return ""
	}
	return " (rule " + rule + ")"
}

// notAccepted is the rejection of an acceptance record this controller would not have written.
func notAccepted(problem string) *lifecycle.Status { return lifecycle.RecordInvalid.Status(problem) }
