package toolcalls

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
)

// The cache indexes Tools by the toolName calls name them by, and ToolCalls by the tool they name, so
// that a call finds its Tool and a changed Tool finds its waiting calls without listing a namespace.
// The manager registers both with its other indexes.
const (
	// ToolNameField indexes Tools by spec.toolName.
	ToolNameField = "spec.toolName"
	// ToolCallToolField indexes ToolCalls by spec.tool.
	ToolCallToolField = "spec.tool"
)

// findTool resolves spec.tool to the namespace's one Tool with that toolName; otherwise it returns the
// status of a call whose Tool cannot be found (UnknownTool, AmbiguousTool).
func (r *Reconciler) findTool(ctx context.Context, tc *tg.ToolCall) (*tg.Tool, *lifecycle.Status, error) {
	tools := &tg.ToolList{}
	if err := r.List(ctx, tools, client.InNamespace(tc.Namespace), client.MatchingFields{ToolNameField: tc.Spec.Tool}); err != nil {
		return nil, nil, fmt.Errorf("listing the Tools of namespace %s from the cache: %w", tc.Namespace, err)
	}
	tool, rej := pickTool(tools.Items, tc.Spec.Tool, tc.Namespace)
	if rej != nil {
		// Rejection is final: confirm with a live read that the cache was not just behind (a Tool
		// created a moment before the ToolCall).
		if err := r.APIReader.List(ctx, tools, client.InNamespace(tc.Namespace)); err != nil {
			return nil, nil, fmt.Errorf("listing the Tools of namespace %s: %w", tc.Namespace, err)
		}
		tool, rej = pickTool(tools.Items, tc.Spec.Tool, tc.Namespace)
	}
	return tool, rej, nil
}

// pickTool returns the one Tool whose toolName is name, or the status that names the problem.
func pickTool(tools []tg.Tool, name, namespace string) (*tg.Tool, *lifecycle.Status) {
	var found []*tg.Tool
	for i := range tools {
		if tools[i].Spec.ToolName == name && tools[i].DeletionTimestamp.IsZero() {
			found = append(found, &tools[i])
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, lifecycle.UnknownTool.Status(name, namespace, name)
	default:
		names := make([]string, len(found))
		for i, t := range found {
			names[i] = t.Name
		}
		slices.Sort(names) // a stable message: status does not churn
		return nil, lifecycle.AmbiguousTool.Status(name, strings.Join(names, ", "), namespace)
	}
}

// toolToWaitingCalls maps a Tool to the ToolCalls of its namespace that name its toolName and await a
// decision: a new version (or the Tool's deletion or re-creation) withdraws their requests.
func toolToWaitingCalls(c client.Reader) handler.TypedMapFunc[*tg.Tool, reconcile.Request] {
	return func(ctx context.Context, tool *tg.Tool) []reconcile.Request {
		calls := &tg.ToolCallList{}
		if err := c.List(ctx, calls, client.InNamespace(tool.Namespace), client.MatchingFields{ToolCallToolField: tool.Spec.ToolName}); err != nil {
			logf.FromContext(ctx).Error(err, "listing the ToolCalls of a changed Tool", "tool", tool.Name)
			return nil
		}
		var reqs []reconcile.Request
		for i := range calls.Items {
			if calls.Items[i].Status.Phase == tg.PhaseAwaitingApproval {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&calls.Items[i])})
			}
		}
		return reqs
	}
}
