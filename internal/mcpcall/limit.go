package mcpcall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"toolgate.dev/toolgate/internal/mcpclient"
)

// DefaultMaxResponseBytes is the default bound of each HTTP response body mcp-call reads: a ToolCall
// keeps 4096 bytes of a result, so an answer of a mebibyte is already far more than is kept, and
// decoding it stays within a few mebibytes of the executor's memory.
const DefaultMaxResponseBytes int64 = 1 << 20

// EnvMaxResponseBytes is the env (and --max-response-bytes the flag) that sets the bound.
const EnvMaxResponseBytes = "MCP_MAX_RESPONSE_BYTES"

// ParseMaxResponseBytes reads the bound as EnvMaxResponseBytes or the flag gives it: "" is the
// default; anything else must be a positive number of bytes.
func ParseMaxResponseBytes(s string) (int64, error) {
	if s == "" {
		return DefaultMaxResponseBytes, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s (or --max-response-bytes) is %q: set it to a positive number of bytes, such as %d (the default), or leave it unset", EnvMaxResponseBytes, s, DefaultMaxResponseBytes)
	}
	return n, nil
}

// errResponseTooLarge ends the read of a body over the bound.
var errResponseTooLarge = errors.New("the MCP server's answer is larger than " + EnvMaxResponseBytes)

// connect opens a session as mcpclient.Connect does (no standalone SSE stream, no reconnection),
// with every response body cut off after limit bytes: over is set when one was, and the read that
// went over fails. The SDK's own bound of an SSE event is set above limit, so that the body's bound
// is always the one that ends an oversized event, and over says so.
func connect(ctx context.Context, c mcpclient.Config, limit int64, over *atomic.Bool) (*mcp.ClientSession, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	hc, err := c.HTTPClient()
	if err != nil {
		return nil, err
	}
	hc.Transport = &limitedTransport{base: hc.Transport, limit: limit, over: over}
	client := mcp.NewClient(&mcp.Implementation{Name: "toolgate", Version: c.Version}, nil)
	maxEvent := limit + 1
	if maxEvent > int64(^uint(0)>>1) {
		maxEvent = int64(^uint(0) >> 1)
	}
	transport := &mcp.StreamableClientTransport{
		Endpoint:             c.URL,
		HTTPClient:           hc,
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
		MaxEventSize:         int(maxEvent),
	}
	return client.Connect(ctx, transport, nil)
}

// limitedTransport bounds the body of every response base returns.
type limitedTransport struct {
	base  http.RoundTripper
	limit int64
	over  *atomic.Bool
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if resp.ContentLength > t.limit {
		_ = resp.Body.Close()
		t.over.Store(true)
		return nil, errResponseTooLarge
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.limit, over: t.over}
	return resp, nil
}

// limitedBody reads at most left bytes of rc; reading past them fails with errResponseTooLarge.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	over *atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errResponseTooLarge
	}
	// Read one byte beyond what is left, to tell a body that ends at the bound from one that goes on.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n = int(b.left)
		b.left = -1
		b.over.Store(true)
		return n, errResponseTooLarge
	}
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
