package mcpgateway

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Sessions: the calls in progress of each session, so that they are abandoned (their ToolCalls
// withdrawn) when the session ends or the gateway closes.

// HTTPHandler serves the gateway over MCP's streamable HTTP transport, one stateful session per
// client. When a client ends its session (HTTP DELETE), its calls still waiting are abandoned: their
// ToolCalls are deleted, which cancels their approval requests. Without opts.Logger the transport
// logs to Options.Logger.
func (g *Gateway) HTTPHandler(opts *mcp.StreamableHTTPOptions) http.Handler {
	var o mcp.StreamableHTTPOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = g.sdkLog
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server }, &o)
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				g.abandonSession(id, ownerOf(auth.TokenInfoFromContext(r.Context())))
			}
		}
		if g.callers != nil && r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			// A new session (initialize): only for a caller who may call a Tool, within its limit.
			if !g.admitSession(w, r) {
				return
			}
			sw := &sessionWriter{ResponseWriter: w}
			h.ServeHTTP(sw, r)
			if sw.id != "" {
				g.sessions.add(sw.id, ownerOf(auth.TokenInfoFromContext(r.Context())))
			}
			return
		}
		h.ServeHTTP(w, r)
	})
	if g.callers != nil {
		handler = g.callers.handler(handler)
	}
	return handler
}

// ownerOf is the authenticated caller a session belongs to ("" without authentication).
func ownerOf(ti *auth.TokenInfo) string {
	if ti == nil {
		return ""
	}
	return ti.UserID
}

// track records a call in progress for its session and returns the function that forgets it, or
// false once the gateway is closed.
func (g *Gateway) track(session, owner string, cancel context.CancelCauseFunc) (func(), bool) {
	call := &inflightCall{owner: owner, cancel: cancel}
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

// abandonSession cancels the calls in progress of a session that its owner is ending. (The SDK
// refuses to end a session for anyone else, once its calls have returned.)
func (g *Gateway) abandonSession(session, owner string) {
	g.inflightMu.Lock()
	calls := slices.Collect(maps.Keys(g.inflight[session]))
	g.inflightMu.Unlock()
	for _, c := range calls {
		if c.owner == owner {
			c.cancel(errSessionClosed)
		}
	}
}

// Close abandons every call in progress, as if each client had cancelled it: the gateway withdraws
// their ToolCalls (deletes them as itself), which cancels their approval requests, so no tool runs
// for a caller that is gone. Calls that arrive afterwards are refused. Close waits until the
// abandoned calls have returned and the withdrawals still being retried (the apiserver was
// unreachable) have ended, or until ctx ends: then it stops those retries, waits for them to return,
// and reports the ToolCalls left behind. Call it before stopping the transports: the SDK closes a
// session only once its requests have returned.
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
	returned := make(chan struct{})
	go func() {
		g.running.Wait()
		close(returned)
	}()
	select {
	case <-returned:
	case <-ctx.Done():
		g.endWithdrawals()
		g.withdrawals.Wait() // stopped, they return at once; no new one starts
		return fmt.Errorf("%d abandoned calls had not returned: %w", len(calls), ctx.Err())
	}
	// No call is in progress and none can start: no retry starts any more either.
	withdrawn := make(chan struct{})
	go func() {
		g.withdrawals.Wait()
		close(withdrawn)
	}()
	select {
	case <-withdrawn:
		g.endWithdrawals()
		return nil
	case <-ctx.Done():
		left := g.ownedNames()
		g.endWithdrawals()
		<-withdrawn
		return fmt.Errorf("ToolCalls %s could not be withdrawn (delete them to cancel their approval requests): %w", strings.Join(left, ", "), ctx.Err())
	}
}

// endWithdrawals stops the withdrawals being retried; none starts afterwards.
func (g *Gateway) endWithdrawals() {
	g.ownedMu.Lock()
	g.withdrawalsStopped = true
	g.ownedMu.Unlock()
	g.stopWithdrawals()
}
