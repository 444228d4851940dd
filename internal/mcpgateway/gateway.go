// Package mcpgateway serves a namespace's Tools to MCP clients. Every Tool becomes an MCP tool of the
// same name (spec.toolName) whose inputSchema is the Tool's argumentsSchema; every tools/call becomes
// a ToolCall, so a human approves it before it runs, and the call answers with the tool's result or
// with an explanation of why it did not run.
//
// gateway.go holds the options and the server; tools.go publishes the Tools (an informer, and fresh
// reads for tools/list); calls.go turns a tools/call into a ToolCall and its outcome into a result;
// sessions.go tracks the calls in progress of each session and abandons them when it ends;
// liveness.go abandons the calls of HTTP clients that are gone; withdraw.go deletes, as the gateway,
// the ToolCalls of abandoned calls.
package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// Auth authenticates the callers of the streamable HTTP endpoint and acts as each of them (see
	// Auth). Nil: HTTP callers are not authenticated and every ToolCall is created as the gateway's
	// own identity, as over stdio.
	Auth *Auth
	// Labels are added to every ToolCall the gateway creates, besides LabelVia=mcp.
	Labels map[string]string
	// Logger receives the gateway's log lines, and the MCP SDK's (its server's, and its streamable
	// HTTP transport's unless HTTPHandler is given another): the SDK takes a *slog.Logger, which
	// logr.ToSlogHandler makes from this one. The gateway logs with Info (what it did, or retries;
	// V(1) for details) and Error (what an operator may have to act on). Default (the zero Logger):
	// discarded.
	Logger logr.Logger
	// Registerer receives the gateway's metrics (metrics.go). Nil: none are registered.
	Registerer prometheus.Registerer

	// clock and backoff time the retries of a withdrawal that failed (withdraw.go); tests replace
	// them. Default: the real clock and defaultWithdrawBackoff.
	clock   clock.Clock
	backoff wait.Backoff
}

// Gateway is an MCP server whose tools are the Tools of one namespace.
type Gateway struct {
	c         client.WithWatch
	namespace string
	opts      Options
	calls     *toolcall.Client // as the gateway's own identity
	callers   *callers         // nil without Options.Auth
	server    *mcp.Server
	metrics   *metrics
	log       logr.Logger
	sdkLog    *slog.Logger // Options.Logger for the MCP SDK

	publishedMu sync.Mutex
	published   map[string]string // MCP tool name -> JSON of the registered definition

	sessions sessionOwners // who opened each HTTP session

	inflightMu sync.Mutex
	inflight   map[string]map[*inflightCall]struct{} // session id -> calls in progress
	closed     bool
	running    sync.WaitGroup // calls in progress

	ownedMu            sync.Mutex
	owned              map[types.UID]*ownedCall // the ToolCalls it created, until their outcome or withdrawal
	withdrawalsStopped bool
	withdrawals        sync.WaitGroup // withdrawals retried in the background
	withdrawCtx        context.Context
	stopWithdrawals    context.CancelFunc
}

type inflightCall struct {
	owner  string // the authenticated caller, if any
	cancel context.CancelCauseFunc
}

// The causes with which a call in progress is abandoned.
var (
	errSessionClosed = errors.New("the MCP client closed its session")
	errGatewayClosed = errors.New("the MCP gateway is shutting down")
)

// New returns a gateway for the Tools of namespace. c is the gateway's own identity: it needs
// get/list/watch on tools and delete on toolcalls in that namespace (it withdraws the ToolCalls of
// abandoned calls itself, see withdraw.go) and, for the calls it makes as itself (stdio, or HTTP
// without Options.Auth), create/get/list/watch on toolcalls there too.
func New(c client.WithWatch, namespace string, o Options) (*Gateway, error) {
	if o.WaitingLimit <= 0 {
		o.WaitingLimit = DefaultWaitingLimit
	}
	if o.PingInterval == 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	if o.backoff == (wait.Backoff{}) {
		o.backoff = defaultWithdrawBackoff
	}
	labels := map[string]string{LabelVia: "mcp"}
	maps.Copy(labels, o.Labels)
	o.Labels = labels

	g := &Gateway{
		c:         c,
		namespace: namespace,
		opts:      o,
		calls:     toolcall.New(c, namespace),
		log:       o.Logger.WithValues("namespace", namespace),
		sdkLog:    slog.New(logr.ToSlogHandler(o.Logger)),
		published: map[string]string{},
		inflight:  map[string]map[*inflightCall]struct{}{},
		owned:     map[types.UID]*ownedCall{},
	}
	g.withdrawCtx, g.stopWithdrawals = context.WithCancel(context.Background())
	if o.Auth != nil {
		var err error
		if g.callers, err = newCallers(o.Auth); err != nil {
			return nil, err
		}
	}
	var err error
	if g.metrics, err = newMetrics(g, o.Registerer); err != nil {
		return nil, fmt.Errorf("registering the gateway's metrics: %w", err)
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "Toolgate", Version: version()}, &mcp.ServerOptions{
		Instructions: fmt.Sprintf("These tools are the Toolgate Tools of Kubernetes namespace %s. "+
			"Every call waits until a human approves it, which may take minutes, and may be denied: "+
			"a call that did not run returns an error result explaining why.", namespace),
		Logger: g.sdkLog,
		// Advertise tools (with list_changed) even while the namespace has none yet.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	g.server.AddReceivingMiddleware(g.freshTools)
	return g, nil
}

// Server is the MCP server, e.g. for Server().Run(ctx, &mcp.StdioTransport{}).
func (g *Gateway) Server() *mcp.Server { return g.server }

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
