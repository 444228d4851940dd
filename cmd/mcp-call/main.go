// Command mcp-call is the container of the Jobs of the Tools an MCPServer generates: it calls one tool
// of a streamable HTTP MCP server once, with exactly the approved arguments, and writes the tool's
// result (its structuredContent as JSON, else its text) to /dev/termination-log, which Toolgate copies
// into the ToolCall's status.result. Kubernetes keeps 4096 bytes of it: a longer result is cut, with a
// marker saying how much was kept.
//
// It reads the call from its env: MCP_SERVER_URL, MCP_TOOL, MCP_ALLOW_INSECURE_HTTP, MCP_CA_BUNDLE,
// MCP_HEADER_<i>_NAME and MCP_HEADER_<i>_VALUE (set by the generated Tool's jobTemplate) and
// TOOL_ARGUMENTS (set by the ToolCall controller). TERMINATION_LOG overrides where the message goes,
// for running it outside a Pod.
//
// Exit codes: 0 the tool answered; 1 the tool answered with isError (its own words are the message);
// 2 the call was never sent (the tool did not run); 3 the connection was lost after the call was
// sent: the tool may have run, and it is not called again; 4 the server refused the call with a
// protocol error (an unknown tool, invalid arguments).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"toolgate.dev/toolgate/internal/mcpcall"
)

const terminationLog = "/dev/termination-log"

func main() {
	path := os.Getenv("TERMINATION_LOG")
	if path == "" {
		path = terminationLog
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	o := mcpcall.Run(ctx, mcpcall.FromEnv(os.Getenv, "v1alpha1"))
	stop()
	fmt.Println(o.Message)
	if err := os.WriteFile(path, []byte(o.Message), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "mcp-call: writing the result to %s: %v\n", path, err)
	}
	os.Exit(o.Code)
}
