// Package mcpservers is the MCPServer controller: it lists each MCPServer's tools (tools/list over
// streamable HTTP, with the MCP Go SDK's client) and owns one Tool per tool its spec.tools exposes,
// whose Job calls that tool once with the approved arguments (cmd/mcp-call). It lists again every
// spec.refreshInterval; it reports Ready, Reconciling and Stalled, and the tools it found, in the
// MCPServer's status.
package mcpservers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// DiscoveryTimeout bounds one listing of a server's tools (connect, initialize, every tools/list page).
const DiscoveryTimeout = 30 * time.Second

// maxRetryInterval bounds the wait before listing again a server that could not be listed.
const maxRetryInterval = 30 * time.Second

// Reconciler lists each MCPServer's tools and keeps one Tool per exposed tool.
type Reconciler struct {
	client.Client
	// APIReader reads Secrets and ConfigMaps live: they are not cached.
	APIReader client.Reader
	// Recorder emits the event of a change of Ready.
	Recorder events.EventRecorder
	// Options bound what a server may send and how often it is listed (limits.go).
	Options Options

	listeners *listeners // set by SetupWithManager (listen.go)
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=mcpservers,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=mcpservers/status,verbs=get;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=mcpservers/finalizers,verbs=update
// +kubebuilder:rbac:groups=toolgate.dev,resources=tools,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile reads the MCPServer's settings, lists its tools, makes its Tools match the exposed ones,
// and writes its status if it changed. It lists again after spec.refreshInterval (sooner when the
// server could not be listed).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	srv := &tg.MCPServer{}
	if err := r.Get(ctx, req.NamespacedName, srv); err != nil {
		if apierrors.IsNotFound(err) {
			r.listeners.stop(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !srv.DeletionTimestamp.IsZero() {
		r.listeners.stop(req.NamespacedName)
		return ctrl.Result{}, nil // its Tools go with it (ownerReferences)
	}
	w := readiness.Begin(srv, &srv.Status, &srv.Status.Conditions)
	interval := refreshInterval(srv)
	message, problem := r.discover(ctx, srv)
	srv.Status.ObservedGeneration = srv.Generation
	// Against the resourceVersion read: a reconcile that started from a cached copy older than the
	// last status written (a listing the server's notification asked for right after another) does
	// not report that change of Ready a second time. It reads again instead.
	res, err := w.Write(ctx, r.Client, r.Recorder, problem, tg.ReasonToolsDiscovered, message)
	if err != nil {
		return ctrl.Result{}, err
	}
	if res.Progress == readiness.Retrying {
		return res.RequeueAfter(min(interval, maxRetryInterval)), nil
	}
	return res.RequeueAfter(interval), nil
}

// discover does one round: settings, tools/list, Tools. It returns the message of Ready when the
// tools were listed, a *readiness.Error when they were not (or not all of them got a Tool), and any
// other error for a failed apiserver request (retried with backoff).
func (r *Reconciler) discover(ctx context.Context, srv *tg.MCPServer) (string, error) {
	if p := badPattern(srv.Spec.Tools); p != "" {
		return "", readiness.Stalledf(tg.ReasonInvalidMCPServerSpec, "spec.tools: %q is not a valid glob (\"*\", \"?\" and \"[...]\" as Go's path.Match); fix or remove it", p)
	}
	exec, err := executorOf(srv, r.Options.ExecutorImage)
	if cerr, ok := readiness.ErrorOf(err); ok {
		return "", readiness.Stalledf(cerr.Reason, "%s. The Tools generated before are kept as they are.", cerr.Message)
	}
	cfg, conn, err := r.settings(ctx, srv)
	if cerr, ok := readiness.ErrorOf(err); ok {
		// The session that listens was opened with these settings: a Secret that no longer
		// consents (or is gone) must not go on serving it.
		r.listeners.stop(client.ObjectKeyFromObject(srv))
		return "", readiness.Stalledf(cerr.Reason, "%s. The Tools generated before are kept as they are.", cerr.Message)
	} else if err != nil {
		return "", err
	}
	cfg.Limits = r.Options.Limits
	tools, err := mcpclient.Discover(ctx, cfg, DiscoveryTimeout)
	if err != nil {
		// The status says a stable class; what answered, where, and its words go to the log only
		// (whoever writes an MCPServer must not map the manager's network with it).
		logf.FromContext(ctx).Info("listing the server's tools failed", "url", srv.Spec.URL, "error", err.Error())
		if lerr := (*mcpclient.LimitError)(nil); errors.As(err, &lerr) {
			reason, words := overLimit(lerr)
			return "", readiness.Stalledf(reason, "Listing the tools of %s stopped: %s. The Tools generated before are kept as they are.", srv.Spec.URL, words)
		}
		summary := mcpclient.SummaryNotMCP
		if merr := (*mcpclient.Error)(nil); errors.As(err, &merr) {
			summary = merr.Summary
		}
		return "", readiness.Retryingf(tg.ReasonServerUnreachable,
			"Listing the tools of %s failed: %s (the manager's log has the detail). The manager tries again; the Tools generated before are kept as they are.", srv.Spec.URL, summary)
	}
	r.listeners.ensure(client.ObjectKeyFromObject(srv), cfg, srv.Generation)
	result, err := r.syncTools(ctx, srv, tools, conn, exec)
	if err != nil {
		return "", err
	}
	entries := result.entries
	srv.Status.Tools = entries
	if over := result.over; over != nil {
		reason, words := overLimit(over)
		return "", readiness.Stalledf(reason, "Some exposed tools get no Tool (status.tools says which): %s.", words)
	}
	if over := r.listeners.overLimit(client.ObjectKeyFromObject(srv)); over != nil {
		reason, words := overLimit(over)
		return "", readiness.Stalledf(reason, "The tools were listed, but on the session that follows the server's notifications %s: they are no longer followed until the MCPServer's spec or settings change (the listing every spec.refreshInterval goes on).", words)
	}
	if len(result.conflicts) > 0 {
		return "", readiness.Stalledf(tg.ReasonToolNameConflict,
			"Tools %s exist and are not this MCPServer's: their tools get no Tool until they are renamed or removed.", strings.Join(result.conflicts, ", "))
	}
	if len(result.noPreview) > 0 {
		return "", readiness.Stalledf(tg.ReasonPreviewToolNotListed,
			"The server does not list the preview tools of %s (spec.previews), so they get no Tool: their calls must not run without the preview asked for. status.tools says which entry; name a tool the server lists as its previewTool, or remove the entry.", strings.Join(result.noPreview, ", "))
	}
	made := 0
	for _, e := range entries {
		if e.Tool != "" {
			made++
		}
	}
	msg := fmt.Sprintf("The server lists %d tools; spec.tools exposes %d, %d of them as Tools.", len(tools), len(entries), made)
	if len(srv.Spec.Tools) == 0 {
		msg += " spec.tools is empty, so no tool is exposed: name the tools (or globs) to expose."
	}
	if idle := idlePreviews(srv, listed(tools)); len(idle) > 0 {
		msg += " " + strings.Join(idle, "; ") + ": such an entry previews nothing; correct its tool or remove it."
	}
	return msg, nil
}

// synced is what syncTools did: the status entries, the names of Tools it would make that exist and
// are not its own, the first per-tool limit an exposed tool went over, and the exposed tools that got
// no Tool because their preview tool is not listed.
type synced struct {
	entries   []tg.MCPDiscoveredTool
	conflicts []string
	over      *mcpclient.LimitError
	noPreview []string
}

// listed are the server's tools by name.
func listed(tools []*mcp.Tool) map[string]*mcp.Tool {
	byName := make(map[string]*mcp.Tool, len(tools))
	for _, t := range tools {
		byName[t.Name] = t
	}
	return byName
}

// syncTools creates, updates and deletes the MCPServer's Tools so that each exposed tool has one, as
// listed now: all but those over a per-tool limit, those whose name makes no toolName, and those
// whose preview tool is not listed.
func (r *Reconciler) syncTools(ctx context.Context, srv *tg.MCPServer, tools []*mcp.Tool, conn connection, exec executor) (synced, error) {
	var out synced
	owned := &tg.ToolList{}
	if err := r.List(ctx, owned, client.InNamespace(srv.Namespace), client.MatchingLabels{tg.LabelMCPServer: srv.Name}); err != nil {
		return out, fmt.Errorf("listing the Tools of MCPServer %s: %w", srv.Name, err)
	}
	ours := map[string]*tg.Tool{}
	for i := range owned.Items {
		if t := &owned.Items[i]; metav1.IsControlledBy(t, srv) {
			ours[t.Name] = t
		}
	}
	var entries []tg.MCPDiscoveredTool
	var toolNames []string
	byName := listed(tools)
	limits := r.Options.Limits.WithDefaults()
	for _, t := range tools {
		if !exposed(srv.Spec.Tools, t.Name) {
			continue
		}
		e := tg.MCPDiscoveredTool{Name: t.Name}
		if lerr := limits.CheckTool(t); lerr != nil {
			_, words := overLimit(lerr)
			e.Name, e.Message = mcpclient.ShortName(t.Name, limits.MaxNameBytes), "the tool cannot be a Tool: "+words
			if out.over == nil {
				out.over = lerr
			}
		} else if n, err := ToolName(srv.Name, t.Name); err != nil {
			e.Message = err.Error()
		} else if msg := previewNotListed(srv, t.Name, byName); msg != "" {
			e.Message = msg
			out.noPreview = append(out.noPreview, t.Name)
		} else {
			e.ToolName = n
			toolNames = append(toolNames, n)
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b tg.MCPDiscoveredTool) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(out.noPreview)
	objectNames := ObjectNames(toolNames)
	keep := map[string]bool{}
	for i := range entries {
		e := &entries[i]
		if e.ToolName == "" {
			continue
		}
		t := byName[e.Name]
		schema, err := canonicalSchema(t)
		if err != nil {
			e.ToolName, e.Message = "", "the tool cannot be a Tool: "+err.Error()
			continue
		}
		e.SchemaHash = SchemaHash(schema)
		name := objectNames[e.ToolName]
		spec, err := desiredSpec(srv, e.ToolName, t, schema, conn, exec)
		if err != nil {
			return out, err
		}
		conflict, err := r.apply(ctx, srv, desiredTool(srv, name, t, spec), ours[name])
		if err != nil {
			return out, err
		}
		if conflict {
			e.Message = fmt.Sprintf("Tool %s exists and is not this MCPServer's", name)
			out.conflicts = append(out.conflicts, name)
			continue
		}
		e.Tool = name
		keep[name] = true
		if _, dropped := carriedApproval(srv, t.Name); len(dropped) > 0 {
			e.Message = fmt.Sprintf("exposed by a glob only: the Approve rules of spec.toolTemplate.approval (%s) are not carried into its Tool, so a human decides its calls unless another rule does; name the tool in spec.tools for them to apply", strings.Join(dropped, ", "))
		}
	}
	for name, t := range ours {
		if keep[name] {
			continue
		}
		if err := r.Delete(ctx, t, client.Preconditions{UID: &t.UID}); client.IgnoreNotFound(err) != nil {
			return out, fmt.Errorf("deleting Tool %s, whose tool is no longer exposed (or lost its preview tool): %w", name, err)
		}
	}
	out.entries = entries
	return out, nil
}

// desiredTool is the Tool generated for the server's tool t, named name.
func desiredTool(srv *tg.MCPServer, name string, t *mcp.Tool, spec tg.ToolSpec) *tg.Tool {
	return &tg.Tool{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   srv.Namespace,
			Labels:      map[string]string{tg.LabelMCPServer: srv.Name},
			Annotations: map[string]string{descriptionAnnotation: description(srv, t)},
		},
		Spec: spec,
	}
}

// apply creates want, or patches cur (the MCPServer's own Tool of that name, nil when it has none)
// when its spec, label or description differ. It reports a conflict when a Tool of that name exists
// that is not the MCPServer's.
func (r *Reconciler) apply(ctx context.Context, srv *tg.MCPServer, want, cur *tg.Tool) (conflict bool, err error) {
	if cur == nil {
		if err := controllerutil.SetControllerReference(srv, want, r.Scheme()); err != nil {
			return false, err
		}
		switch err := r.Create(ctx, want); {
		case err == nil:
			return false, nil
		case !apierrors.IsAlreadyExists(err):
			return false, fmt.Errorf("creating Tool %s: %w", want.Name, err)
		}
		// It exists: its own Tool whose label someone removed is taken back, another is a conflict.
		cur = &tg.Tool{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(want), cur); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if !metav1.IsControlledBy(cur, srv) {
			return true, nil
		}
	}
	same, err := jsonEqual(cur.Spec, want.Spec)
	if err != nil {
		return false, err
	}
	if same && cur.Labels[tg.LabelMCPServer] == srv.Name && cur.Annotations[descriptionAnnotation] == want.Annotations[descriptionAnnotation] {
		return false, nil
	}
	upd := cur.DeepCopy()
	upd.Spec = want.Spec
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	upd.Labels[tg.LabelMCPServer] = srv.Name
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[descriptionAnnotation] = want.Annotations[descriptionAnnotation]
	// A merge patch computed from the cached Tool: no conflict with the Tool controller's status
	// writes; a field someone added to the spec since is removed at the next listing.
	if err := r.Patch(ctx, upd, client.MergeFrom(cur)); err != nil {
		return false, fmt.Errorf("updating Tool %s: %w", cur.Name, err)
	}
	return false, nil
}

// jsonEqual compares a and b as JSON values: the Tool read back from the apiserver holds the same
// schema with its keys in another order.
func jsonEqual(a, b any) (bool, error) {
	var va, vb any
	for _, p := range []struct {
		in  any
		out *any
	}{{a, &va}, {b, &vb}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			return false, err
		}
	}
	return reflect.DeepEqual(va, vb), nil
}

// refreshInterval is spec.refreshInterval, or its default.
func refreshInterval(srv *tg.MCPServer) time.Duration {
	if d := srv.Spec.RefreshInterval; d != nil && d.Duration > 0 {
		return d.Duration
	}
	d, _ := time.ParseDuration(tg.DefaultMCPRefreshInterval)
	return d
}

// Readiness is every reason of an MCPServer's Ready condition, with what it means for kstatus.
func Readiness() []readiness.Row {
	return []readiness.Row{
		{Kind: tg.KindMCPServer, Reason: tg.ReasonToolsDiscovered, Progress: readiness.Usable},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonServerUnreachable, Progress: readiness.Retrying},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonHeaderSecretUnavailable, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonCABundleInvalid, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonToolNameConflict, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonInvalidMCPServerSpec, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonServerResponseTooLarge, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonServerEventTooLarge, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonTooManyTools, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonToolSchemaTooLarge, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonToolDescriptionTooLarge, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonToolNameTooLong, Progress: readiness.Stalled},
		{Kind: tg.KindMCPServer, Reason: tg.ReasonPreviewToolNotListed, Progress: readiness.Stalled},
	}
}

// SetupWithManager registers the MCPServer controller: creation, deletion and spec changes of
// MCPServers, changes to the Tools they own (someone edited or deleted one), and a server's
// notifications/tools/list_changed (listen.go) trigger it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.WithDefaults()
	r.listeners = newListeners(mgr.GetLogger().WithName("mcpserver-listeners"), r.Options)
	if err := mgr.Add(r.listeners); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&tg.MCPServer{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&tg.Tool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.listeners.events, &handler.EnqueueRequestForObject{})).
		Named("mcpserver").
		// A server that does not answer holds its worker for up to DiscoveryTimeout: the others go on.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}
