// Package mcpgateway serves a namespace's Tools to MCP clients. Every Tool becomes an MCP tool of the
// same name (spec.toolName) whose inputSchema is the Tool's argumentsSchema; every tools/call becomes
// a ToolCall, so a human approves it before it runs, and the call answers with the tool's result or
// with an explanation of why it did not run.
package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
)

const (
	// AnnotationDescription on a Tool is the description MCP clients show for it (and the model reads
	// to decide when to call it). Without it the description is DefaultDescription's sentence.
	AnnotationDescription = "toolgate.dev/description"
	// MetaWaitingLimit is the tools/call `_meta` key with which a client chooses its own waiting limit
	// for one call: a Go duration string such as "90s" or "30m", or a number of seconds.
	MetaWaitingLimit = "toolgate.dev/waitingLimit"
	// LabelVia marks the ToolCalls the gateway creates, with the value "mcp".
	LabelVia = "toolgate.dev/via"
	// MetaToolCall, MetaNamespace and MetaPhase are the `_meta` keys of a tools/call result that name
	// the ToolCall behind it and its final phase.
	MetaToolCall  = "toolgate.dev/toolCall"
	MetaNamespace = "toolgate.dev/namespace"
	MetaPhase     = "toolgate.dev/phase"

	// DefaultWaitingLimit is how long a tools/call waits for approval and execution in total when
	// neither Options.WaitingLimit nor the call's `_meta` says otherwise.
	DefaultWaitingLimit = 10 * time.Minute
	// DefaultPingInterval is how often a call in progress over HTTP checks that its client is still
	// there when Options.PingInterval is zero.
	DefaultPingInterval = 10 * time.Second
)

// Options configures a Gateway.
type Options struct {
	// WaitingLimit is each ToolCall's spec.waitingLimit unless the call sets MetaWaitingLimit.
	// Default DefaultWaitingLimit.
	WaitingLimit time.Duration
	// Timeout is each ToolCall's spec.timeout (the approval timeout requested from the provider).
	// Zero leaves it to the controller: the largest that fits in the waiting limit.
	Timeout time.Duration
	// Progress sends notifications/progress with the ToolCall's phase while a call waits, to clients
	// that asked for progress (a progressToken in the call's `_meta`).
	Progress bool
	// PingInterval is how often each tools/call in progress over streamable HTTP pings its client on
	// the call's own response stream (MCP ping). A ping that cannot be delivered (the client's
	// connection is gone), or that is not answered within PingInterval, abandons the call: a call
	// whose client disappeared is abandoned within two intervals. Default DefaultPingInterval;
	// negative turns the check off. stdio sessions end with their pipe and are not pinged.
	PingInterval time.Duration
	// Labels are added to every ToolCall the gateway creates, besides LabelVia=mcp.
	Labels map[string]string
	// Logger receives the gateway's own log lines. Default: slog.Default().
	Logger *slog.Logger
}

// Gateway is an MCP server whose tools are the Tools of one namespace.
type Gateway struct {
	c         client.WithWatch
	namespace string
	opts      Options
	calls     *toolcall.Client
	server    *mcp.Server
	log       *slog.Logger

	// syncMu serialises syncs: each one lists the Tools and applies that list whole, so a slower
	// older list can never overwrite a newer one.
	syncMu    sync.Mutex
	published map[string]string // MCP tool name -> JSON of the published definition

	inflightMu sync.Mutex
	inflight   map[string]map[*inflightCall]struct{} // session id -> calls in progress
	closed     bool
	running    sync.WaitGroup // calls in progress
}

type inflightCall struct{ cancel context.CancelCauseFunc }

// The causes with which a call in progress is abandoned.
var (
	errSessionClosed = errors.New("the MCP client closed its session")
	errGatewayClosed = errors.New("the MCP gateway is shutting down")
)

// New returns a gateway for the Tools of namespace. c needs get/list/watch on tools and
// create/get/list/watch/delete on toolcalls in that namespace.
func New(c client.WithWatch, namespace string, o Options) *Gateway {
	if o.WaitingLimit <= 0 {
		o.WaitingLimit = DefaultWaitingLimit
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PingInterval == 0 {
		o.PingInterval = DefaultPingInterval
	}
	labels := map[string]string{LabelVia: "mcp"}
	maps.Copy(labels, o.Labels)
	o.Labels = labels

	g := &Gateway{
		c:         c,
		namespace: namespace,
		opts:      o,
		calls:     toolcall.New(c, namespace),
		log:       o.Logger.With("namespace", namespace),
		published: map[string]string{},
		inflight:  map[string]map[*inflightCall]struct{}{},
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "Toolgate", Version: version()}, &mcp.ServerOptions{
		Instructions: fmt.Sprintf("These tools are the Toolgate Tools of Kubernetes namespace %s. "+
			"Every call waits until a human approves it, which may take minutes, and may be denied: "+
			"a call that did not run returns an error result explaining why.", namespace),
		Logger: o.Logger,
		// Advertise tools (with list_changed) even while the namespace has none yet.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	g.server.AddReceivingMiddleware(g.refreshTools)
	return g
}

// Server is the MCP server, e.g. for Server().Run(ctx, &mcp.StdioTransport{}).
func (g *Gateway) Server() *mcp.Server { return g.server }

// HTTPHandler serves the gateway over MCP's streamable HTTP transport, one stateful session per
// client. When a client ends its session (HTTP DELETE), its calls still waiting are abandoned: their
// ToolCalls are deleted, which cancels their approval requests.
func (g *Gateway) HTTPHandler(opts *mcp.StreamableHTTPOptions) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server }, opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				g.abandonSession(id)
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Run keeps the published tools in step with the namespace's Tools until ctx ends, so that clients
// are sent notifications/tools/list_changed when a Tool is created, changed or deleted. Without Run
// the gateway is still correct: every tools/list reads the Tools afresh.
func (g *Gateway) Run(ctx context.Context) error {
	delay := time.Second
	for {
		err := g.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		g.log.Warn("watching Tools failed; retrying", "error", err, "retryIn", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// watch syncs, then watches Tools from the listed resourceVersion and syncs again after each change.
// It returns when the watch ends.
func (g *Gateway) watch(ctx context.Context) error {
	rv, err := g.sync(ctx)
	if err != nil {
		return err
	}
	w, err := g.c.Watch(ctx, &tg.ToolList{}, &client.ListOptions{
		Namespace: g.namespace,
		Raw:       &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
	})
	if err != nil {
		return fmt.Errorf("watching Tools in namespace %s: %w", g.namespace, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the Tool watch was closed by the apiserver")
			}
			switch ev.Type {
			case watch.Bookmark:
				continue
			case watch.Error:
				return fmt.Errorf("watching Tools in namespace %s: %w", g.namespace, apierrors.FromObject(ev.Object))
			}
			if _, err := g.sync(ctx); err != nil {
				return err
			}
		}
	}
}

// refreshTools is receiving middleware: tools/list always reflects the namespace's Tools as they are
// now, and a tools/call for a name the gateway has not published yet looks again before failing.
func (g *Gateway) refreshTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			if _, err := g.sync(ctx); err != nil {
				return nil, err
			}
		case "tools/call":
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil && !g.isPublished(r.Params.Name) {
				if _, err := g.sync(ctx); err != nil {
					return nil, err
				}
			}
		}
		return next(ctx, method, req)
	}
}

func (g *Gateway) isPublished(name string) bool {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	_, ok := g.published[name]
	return ok
}

// sync lists the namespace's Tools and publishes exactly those, returning the list's resourceVersion.
// Adding or removing a tool makes the MCP server notify connected clients.
func (g *Gateway) sync(ctx context.Context) (string, error) {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	list := &tg.ToolList{}
	if err := g.c.List(ctx, list, client.InNamespace(g.namespace)); err != nil {
		msg := fmt.Sprintf("listing Tools in namespace %s: %v", g.namespace, err)
		if apierrors.IsForbidden(err) {
			msg += " (the gateway's identity needs get, list and watch on tools.toolgate.dev there: bind the ClusterRole of config/rbac/mcp_gateway_role.yaml there with a RoleBinding)"
		}
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}
	}
	want := g.toolDefinitions(list.Items)

	var gone []string
	for name := range g.published {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		g.server.RemoveTools(gone...)
		for _, name := range gone {
			delete(g.published, name)
		}
	}
	for name, t := range want {
		def, err := json.Marshal(t)
		if err != nil {
			g.log.Error("cannot publish tool", "tool", name, "error", err)
			continue
		}
		if g.published[name] == string(def) {
			continue
		}
		if err := g.addTool(t); err != nil {
			g.log.Error("cannot publish tool", "tool", name, "error", err)
			continue
		}
		g.published[name] = string(def)
	}
	return list.ResourceVersion, nil
}

// addTool publishes t, turning the SDK's panic on a definition it refuses into an error.
func (g *Gateway) addTool(t *mcp.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	g.server.AddTool(t, g.handler(t.Name))
	return nil
}

// toolDefinitions returns the MCP tool for each toolName in tools. Tools being deleted are left out,
// as the controller does; when several Tools carry one toolName the first by object name is
// described, and the description says that calls are rejected until an admin keeps only one.
func (g *Gateway) toolDefinitions(tools []tg.Tool) map[string]*mcp.Tool {
	byName := map[string][]*tg.Tool{}
	for i := range tools {
		t := &tools[i]
		if t.DeletionTimestamp.IsZero() {
			byName[t.Spec.ToolName] = append(byName[t.Spec.ToolName], t)
		}
	}
	out := make(map[string]*mcp.Tool, len(byName))
	for name, same := range byName {
		slices.SortFunc(same, func(a, b *tg.Tool) int { return strings.Compare(a.Name, b.Name) })
		t := same[0]
		desc := t.Annotations[AnnotationDescription]
		if desc == "" {
			desc = DefaultDescription(t)
		}
		if len(same) > 1 {
			objs := make([]string, len(same))
			for i, s := range same {
				objs[i] = s.Name
			}
			desc += fmt.Sprintf(" Warning: Tools %s in namespace %s all have toolName %q, so calls are rejected until an admin keeps only one.",
				strings.Join(objs, ", "), g.namespace, name)
		}
		out[name] = &mcp.Tool{Name: name, Description: desc, InputSchema: InputSchema(t)}
	}
	return out
}

// DefaultDescription is a Tool's MCP description when it has no AnnotationDescription.
func DefaultDescription(t *tg.Tool) string {
	return fmt.Sprintf("Runs the Toolgate tool %s (Tool %s/%s). A human must approve each call before it runs: "+
		"the call waits for the decision, which may take minutes, and may be denied.", t.Spec.ToolName, t.Namespace, t.Name)
}

// InputSchema is a Tool's MCP inputSchema: its argumentsSchema with a top-level "type": "object"
// (MCP requires it, and the controller only accepts object arguments anyway), or {"type": "object"}
// when the Tool has no argumentsSchema. The controller still validates every call against the
// argumentsSchema itself.
func InputSchema(t *tg.Tool) map[string]any {
	schema := map[string]any{}
	if t.Spec.ArgumentsSchema != nil && len(t.Spec.ArgumentsSchema.Raw) > 0 {
		if err := json.Unmarshal(t.Spec.ArgumentsSchema.Raw, &schema); err != nil || schema == nil {
			schema = map[string]any{}
		}
	}
	schema["type"] = "object"
	return schema
}

// handler runs one tools/call of the named tool as a ToolCall.
func (g *Gateway) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := json.RawMessage(req.Params.Arguments)
		if t := strings.TrimSpace(string(args)); t == "" || t == "null" {
			args = json.RawMessage(`{}`)
		}
		limit, err := waitingLimit(req.Params.Meta, g.opts.WaitingLimit)
		if err != nil {
			return errorResult(err.Error(), nil), nil
		}

		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		session := ""
		if req.Session != nil {
			session = req.Session.ID()
		}
		untrack, ok := g.track(session, cancel)
		if !ok {
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

		res, err := g.calls.Call(ctx, name, args, limit, o)
		if ctx.Err() != nil {
			// The client cancelled the request, closed its session or is gone: Call deleted the
			// ToolCall, which cancels its approval request. Nobody is left to read a result.
			var ab *toolcall.AbandonedError
			if errors.As(err, &ab) && ab.DeleteErr != nil {
				g.log.Error("abandoned call: its ToolCall could not be deleted", "toolCall", ab.Name, "error", ab.DeleteErr)
			}
			return nil, context.Cause(ctx)
		}
		if err != nil {
			return g.explain(name, res, err), nil
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
			g.log.Debug("progress notification not sent", "toolCall", tc.Name, "error", err)
		}
	}
}

// explain turns a Call error into a tool error result the agent can read and act on.
func (g *Gateway) explain(tool string, res *toolcall.Result, err error) *mcp.CallToolResult {
	var te *toolcall.Error
	if !errors.As(err, &te) {
		msg := fmt.Sprintf("The call to %s did not complete: %v", tool, err)
		if apierrors.IsForbidden(err) {
			msg += " (the gateway's identity needs create, get, list, watch and delete on toolcalls.toolgate.dev in namespace " + g.namespace + ": bind the ClusterRole of config/rbac/mcp_gateway_role.yaml there with a RoleBinding)"
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

// track records a call in progress for its session and returns the function that forgets it, or
// false once the gateway is closed.
func (g *Gateway) track(session string, cancel context.CancelCauseFunc) (func(), bool) {
	call := &inflightCall{cancel: cancel}
	g.inflightMu.Lock()
	defer g.inflightMu.Unlock()
	if g.closed {
		return nil, false
	}
	g.running.Add(1)
	if g.inflight[session] == nil {
		g.inflight[session] = map[*inflightCall]struct{}{}
	}
	g.inflight[session][call] = struct{}{}
	return func() {
		g.inflightMu.Lock()
		delete(g.inflight[session], call)
		if len(g.inflight[session]) == 0 {
			delete(g.inflight, session)
		}
		g.inflightMu.Unlock()
		g.running.Done()
	}, true
}

// abandonSession cancels the calls in progress of a session that is ending.
func (g *Gateway) abandonSession(session string) {
	g.inflightMu.Lock()
	calls := slices.Collect(maps.Keys(g.inflight[session]))
	g.inflightMu.Unlock()
	for _, c := range calls {
		c.cancel(errSessionClosed)
	}
}

// Close abandons every call in progress, as if each client had cancelled it: their ToolCalls are
// deleted, which cancels their approval requests, so no tool runs for a caller that is gone. Calls
// that arrive afterwards are refused. Close waits until the abandoned calls have returned, or until
// ctx ends. Call it before stopping the transports: the SDK closes a session only once its requests
// have returned.
func (g *Gateway) Close(ctx context.Context) error {
	g.inflightMu.Lock()
	g.closed = true
	var calls []*inflightCall
	for _, session := range g.inflight {
		calls = slices.AppendSeq(calls, maps.Keys(session))
	}
	g.inflightMu.Unlock()
	for _, c := range calls {
		c.cancel(errGatewayClosed)
	}
	done := make(chan struct{})
	go func() {
		g.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d abandoned calls had not returned: %w", len(calls), ctx.Err())
	}
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
