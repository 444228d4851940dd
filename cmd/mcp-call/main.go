// Command mcp-call is the container of the Jobs of the Tools an MCPServer generates: it calls one tool
// of a streamable HTTP MCP server once, with exactly the approved arguments, and writes the tool's
// result (its structuredContent as JSON, else its text) to /dev/termination-log, which Toolgate copies
// into the ToolCall's status.result. Kubernetes keeps 4096 bytes of it: a longer result is cut, with a
// marker saying how much was kept.
//
// It reads the call from its env: MCP_SERVER_URL, MCP_TOOL, MCP_ALLOW_INSECURE_HTTP, MCP_CA_BUNDLE,
// MCP_HEADER_<i>_NAME and MCP_HEADER_<i>_VALUE (set by the generated Tool's jobTemplate) and
// TOOL_ARGUMENTS (set by the ToolCall controller). TERMINATION_LOG overrides where the message goes,
// for running it outside a Pod. MCP_MAX_RESPONSE_BYTES, or the flag --max-response-bytes, bounds each
// HTTP response body it reads from the server, and so each SSE event (default 1 MiB): an answer to
// the call over it is not read, and the call ends "may have run" (exit 3). In a preview Job
// (TOOLGATE_MODE=preview, for an MCPServer's spec.previews) the message is cut to
// TOOLGATE_PREVIEW_MAX_BYTES (the Tool's spec.preview.maxBytes, at most 4000) instead of 4096, with
// the same marker, so that a long preview is shown cut rather than refused by the manager.
//
// Exit codes: 0 the tool answered; 1 the tool answered with isError (its own words are the message);
// 2 the call was never sent (the tool did not run); 3 the connection was lost after the call was
// sent: the tool may have run, and it is not called again; 4 the server refused the call with a
// protocol error (an unknown tool, invalid arguments).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"toolgate.dev/toolgate/internal/mcpcall"
)

const terminationLog = "/dev/termination-log"

func main() {
	path := os.Getenv("TERMINATION_LOG")
	if path == "" {
		path = terminationLog
	}
	flags := flag.NewFlagSet("mcp-call", flag.ExitOnError)
	maxResponse := flags.String("max-response-bytes", os.Getenv(mcpcall.EnvMaxResponseBytes),
		"the bound of each HTTP response body (and so each SSE event) read from the server, in bytes; default "+
			strconv.FormatInt(mcpcall.DefaultMaxResponseBytes, 10)+" (env "+mcpcall.EnvMaxResponseBytes+")")
	_ = flags.Parse(os.Args[1:])
	call := mcpcall.FromEnv(os.Getenv, "v1alpha1")
	var o mcpcall.Outcome
	n, err := mcpcall.ParseMaxResponseBytes(*maxResponse)
	m, merr := mcpcall.ParseMessageBytes(os.Getenv(mcpcall.EnvMode), os.Getenv(mcpcall.EnvPreviewMaxBytes))
	switch {
	case err != nil:
		o = mcpcall.Outcome{Code: mcpcall.ExitNotRun, Message: "mcp-call: " + err.Error() + ". " + mcpcall.NotCalled}
	case merr != nil:
		o = mcpcall.Outcome{Code: mcpcall.ExitNotRun, Message: "mcp-call: " + merr.Error() + ". " + mcpcall.NotCalled}
	default:
		call.MaxResponseBytes, call.MessageBytes = n, m
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		o = mcpcall.Run(ctx, call)
		stop()
	}
	fmt.Println(o.Message)
	if err := os.WriteFile(path, []byte(o.Message), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "mcp-call: writing the result to %s: %v\n", path, err)
	}
	os.Exit(o.Code)
}
