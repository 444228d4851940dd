// Command mcpagent is an agent built on the official MCP Go SDK client, for the MCP gateway's tests
// (internal/mcpgateway), which run it as a child process and kill it mid-call. It connects to the
// gateway's streamable HTTP endpoint, lists the tools, starts one tools/call and reports on stdout,
// one line each: "listed <names>", "calling", "result <json>", "error <message>". It never exits by
// itself while stdin is open. The TypeScript SDK's agent, which obeys the same lines, is ts/agent.cjs.
//
// Usage: mcpagent <url> <tool> <arguments JSON>
// When $TOOLGATE_MCP_TOKEN is set, every request carries it as a bearer token.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: mcpagent <url> <tool> <arguments JSON>")
		os.Exit(2)
	}
	url, tool, args := os.Args[1], os.Args[2], os.Args[3]
	ctx := context.Background()
	c := mcp.NewClient(&mcp.Implementation{Name: "toolgate-test-go-agent", Version: "v1"}, nil)
	transport := &mcp.StreamableClientTransport{Endpoint: url}
	if token := os.Getenv("TOOLGATE_MCP_TOKEN"); token != "" {
		transport.HTTPClient = &http.Client{Transport: bearer(token)}
	}
	cs, err := c.Connect(ctx, transport, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	names := make([]string, len(res.Tools))
	for i, t := range res.Tools {
		names[i] = t.Name
	}
	fmt.Println("listed", strings.Join(names, ","))

	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
		if err != nil {
			fmt.Println("error", err)
			return
		}
		b, _ := json.Marshal(res)
		fmt.Println("result", string(b))
	}()
	fmt.Println("calling")

	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		if strings.TrimSpace(lines.Text()) == "close" {
			_ = cs.Close()
			fmt.Println("closed")
		}
	}
}

// bearer sends its token with every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
