package toolcall

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
	"toolgate.dev/toolgate/controllers/internal/providers"
)

// accept checks everything that can be checked before asking a human, runs the Tool's approval rules,
// then records acceptance: the finalizer (so no request is ever left behind), the Tool's
// executionTimeout (so the ToolCall's timing and its request body stay fixed) and the Tool's UID and
// generation (so that only this version of the Tool runs).
func (r *Reconciler) accept(ctx context.Context, tc *tg.ToolCall) (*acceptedCall, *lifecycle.Status, error) {
	tool, rej, err := r.checkInput(ctx, tc)
	if err != nil || rej != nil {
		return nil, rej, err
	}
	adm, rej := r.applyRules(tc, tool)
	if rej != nil {
		return nil, rej, nil
	}
	w := lifecycle.NewWindow(tc, lifecycle.ExecutionTimeout(tool))
	timeout := r.Timing.RequestedTimeout(w, durationPtr(tc.Spec.Timeout), r.Clock.Now())
	if err := r.Timing.CheckFits(w, timeout, r.Clock.Now()); err != nil {
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
	pk, err := r.Providers.Resolve(ctx, tool)
	if err != nil {
		return nil, nil, err
	}
	base := tc.DeepCopy()
	controllerutil.AddFinalizer(tc, tg.Finalizer)
	if tc.Annotations == nil {
		tc.Annotations = map[string]string{}
	}
	tc.Annotations[tg.AnnotationExecutionTimeout] = w.ExecutionTimeout.String()
	tc.Annotations[tg.AnnotationApprovalTimeout] = timeout.String()
	lifecycle.RecordToolVersion(tc, tool)
	if a := pk.Annotation(); a != "" {
		tc.Annotations[tg.AnnotationProvider] = a
	}
	if inst := r.Providers.InstanceOf(ctx, pk); inst != "" {
		tc.Annotations[tg.AnnotationProviderInstance] = inst
	}
	if adm.verdict.Action == tg.ActionApprove {
		tc.Annotations[tg.AnnotationApprovalRule] = adm.verdict.Rule
	}
	if err := r.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, nil, fmt.Errorf("recording the acceptance (finalizer and annotations): %w", err)
	}
	r.written.wrote(tc)
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
func (r *Reconciler) checkAcceptance(ctx context.Context, tc *tg.ToolCall) (*acceptedCall, *lifecycle.Status, error) {
	exec, rej := acceptedDuration(tc, tg.AnnotationExecutionTimeout)
	if rej != nil {
		return nil, rej, nil
	}
	timeout, rej := acceptedDuration(tc, tg.AnnotationApprovalTimeout)
	if rej != nil {
		return nil, rej, nil
	}
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
	for _, key := range []string{tg.AnnotationToolUID, tg.AnnotationToolGeneration} {
		if _, ok := tc.Annotations[key]; !ok {
			return nil, notAccepted(fmt.Sprintf("annotation %s is missing (the controller writes it together with the finalizer)", key)), nil
		}
	}
	if mismatch := lifecycle.ToolVersionMismatch(tc, tool); mismatch != "" {
		return nil, lifecycle.ToolChangedBeforeSubmission.Status(mismatch), nil
	}
	if rej, err := r.acceptedProviderOf(ctx, tc, tool); err != nil || rej != nil {
		return nil, rej, err
	}
	adm, rej := r.applyRules(tc, tool)
	if rej != nil {
		return nil, rej, nil
	}
	// The same rules at the same generation decide the same way: a record that disagrees with them
	// about whether a rule approved the call is not one this controller wrote.
	recorded, has := tc.Annotations[tg.AnnotationApprovalRule]
	approved := adm.verdict.Action == tg.ActionApprove
	if has != approved || (approved && recorded != adm.verdict.Rule) {
		return nil, notAccepted(fmt.Sprintf("annotation %s is %q while the Tool's approval rules decide %s%s",
			tg.AnnotationApprovalRule, recorded, adm.verdict.Action, ruleSuffix(adm.verdict.Rule))), nil
	}
	return adm, nil, nil
}

// acceptedProviderOf checks the provider the record names against the Tool: what it resolves to now
// (its spec.providerRef, or the first default that is not being deleted), or a default being deleted
// ahead of it, which still serves the calls it has (Registry.StillServes).
func (r *Reconciler) acceptedProviderOf(ctx context.Context, tc *tg.ToolCall, tool *tg.Tool) (*lifecycle.Status, error) {
	k, err := providers.Accepted(tc)
	if err != nil {
		return notAccepted(err.Error()), nil
	}
	ok, cur, err := r.Providers.StillServes(ctx, tool, k)
	if err != nil || ok {
		return nil, err
	}
	return notAccepted(fmt.Sprintf("annotation %s is %q while the calls of Tool %s go to %s", tg.AnnotationProvider, k.Annotation(), tool.Name, cur)), nil
}

// ruleSuffix names the rule that decided, if one did.
func ruleSuffix(rule string) string {
	if rule == "" {
		return ""
	}
	return " (rule " + rule + ")"
}

// acceptedDuration reads one duration of the acceptance record, for the acceptance check.
func acceptedDuration(tc *tg.ToolCall, key string) (time.Duration, *lifecycle.Status) {
	d, err := lifecycle.AcceptedDuration(tc, key)
	if err != nil {
		return 0, notAccepted(err.Error())
	}
	return d, nil
}

// notAccepted is the rejection of an acceptance record this controller would not have written.
func notAccepted(problem string) *lifecycle.Status { return lifecycle.RecordInvalid.Status(problem) }
