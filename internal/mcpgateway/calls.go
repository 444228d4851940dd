package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
)

// Calls: each tools/call becomes a ToolCall, followed to its outcome, and answered with the tool's
// result or with a tool error the agent can read and act on.

// handler runs one tools/call of the named tool as a ToolCall.
func (g *Gateway) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := json.RawMessage(req.Params.Arguments)
		if t := strings.TrimSpace(string(args)); t == "" || t == "null" {
			args = json.RawMessage(`{}`)
		}
		limit, err := waitingLimit(req.Params.Meta, g.opts.WaitingLimit)
		if err != nil {
			g.metrics.calls.WithLabelValues(OutcomeRefused).Inc()
			return errorResult(err.Error(), nil), nil
		}

		calls, refusal := g.callsFor(ctx, name, req.Extra)
		if refusal != nil {
			g.metrics.calls.WithLabelValues(OutcomeRefused).Inc()
			return refusal, nil
		}

		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		session, owner := "", ""
		if req.Session != nil {
			session = req.Session.ID()
		}
		if req.Extra != nil {
			owner = ownerOf(req.Extra.TokenInfo)
		}
		untrack, ok := g.track(session, owner, cancel)
		if !ok {
			g.metrics.calls.WithLabelValues(OutcomeAbandoned).Inc()
			return errorResult(fmt.Sprintf("The call to %s did not run: the gateway is shutting down. Call it again once the gateway is back.", name), nil), nil
		}
		defer untrack()
		if g.opts.PingInterval > 0 && req.Extra != nil && req.Extra.Header != nil {
			go g.pingClient(ctx, req.Session, cancel)
		}

		o := toolcall.Options{Timeout: g.opts.Timeout, Labels: maps.Clone(g.opts.Labels)}
		if token := req.Params.GetProgressToken(); g.opts.Progress && token != nil && req.Session != nil {
			o.Progress = g.progress(ctx, req.Session, token)
		}

		res, err := g.run(ctx, calls, name, args, limit, o)
		g.metrics.calls.WithLabelValues(outcome(ctx, err)).Inc()
		if ctx.Err() != nil {
			// The client cancelled the request, closed its session or is gone, or the gateway is
			// closing: run withdrew the ToolCall as the gateway, which cancels its approval request.
			// Nobody is left to read a result.
			return nil, context.Cause(ctx)
		}
		if err != nil {
			return g.explain(name, caller(req.Extra), res, err), nil
		}
		text := res.Output
		if text == "" {
			text = fmt.Sprintf("%s succeeded with no output.", name)
		}
		return &mcp.CallToolResult{
			Meta:    g.meta(res.Name, tg.PhaseSucceeded),
			Content: []mcp.Content{&mcp.TextContent{Text: text}},
		}, nil
	}
}

// callsFor returns the client that creates a call's ToolCall: as the authenticated caller (after
// checking that the caller may call the tool), or as the gateway itself when callers are not
// authenticated. Otherwise it returns the tool error that refuses the call.
func (g *Gateway) callsFor(ctx context.Context, tool string, extra *mcp.RequestExtra) (*toolcall.Client, *mcp.CallToolResult) {
	if g.callers == nil || extra == nil || extra.Header == nil {
		return g.calls, nil // stdio, or HTTP without authentication
	}
	u := caller(extra)
	if u == nil {
		return nil, errorResult(fmt.Sprintf("The call to %s did not run: the caller is not authenticated. Send a bearer token.", tool), nil)
	}
	allowed, err := g.callers.mayCall(ctx, g.namespace, u, tool)
	if err != nil {
		return nil, errorResult(fmt.Sprintf("The call to %s did not run: %v", tool, err), nil)
	}
	if !allowed {
		return nil, errorResult(fmt.Sprintf("The call to %s did not run: %s may not call it. An admin grants it with RBAC verb %q on tools.toolgate.dev, resourceName %q, in namespace %s.",
			tool, u.Username, VerbCall, tool, g.namespace), nil)
	}
	if may, err := g.callers.mayActAs(ctx, u); err != nil {
		g.log.Error(err, "trying the call as the caller all the same", "caller", u.Username)
	} else if !may {
		return nil, errorResult(fmt.Sprintf("The call to %s did not run: the gateway may not act as %s. An admin lists it among the gateway's callers: mcpGateway.callers in the Helm chart, or the gateway's Role of callers (impersonate on serviceaccounts, its name among the resourceNames, in its namespace; config/rbac/mcp_gateway_role.yaml).",
			tool, u.Username), nil)
	}
	calls, err := g.callers.callsAs(g.namespace, u)
	if err != nil {
		return nil, errorResult(fmt.Sprintf("The call to %s did not run: %v", tool, err), nil)
	}
	return calls, nil
}

// waitingLimit reads MetaWaitingLimit from a call's _meta, or returns def.
func waitingLimit(meta mcp.Meta, def time.Duration) (time.Duration, error) {
	v, ok := meta[MetaWaitingLimit]
	if !ok || v == nil {
		return def, nil
	}
	var d time.Duration
	switch v := v.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("_meta %q is %q, which is not a duration; use e.g. \"90s\" or \"30m\", or leave it out for the gateway's default (%s). The call did not run.", MetaWaitingLimit, v, def)
		}
	case float64:
		d = time.Duration(v * float64(time.Second))
	case int64:
		d = time.Duration(v) * time.Second
	case int:
		d = time.Duration(v) * time.Second
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return 0, fmt.Errorf("_meta %q is %s, which is not a number of seconds. The call did not run.", MetaWaitingLimit, v)
		}
		d = time.Duration(f * float64(time.Second))
	default:
		return 0, fmt.Errorf("_meta %q must be a duration string such as \"30m\" or a number of seconds, not %T. The call did not run.", MetaWaitingLimit, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("_meta %q is %v; it must be positive, e.g. \"30m\". The call did not run.", MetaWaitingLimit, v)
	}
	return d, nil
}

// progress returns a toolcall progress callback that notifies the client once per new phase.
func (g *Gateway) progress(ctx context.Context, ss *mcp.ServerSession, token any) func(*tg.ToolCall) {
	var (
		mu   sync.Mutex
		last tg.ToolCallPhase
		n    float64
	)
	return func(tc *tg.ToolCall) {
		mu.Lock()
		defer mu.Unlock()
		phase := tc.Status.Phase
		if phase == "" || phase == last {
			return
		}
		last = phase
		n++
		msg := fmt.Sprintf("ToolCall %s: %s", tc.Name, phase)
		switch phase {
		case tg.PhasePending, tg.PhaseAwaitingApproval:
			msg += ": waiting for a human to approve the call"
		case tg.PhaseRunning:
			msg += ": approved; the tool is running"
		}
		if err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg}); err != nil {
			g.log.V(1).Info("progress notification not sent", "toolCall", tc.Name, "error", err)
		}
	}
}

// explain turns a Call error into a tool error result the agent can read and act on.
func (g *Gateway) explain(tool string, u *authenticationv1.UserInfo, res *toolcall.Result, err error) *mcp.CallToolResult {
	var te *toolcall.Error
	if !errors.As(err, &te) {
		msg := fmt.Sprintf("The call to %s did not complete: %v", tool, err)
		switch {
		case apierrors.IsForbidden(err) && u != nil:
			msg += fmt.Sprintf(" (%s needs create, get, list and watch on toolcalls.toolgate.dev in namespace %s, e.g. the ClusterRole of config/rbac/toolcall_agent_role.yaml bound there, and verb %q on tools.toolgate.dev with resourceName %q)", u.Username, g.namespace, VerbCall, tool)
		case apierrors.IsForbidden(err):
			msg += fmt.Sprintf(" (acting as itself, over stdio or unauthenticated HTTP, the gateway's identity needs create, get, list, watch and delete on toolcalls.toolgate.dev in namespace %s, e.g. the ClusterRole of config/rbac/toolcall_agent_role.yaml bound there, and verb %q on tools.toolgate.dev with resourceName %q)", g.namespace, VerbCall, tool)
		}
		return errorResult(msg, nil)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The call to %s %s\n", tool, lead(err))
	fmt.Fprintf(&b, "Phase: %s (reason: %s)\n", te.Phase, te.Reason)
	if te.Message != "" {
		fmt.Fprintf(&b, "Message: %s\n", te.Message)
	}
	if te.Note != "" {
		fmt.Fprintf(&b, "Approver's note: %s\n", te.Note)
	}
	if res != nil && res.Output != "" {
		fmt.Fprintf(&b, "Output: %s\n", res.Output)
	}
	fmt.Fprintf(&b, "ToolCall: %s/%s", g.namespace, te.Name)
	return errorResult(b.String(), g.meta(te.Name, tg.ToolCallPhase(te.Phase)))
}

// lead is the first sentence of an explanation, by outcome.
func lead(err error) string {
	switch {
	case errors.Is(err, toolcall.ErrDenied):
		return "did not run: a human denied it."
	case errors.Is(err, toolcall.ErrRejected):
		return "did not run: it was rejected before any human was asked. Fix what the message below says and call again."
	case errors.Is(err, toolcall.ErrExpired):
		return "did not run: it was approved, but the approval had expired before the tool could start. You may call it again."
	case errors.Is(err, toolcall.ErrApprovalUnavailable):
		return "did not run: no approval could be obtained in time. This is not a denial; you may call it again later."
	case errors.Is(err, toolcall.ErrCancelled):
		return "did not run: its approval request was cancelled."
	case errors.Is(err, toolcall.ErrFailed):
		return "ran and failed."
	}
	return "did not complete."
}

func errorResult(text string, meta mcp.Meta) *mcp.CallToolResult {
	return &mcp.CallToolResult{Meta: meta, IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func (g *Gateway) meta(toolCall string, phase tg.ToolCallPhase) mcp.Meta {
	return mcp.Meta{MetaToolCall: toolCall, MetaNamespace: g.namespace, MetaPhase: string(phase)}
}
