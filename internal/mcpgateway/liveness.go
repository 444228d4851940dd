package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// errClientGone is the cause with which a call is abandoned when its client stopped answering.
var errClientGone = errors.New("the MCP client is gone")

// pingClient pings the client of a tools/call in progress over streamable HTTP every PingInterval
// until ctx ends, and abandons the call (abandon) when a ping fails.
//
// The ping is sent with the call's own context, so the SDK routes it onto the call's response stream
// (the SSE response of the client's POST). The SDK keeps a call running when that stream's HTTP
// request ends, so that a client could resume it; the gateway keeps no event store, so nothing can
// be resumed and the result could never be delivered. A killed agent, a dropped connection or a
// client's close() all end that request: the next ping cannot be delivered and fails at once. A
// client that is unreachable without its connection closing (a network partition, a frozen
// process) does not answer within PingInterval. Either way the call is abandoned.
func (g *Gateway) pingClient(ctx context.Context, ss *mcp.ServerSession, abandon context.CancelCauseFunc) {
	interval := g.opts.PingInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pingCtx, cancel := context.WithTimeout(ctx, interval)
		err := ss.Ping(pingCtx, nil)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			continue
		case isMethodNotFound(err):
			// A client that does not implement ping (MCP requires it) cannot be checked: its call
			// waits until its waiting limit as before.
			g.log.Info("the MCP client does not answer ping; a call it abandons waits for its waiting limit", "session", ss.ID())
			return
		}
		g.log.Info("the MCP client of a call in progress is gone; abandoning the call", "session", ss.ID(), "error", err)
		abandon(fmt.Errorf("%w: %v", errClientGone, err))
		return
	}
}

func isMethodNotFound(err error) bool {
	var werr *jsonrpc.Error
	return errors.As(err, &werr) && werr.Code == jsonrpc.CodeMethodNotFound
}
