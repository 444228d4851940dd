// Package mcpcall is the mcp-call executor's logic: call one tool of a streamable HTTP MCP server
// once, with exactly the approved arguments, and say what came of it in words a ToolCall's result
// can carry. The Job that runs it has backoffLimit 0 and the executor never retries, so the tool is
// called at most once per approved call.
package mcpcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"toolgate.dev/toolgate/internal/mcpclient"
)

// Container is the name of the container that runs mcp-call in the Job of a Tool an MCPServer
// generated: the MCPServer controller names it so, and the ToolCall controller reads the outcome of
// that container only.
const Container = "mcp-call"

// Exit codes of mcp-call: each outcome has its own, and its message says the same in words.
const (
	// ExitSucceeded: the tool answered with a result.
	ExitSucceeded = 0
	// ExitToolError: the tool answered with isError; the message is the tool's own words.
	ExitToolError = 1
	// ExitNotRun: the call was never sent (bad settings or arguments, the server could not be
	// reached or refused the session): the tool did not run.
	ExitNotRun = 2
	// ExitMayHaveRun: the call was sent and the connection was lost before the answer came: the tool
	// may have run. It is not called again.
	ExitMayHaveRun = 3
	// ExitRefused: the server answered the call with a protocol error (an unknown tool, invalid
	// arguments): it says the tool did not run.
	ExitRefused = 4
)

// The last sentence of mcp-call's messages for the outcomes that say the tool did not run: the
// ToolCall controller trusts exit 2 and 4 only with these words, since a Go runtime crash (an
// allocation failure included) also exits 2, after the call may have been sent.
const (
	// NotCalled ends the message of every ExitNotRun outcome.
	NotCalled = "The tool was not called."
	// DidNotRun ends the message of every ExitRefused outcome.
	DidNotRun = "The tool did not run."
)

// MaxMessageBytes is what Kubernetes keeps of a termination message, and so of a ToolCall's result.
const MaxMessageBytes = 4096

// Outcome is the exit code and the message mcp-call writes as the termination message.
type Outcome struct {
	Code    int
	Message string
}

// Call is one approved call: the server at cfg, its tool, and the approved arguments (TOOL_ARGUMENTS).
type Call struct {
	Server    mcpclient.Config
	Tool      string
	Arguments []byte
	// MaxResponseBytes bounds each HTTP response body mcp-call reads from the server (the
	// initialize answer, the call's answer, as JSON or as an SSE stream, and so each event of it).
	// 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// MessageBytes bounds the message: a longer one is cut, with a marker saying so. 0 means
	// MaxMessageBytes; a preview Job sets its maxBytes (ParseMessageBytes).
	MessageBytes int
}

// Run calls the tool once with the arguments as they are (a JSON object, sent as its own JSON text,
// never decoded and encoded again) and returns the outcome, its message cut to c.MessageBytes
// (MaxMessageBytes when it is 0).
func Run(ctx context.Context, c Call) Outcome {
	o := run(ctx, c)
	limit := c.MessageBytes
	if limit <= 0 {
		limit = MaxMessageBytes
	}
	switch {
	case o.Code == ExitNotRun && strings.HasSuffix(o.Message, NotCalled):
		o.Message = cutKeepingEnd(o.Message, NotCalled, limit)
	case o.Code == ExitRefused && strings.HasSuffix(o.Message, DidNotRun):
		o.Message = cutKeepingEnd(o.Message, DidNotRun, limit)
	default:
		o.Message = Cut(o.Message, limit)
	}
	return o
}

// cutKeepingEnd cuts msg, which ends with end, to max bytes with end still its last words.
func cutKeepingEnd(msg, end string, max int) string {
	if len(msg) <= max {
		return msg
	}
	return Cut(strings.TrimSuffix(msg, end), max-len(end)-1) + " " + end
}

func run(ctx context.Context, c Call) Outcome {
	if c.Tool == "" {
		return Outcome{ExitNotRun, "mcp-call: no tool to call: set " + mcpclient.EnvTool + ". " + NotCalled}
	}
	args := bytes.TrimSpace(c.Arguments)
	if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
		return Outcome{ExitNotRun, "mcp-call: TOOL_ARGUMENTS is not a JSON object. " + NotCalled}
	}
	limit := c.MaxResponseBytes
	if limit <= 0 {
		limit = DefaultMaxResponseBytes
	}
	var over atomic.Bool
	s, err := connect(ctx, c.Server, limit, &over)
	switch {
	case err != nil && over.Load():
		return Outcome{ExitNotRun, fmt.Sprintf("mcp-call: the MCP server %s answered initialize with more than %d bytes (%s), which mcp-call does not read. %s", c.Server.URL, limit, EnvMaxResponseBytes, NotCalled)}
	case err != nil:
		return Outcome{ExitNotRun, fmt.Sprintf("mcp-call: could not open a session with the MCP server %s: %v. %s", c.Server.URL, err, NotCalled)}
	}
	defer func() { _ = s.Close() }()

	// Once a connection carries the call's request, the server may have received it: from then on a
	// failure means the tool may have run.
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { sent.Store(true) }}
	callCtx := httptrace.WithClientTrace(ctx, trace)
	res, err := s.CallTool(callCtx, &mcp.CallToolParams{Name: c.Tool, Arguments: json.RawMessage(args)})
	if err != nil {
		var wire *jsonrpc.Error
		switch {
		case over.Load():
			// The limit is checked before anything else: a part of an answer is never taken for
			// the server's word, and the call was sent.
			return Outcome{ExitMayHaveRun, fmt.Sprintf("The MCP server's answer to the call to %s was larger than %d bytes (%s), so mcp-call stopped reading it: the tool may have run. It is not called again; check the tool's own records.", c.Tool, limit, EnvMaxResponseBytes)}
		case sent.Load() && errors.As(err, &wire) && refusal(wire.Code):
			return Outcome{ExitRefused, fmt.Sprintf("The MCP server refused the call to %s (JSON-RPC error %d): %s. %s", c.Tool, wire.Code, wire.Message, DidNotRun)}
		case sent.Load():
			return Outcome{ExitMayHaveRun, fmt.Sprintf("The connection to the MCP server was lost after the call to %s was sent: the tool may have run. It is not called again; check the tool's own records. (%v)", c.Tool, err)}
		default:
			return Outcome{ExitNotRun, fmt.Sprintf("The call to %s could not be sent to the MCP server: %v. %s", c.Tool, err, NotCalled)}
		}
	}
	if len(res.InputRequests) > 0 {
		return Outcome{ExitToolError, fmt.Sprintf("The tool %s asked for further input, which an approved call cannot give; it was not called again.", c.Tool)}
	}
	text, err := Result(res)
	if err != nil {
		return Outcome{ExitToolError, fmt.Sprintf("The tool %s answered with a result mcp-call cannot write: %v", c.Tool, err)}
	}
	if res.IsError {
		return Outcome{ExitToolError, text}
	}
	return Outcome{ExitSucceeded, text}
}

// refusal reports whether a JSON-RPC error code says the server did not process the request at all
// (parse error, invalid request, method not found, invalid params). Any other error after the call
// was sent, an internal error of the server's included and the SDK's own codes for a broken
// transport, leaves open whether the tool ran.
func refusal(code int64) bool {
	switch code {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
		return true
	}
	return false
}

// Result is what the tool's result says: its structuredContent as JSON when it has one, else its
// text content, one block a line; other content (images, audio, resources) is named, not copied.
func Result(res *mcp.CallToolResult) (string, error) {
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s]", c.URI))
		default:
			b, err := json.Marshal(c)
			if err != nil {
				return "", err
			}
			var kind struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(b, &kind)
			parts = append(parts, fmt.Sprintf("[%s content omitted: a ToolCall's result holds text]", kind.Type))
		}
	}
	return strings.Join(parts, "\n"), nil
}

// Cut returns s if it fits in max bytes, else its beginning followed by a marker that says how much
// was kept, max bytes in all, cut on a UTF-8 character boundary. When max leaves no room for the
// marker (a preview's maxBytes of a few dozen bytes), it is the marker alone, longer than max: a cut
// is never hidden, and the manager refuses a preview over its maxBytes.
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := func(kept int) string {
		return fmt.Sprintf("\n[mcp-call: result truncated, %d of %d bytes shown]", kept, len(s))
	}
	keep := max - len(marker(len(s)))
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker(keep)
}

// FromEnv reads the call from the env of the Job's container: the server's settings (the env a
// generated Tool's jobTemplate sets) and TOOL_ARGUMENTS, which the ToolCall controller sets to the
// approved arguments.
func FromEnv(getenv func(string) string, version string) Call {
	c := Call{
		Server: mcpclient.Config{
			URL:               getenv(mcpclient.EnvURL),
			AllowInsecureHTTP: getenv(mcpclient.EnvAllowInsecureHTTP) == "true",
			CABundle:          []byte(getenv(mcpclient.EnvCABundle)),
			Version:           version,
		},
		Tool:      getenv(mcpclient.EnvTool),
		Arguments: []byte(getenv("TOOL_ARGUMENTS")),
	}
	if len(c.Server.CABundle) == 0 {
		c.Server.CABundle = nil
	}
	for i := 0; ; i++ {
		name := getenv(mcpclient.EnvHeaderName(i))
		if name == "" {
			break
		}
		c.Server.Headers = append(c.Server.Headers, mcpclient.Header{Name: name, Value: getenv(mcpclient.EnvHeaderValue(i))})
	}
	return c
}
