package mcpcall_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// bigTool is an MCP server (the Go SDK's, over a real socket) whose tool "big" answers with size
// bytes of text, as JSON (jsonResponse) or as an SSE stream.
func bigTool(t *testing.T, size int, jsonResponse bool) *httptest.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "v1"}, nil)
	s.AddTool(&mcp.Tool{Name: "big", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("a", size)}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{JSONResponse: jsonResponse}))
	t.Cleanup(hs.Close)
	return hs
}

func callWithLimit(t *testing.T, endpoint, tool string, limit int64) mcpcall.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return mcpcall.Run(ctx, mcpcall.Call{
		Server:           mcpclient.Config{URL: endpoint, AllowInsecureHTTP: true, Version: "test"},
		Tool:             tool,
		Arguments:        []byte(`{}`),
		MaxResponseBytes: limit,
	})
}

// An answer over the bound is not read: the call was sent, so the tool may have run, and the message
// names the bound and its setting. An answer within it is the result.
func TestAnswerOverTheBoundMayHaveRun(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		name := map[bool]string{false: "sse", true: "json"}[jsonResponse]
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			o := callWithLimit(t, bigTool(t, 200<<10, jsonResponse).URL, "big", 64<<10)
			g.Expect(o.Code).To(Equal(mcpcall.ExitMayHaveRun), o.Message)
			g.Expect(o.Message).To(Equal("The MCP server's answer to the call to big was larger than 65536 bytes (MCP_MAX_RESPONSE_BYTES), " +
				"so mcp-call stopped reading it: the tool may have run. It is not called again; check the tool's own records."))

			o = callWithLimit(t, bigTool(t, 32<<10, jsonResponse).URL, "big", 64<<10)
			g.Expect(o.Code).To(Equal(mcpcall.ExitSucceeded), o.Message)
			g.Expect(o.Message).To(HavePrefix("aaaa"))
		})
	}
}

// endless is an MCP server that answers initialize as the Go SDK's server does (it forwards to one)
// and answers tools/call with one SSE event that never ends, or, with initToo, answers initialize
// so. It counts the bytes it wrote.
type endless struct {
	*httptest.Server
	written atomic.Int64
}

func newEndless(t *testing.T, initToo bool) *endless {
	inner := bigTool(t, 1, false)
	e := &endless{}
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		endlessHere := bytes.Contains(body, []byte(`"method":"tools/call"`)) ||
			(initToo && bytes.Contains(body, []byte(`"method":"initialize"`)))
		if !endlessHere {
			out, _ := http.NewRequestWithContext(r.Context(), r.Method, inner.URL, bytes.NewReader(body))
			out.Header = r.Header.Clone()
			resp, err := http.DefaultTransport.RoundTrip(out)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
			w.Header().Set("Mcp-Session-Id", sid)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`data: {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"`))
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			e.written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(e.Close)
	return e
}

// An SSE event that never ends is not read whole: the call ends "may have run" once the bound is
// read, and mcp-call's memory stays near the bound while the server goes on writing.
func TestEndlessEventIsCutAtTheBound(t *testing.T) {
	g := NewWithT(t)
	e := newEndless(t, false)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	o := callWithLimit(t, e.URL, "big", 256<<10)
	runtime.ReadMemStats(&after)
	g.Expect(o.Code).To(Equal(mcpcall.ExitMayHaveRun), o.Message)
	g.Expect(o.Message).To(ContainSubstring("larger than 262144 bytes (MCP_MAX_RESPONSE_BYTES)"))
	t.Logf("allocated %d bytes while the server wrote %d bytes of one event", after.TotalAlloc-before.TotalAlloc, e.written.Load())
	g.Expect(after.TotalAlloc-before.TotalAlloc).To(BeNumerically("<", 16<<20),
		"bytes allocated while a server offered an endless event (%d bytes written)", e.written.Load())
}

// An initialize answer over the bound is not read either, and the call is never sent.
func TestInitializeOverTheBoundIsNotRun(t *testing.T) {
	g := NewWithT(t)
	e := newEndless(t, true)
	o := callWithLimit(t, e.URL, "big", 64<<10)
	g.Expect(o.Code).To(Equal(mcpcall.ExitNotRun), o.Message)
	g.Expect(o.Message).To(Equal("mcp-call: the MCP server " + e.URL + " answered initialize with more than 65536 bytes (MCP_MAX_RESPONSE_BYTES), which mcp-call does not read. The tool was not called."))
}

func TestParseMaxResponseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"", mcpcall.DefaultMaxResponseBytes, false},
		{"65536", 65536, false},
		{"0", 0, true},
		{"-1", 0, true},
		{"1Mi", 0, true},
	} {
		got, err := mcpcall.ParseMaxResponseBytes(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseMaxResponseBytes(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
		if err != nil && !strings.Contains(err.Error(), "MCP_MAX_RESPONSE_BYTES") {
			t.Errorf("the error %q does not name the setting", err)
		}
	}
}

// A "not called" or "did not run" message cut to the termination message's size still ends with
// those words, which the ToolCall controller reads.
func TestCutMessagesKeepTheirLastWords(t *testing.T) {
	g := NewWithT(t)
	o := mcpcall.Run(context.Background(), mcpcall.Call{
		Server: mcpclient.Config{URL: "http://" + strings.Repeat("x", 5000) + ".invalid/mcp", AllowInsecureHTTP: true},
		Tool:   "echo", Arguments: []byte(`{}`),
	})
	g.Expect(o.Code).To(Equal(mcpcall.ExitNotRun))
	g.Expect(len(o.Message)).To(BeNumerically("<=", mcpcall.MaxMessageBytes))
	g.Expect(o.Message).To(HaveSuffix(" " + mcpcall.NotCalled))
}
