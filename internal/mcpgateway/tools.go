package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Publishing: the MCP server's registered tools follow the namespace's Tools through an informer, so
// that connected clients are sent notifications/tools/list_changed when one is created, changed or
// deleted, and tools/call is dispatched to them. tools/list and a tools/call for a name the informer
// has not delivered yet read the apiserver instead, so that a Tool created a moment ago is listed
// and callable at once.

// indexToolName indexes the informer's Tools by spec.toolName, the MCP tool name.
const indexToolName = "toolName"

// Run keeps the registered tools in step with the namespace's Tools until ctx ends. Without Run the
// gateway still lists and calls every Tool; only the list_changed notifications are missing.
func (g *Gateway) Run(ctx context.Context) error {
	inf := cache.NewSharedIndexInformerWithOptions(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &tg.ToolList{}
			return list, g.c.List(ctx, list, client.InNamespace(g.namespace), &client.ListOptions{Raw: &opts})
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.AllowWatchBookmarks = true
			return g.c.Watch(ctx, &tg.ToolList{}, client.InNamespace(g.namespace), &client.ListOptions{Raw: &opts})
		},
	}, &tg.Tool{}, cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{indexToolName: func(obj any) ([]string, error) {
			if t, ok := obj.(*tg.Tool); ok {
				return []string{t.Spec.ToolName}, nil
			}
			return nil, nil
		}},
	})
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		g.log.Info("watching Tools failed; the informer retries", "error", err)
	}); err != nil {
		return err
	}
	indexer := inf.GetIndexer()
	republish := func(objs ...any) {
		for _, obj := range objs {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if t, ok := obj.(*tg.Tool); ok {
				g.republish(t.Spec.ToolName, indexer)
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { republish(obj) },
		UpdateFunc: func(old, obj any) { republish(old, obj) },
		DeleteFunc: func(obj any) { republish(obj) },
	}); err != nil {
		return err
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			g.metrics.ready.Store(true)
		}
	}()
	inf.RunWithContext(ctx)
	g.metrics.ready.Store(false)
	return nil
}

// republish registers the MCP tool of toolName as the informer's Tools describe it now, or removes it
// when no Tool carries that name any more. Adding or removing a tool makes the MCP server notify the
// connected clients.
func (g *Gateway) republish(name string, indexer cache.Indexer) {
	objs, err := indexer.ByIndex(indexToolName, name)
	if err != nil {
		g.log.Error(err, "cannot look up Tools by toolName", "tool", name)
		return
	}
	tools := make([]tg.Tool, 0, len(objs))
	for _, obj := range objs {
		tools = append(tools, *obj.(*tg.Tool))
	}
	t := g.toolDefinitions(tools)[name]

	g.publishedMu.Lock()
	defer g.publishedMu.Unlock()
	if t == nil {
		if _, ok := g.published[name]; ok {
			g.server.RemoveTools(name)
			delete(g.published, name)
		}
		return
	}
	def, err := json.Marshal(t)
	if err != nil {
		g.log.Error(err, "cannot publish tool", "tool", name)
		return
	}
	if g.published[name] == string(def) {
		return
	}
	if err := g.addTool(t); err != nil {
		g.log.Error(err, "cannot publish tool", "tool", name)
		return
	}
	g.published[name] = string(def)
}

// addTool registers t, turning the SDK's panic on a definition it refuses into an error.
func (g *Gateway) addTool(t *mcp.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	g.server.AddTool(t, g.handler(t.Name))
	return nil
}

func (g *Gateway) isPublished(name string) bool {
	g.publishedMu.Lock()
	defer g.publishedMu.Unlock()
	_, ok := g.published[name]
	return ok
}

// freshTools is receiving middleware: tools/list answers with the namespace's Tools as they are now,
// and a tools/call for a name the informer has not registered yet looks the Tools up before the SDK
// answers that the tool is unknown.
func (g *Gateway) freshTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			return g.listTools(ctx, req.GetExtra())
		case "tools/call":
			r, ok := req.(*mcp.CallToolRequest)
			if !ok || r.Params == nil || g.isPublished(r.Params.Name) {
				break
			}
			tools, err := g.readTools(ctx)
			if err != nil {
				return nil, err
			}
			if _, ok := g.toolDefinitions(tools)[r.Params.Name]; ok {
				res, err := g.handler(r.Params.Name)(ctx, r)
				if err != nil {
					return nil, err
				}
				return res, nil
			}
		}
		return next(ctx, method, req)
	}
}

// listTools answers tools/list with the namespace's Tools read from the apiserver, by name: those
// the caller may call when callers are authenticated.
func (g *Gateway) listTools(ctx context.Context, extra *mcp.RequestExtra) (*mcp.ListToolsResult, error) {
	tools, err := g.readTools(ctx)
	if err != nil {
		return nil, err
	}
	defs := g.toolDefinitions(tools)
	var u *authenticationv1.UserInfo
	if g.callers != nil && extra != nil && extra.Header != nil {
		if u = caller(extra); u == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the caller is not authenticated: send a bearer token"}
		}
	}
	res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, 0, len(defs))}
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		if u != nil {
			ok, err := g.callers.mayCall(ctx, g.namespace, u, name)
			if err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
			}
			if !ok {
				continue
			}
		}
		res.Tools = append(res.Tools, defs[name])
	}
	return res, nil
}

// readTools lists the namespace's Tools from the apiserver.
func (g *Gateway) readTools(ctx context.Context) ([]tg.Tool, error) {
	list := &tg.ToolList{}
	if err := g.c.List(ctx, list, client.InNamespace(g.namespace)); err != nil {
		msg := fmt.Sprintf("listing Tools in namespace %s: %v", g.namespace, err)
		if apierrors.IsForbidden(err) {
			msg += " (the gateway's identity needs get, list and watch on tools.toolgate.dev there: bind the ClusterRole of config/rbac/mcp_gateway_role.yaml there with a RoleBinding)"
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}
	}
	return list.Items, nil
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
		out[name] = &mcp.Tool{Name: name, Description: desc, InputSchema: InputSchema(t), Annotations: ToolAnnotations(t)}
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

// ToolAnnotations are the MCP tool annotation hints the Tool declares in spec.mcpAnnotations, nil
// when it declares none. Hints a Tool leaves out keep MCP's defaults (readOnlyHint and
// idempotentHint false, destructiveHint true). They are hints for clients: every call still goes
// through the Tool's approval rules and, unless a rule approves it, a human.
func ToolAnnotations(t *tg.Tool) *mcp.ToolAnnotations {
	h := t.Spec.MCPAnnotations
	if h == nil {
		return nil
	}
	a := &mcp.ToolAnnotations{DestructiveHint: h.DestructiveHint}
	if h.ReadOnlyHint != nil {
		a.ReadOnlyHint = *h.ReadOnlyHint
	}
	if h.IdempotentHint != nil {
		a.IdempotentHint = *h.IdempotentHint
	}
	return a
}
