package mcpclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"toolgate.dev/toolgate/internal/mcpclient"
)

// hostile answers every POST with body(w) (after the headers of contentType), and counts the bytes
// it managed to write before the client hung up.
func hostile(t *testing.T, contentType string, body func(w io.Writer) error) (*httptest.Server, *atomic.Int64) {
	var written atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(http.StatusOK)
		_ = body(countingWriter{w, &written})
	}))
	t.Cleanup(ts.Close)
	return ts, &written
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// endless writes prefix, then chunks of filler until the reader hangs up (or 256 MiB, far past any
// limit under test).
func endless(prefix string, filler byte) func(w io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, prefix); err != nil {
			return err
		}
		chunk := []byte(strings.Repeat(string(filler), 64<<10))
		for range 4096 {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	}
}

func wantLimit(t *testing.T, err error, limit mcpclient.Limit, max int64) {
	t.Helper()
	var lerr *mcpclient.LimitError
	if !errors.As(err, &lerr) || lerr.Limit != limit || lerr.Max != max {
		t.Fatalf("want the %s limit of %d, got %v", limit, max, err)
	}
	var merr *mcpclient.Error
	if !errors.As(err, &merr) || merr.Summary != lerr.Error() {
		t.Fatalf("want an *Error whose summary is %q, got %v", lerr.Error(), err)
	}
}

// An initialize answer that never ends is read up to the response limit, and no further.
func TestAnOversizedAnswerIsCutAtTheResponseLimit(t *testing.T) {
	ts, written := hostile(t, "application/json", endless(`{"jsonrpc":"2.0","id":1,"result":{"x":"`, 'a'))
	const max = 1 << 20
	cfg := mcpclient.Config{URL: ts.URL, AllowInsecureHTTP: true, Limits: mcpclient.Limits{MaxResponseBytes: max}}
	_, err := mcpclient.Discover(context.Background(), cfg, 20*time.Second)
	wantLimit(t, err, mcpclient.LimitResponse, max)
	ts.CloseClientConnections()
	// What the server could write is the limit plus what the sockets' buffers held.
	if w := written.Load(); w > 64<<20 {
		t.Fatalf("the server wrote %d bytes before the client hung up", w)
	}
}

// An SSE event that never ends is read up to the event limit.
func TestAnEndlessEventIsCutAtTheEventLimit(t *testing.T) {
	ts, _ := hostile(t, "text/event-stream", endless("event: message\ndata: ", 'a'))
	const max = 64 << 10
	cfg := mcpclient.Config{URL: ts.URL, AllowInsecureHTTP: true, Limits: mcpclient.Limits{MaxEventBytes: max}}
	_, err := mcpclient.Discover(context.Background(), cfg, 20*time.Second)
	wantLimit(t, err, mcpclient.LimitEvent, max)
}

// An event of endless short lines (no empty line ends it): the event limit counts all its lines.
func TestAnEventOfManyLinesIsCutAtTheEventLimit(t *testing.T) {
	lines := func(w io.Writer) error {
		chunk := []byte(strings.Repeat("data: aaaaaaaaaaaaaaaaaaaaaaaa\r\n", 2048))
		for range 4096 {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	}
	ts2, _ := hostile(t, "text/event-stream", lines)
	const max = 64 << 10
	cfg := mcpclient.Config{URL: ts2.URL, AllowInsecureHTTP: true, Limits: mcpclient.Limits{MaxEventBytes: max}}
	_, err := mcpclient.Discover(context.Background(), cfg, 20*time.Second)
	wantLimit(t, err, mcpclient.LimitEvent, max)
}

// toolServer is the Go SDK's MCP server with n tools, over a real socket.
func toolServer(t *testing.T, n int) *httptest.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "v1"}, &mcp.ServerOptions{PageSize: 7})
	for i := range n {
		s.AddTool(&mcp.Tool{Name: fmt.Sprintf("tool-%03d", i), InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(ts.Close)
	return ts
}

// The tools limit counts over every page of tools/list.
func TestTheToolsLimitCountsEveryPage(t *testing.T) {
	ts := toolServer(t, 30)
	cfg := mcpclient.Config{URL: ts.URL, AllowInsecureHTTP: true, Limits: mcpclient.Limits{MaxTools: 30}}
	tools, err := mcpclient.Discover(context.Background(), cfg, 20*time.Second)
	if err != nil || len(tools) != 30 {
		t.Fatalf("at the limit: %d tools, %v", len(tools), err)
	}
	cfg.Limits.MaxTools = 29
	_, err = mcpclient.Discover(context.Background(), cfg, 20*time.Second)
	wantLimit(t, err, mcpclient.LimitTools, 29)
}

func TestCheckTool(t *testing.T) {
	l := mcpclient.Limits{MaxNameBytes: 8, MaxDescriptionBytes: 16, MaxSchemaBytes: 32}
	small := map[string]any{"type": "object"}
	for _, c := range []struct {
		name string
		tool mcp.Tool
		want mcpclient.Limit
	}{
		{"within", mcp.Tool{Name: "12345678", Description: strings.Repeat("d", 16), InputSchema: small}, ""},
		{"name", mcp.Tool{Name: "123456789", InputSchema: small}, mcpclient.LimitName},
		{"description", mcp.Tool{Name: "a", Description: strings.Repeat("d", 17), InputSchema: small}, mcpclient.LimitDescription},
		{"title", mcp.Tool{Name: "a", Title: strings.Repeat("d", 17), InputSchema: small}, mcpclient.LimitDescription},
		{"schema", mcp.Tool{Name: "a", InputSchema: map[string]any{"type": "object", "description": strings.Repeat("s", 20)}}, mcpclient.LimitSchema},
	} {
		got := l.CheckTool(&c.tool)
		if (got == nil) != (c.want == "") || (got != nil && got.Limit != c.want) {
			t.Errorf("%s: CheckTool = %v, want %q", c.name, got, c.want)
		}
	}
}

// The summary of a failure is a stable class that names no address, port or banner; the detail
// keeps them for the log.
func TestFailuresAreClassesWithoutTheNetworksWords(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String() + "/mcp"
	_ = closed.Close()

	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsServer.Close)
	banner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Server", "internal-admin/1.2")
		http.Error(w, "internal-admin 1.2 at 10.1.2.3: not found", http.StatusNotFound)
	}))
	t.Cleanup(banner.Close)
	silent := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the client hang up
		<-r.Context().Done()
	}))
	t.Cleanup(silent.Close)
	notMCP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"welcome":"internal-admin 1.2"}`)
	}))
	t.Cleanup(notMCP.Close)

	for _, c := range []struct {
		name, url, want string
		timeout         time.Duration
	}{
		{"refused", refused, mcpclient.SummaryUnreachable, 10 * time.Second},
		{"tls", tlsServer.URL, mcpclient.SummaryTLS, 10 * time.Second},
		{"status", banner.URL, "HTTP 404", 10 * time.Second},
		{"timeout", silent.URL, mcpclient.SummaryTimeout, 300 * time.Millisecond},
		{"not MCP", notMCP.URL, mcpclient.SummaryNotMCP, 10 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := mcpclient.Discover(context.Background(), mcpclient.Config{URL: c.url, AllowInsecureHTTP: true}, c.timeout)
			var merr *mcpclient.Error
			if !errors.As(err, &merr) || merr.Summary != c.want {
				t.Fatalf("want the class %q, got %v", c.want, err)
			}
			if merr.Err == nil || merr.Err.Error() == "" {
				t.Fatal("the detail is empty")
			}
		})
	}
}
