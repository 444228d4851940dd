package mcpcall_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/internal/mcpclient"
	"toolgate.dev/toolgate/test/mcpeverything"
)

// proxy stands between mcp-call and the reference server: it records every tools/call request it
// forwards and, when cut is set, closes the client's connection once the server has answered a
// tools/call, before the answer reaches the client (the connection lost after the call was sent).
type proxy struct {
	*httptest.Server
	target *url.URL
	cut    bool

	mu    sync.Mutex
	calls [][]byte
}

func newProxy(t *testing.T, target string, cut bool) *proxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: u, cut: cut}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	isCall := bytes.Contains(body, []byte(`"method":"tools/call"`))
	if isCall {
		p.mu.Lock()
		p.calls = append(p.calls, body)
		p.mu.Unlock()
	}
	out, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target.String(), bytes.NewReader(body))
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if isCall && p.cut {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func (p *proxy) toolCalls() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.calls...)
}

func call(t *testing.T, endpoint, tool, args string) mcpcall.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return mcpcall.Run(ctx, mcpcall.Call{
		Server:    mcpclient.Config{URL: endpoint, AllowInsecureHTTP: true, Version: "test"},
		Tool:      tool,
		Arguments: []byte(args),
	})
}

func TestCallsTheToolOnceAndWritesItsResult(t *testing.T) {
	g := NewWithT(t)
	srv := mcpeverything.Start(t)
	p := newProxy(t, srv.URL, false)

	o := call(t, p.URL, "echo", `{"message": "hello from an approved call"}`)
	g.Expect(o).To(Equal(mcpcall.Outcome{Code: mcpcall.ExitSucceeded, Message: "Echo: hello from an approved call"}))
	g.Expect(p.toolCalls()).To(HaveLen(1), "the tool is called exactly once")

	o = call(t, p.URL, "get-sum", `{"a": 2, "b": 40}`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitSucceeded))
	g.Expect(o.Message).To(ContainSubstring("42"))

	o = call(t, p.URL, "get-structured-content", `{"location": "Chicago"}`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitSucceeded))
	var structured map[string]any
	g.Expect(json.Unmarshal([]byte(o.Message), &structured)).To(Succeed(), "structuredContent is written as JSON: %s", o.Message)
	g.Expect(structured).To(HaveKey("temperature"))
}

func TestSendsTheApprovedArgumentsAsTheyAre(t *testing.T) {
	g := NewWithT(t)
	srv := mcpeverything.Start(t)
	p := newProxy(t, srv.URL, false)

	// A number no float64 holds, $(VAR) and $$ that a kubelet would expand, non-ASCII text, <&> (no
	// HTML escaping), and keys out of order: the server receives the same JSON text (without the
	// whitespace between tokens).
	args := `{"message": "pay $(HOME) $$5 to Zoë <a&b>", "z": 1, "big": 12345678901234567890123, "a": [1.50, {"y": null}]}`
	_ = call(t, p.URL, "echo", args)
	calls := p.toolCalls()
	g.Expect(calls).To(HaveLen(1))
	var req struct {
		Params struct {
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	g.Expect(json.Unmarshal(calls[0], &req)).To(Succeed())
	var want bytes.Buffer
	g.Expect(json.Compact(&want, []byte(args))).To(Succeed())
	g.Expect(string(req.Params.Arguments)).To(Equal(want.String()))
}

func TestToolErrorsAndRefusals(t *testing.T) {
	g := NewWithT(t)
	srv := mcpeverything.Start(t)

	// The tool's own words on isError: echo without its message fails the server's input validation,
	// which the reference server reports as a tool error.
	o := call(t, srv.URL, "echo", `{}`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitToolError), o.Message)
	g.Expect(o.Message).To(ContainSubstring("message"))

	// The reference server (the TypeScript SDK's) answers an unknown tool with isError too.
	o = call(t, srv.URL, "no-such-tool", `{}`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitToolError), o.Message)
	g.Expect(o.Message).To(ContainSubstring("no-such-tool"))

	// The Go SDK's server answers it with a JSON-RPC error: refused, the tool did not run.
	gosrv := mcp.NewServer(&mcp.Implementation{Name: "go", Version: "v1"}, nil)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return gosrv }, nil))
	t.Cleanup(hs.Close)
	o = call(t, hs.URL, "no-such-tool", `{}`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitRefused), o.Message)
	g.Expect(o.Message).To(And(ContainSubstring("no-such-tool"), ContainSubstring("The tool did not run")))

	o = call(t, srv.URL, "echo", `["not", "an", "object"]`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitNotRun))
	g.Expect(o.Message).To(ContainSubstring("not a JSON object"))
}

func TestConnectionLostAfterSendingMayHaveRun(t *testing.T) {
	g := NewWithT(t)
	srv := mcpeverything.Start(t)
	p := newProxy(t, srv.URL, true)

	o := call(t, p.URL, "echo", `{"message": "once"}`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitMayHaveRun), o.Message)
	g.Expect(o.Message).To(ContainSubstring("may have run"))
	g.Expect(p.toolCalls()).To(HaveLen(1), "never sent again")
}

func TestServerDownIsNotRun(t *testing.T) {
	g := NewWithT(t)
	srv := mcpeverything.Start(t)
	srv.Stop()

	o := call(t, srv.URL, "echo", `{"message": "x"}`)
	g.Expect(o.Code).To(Equal(mcpcall.ExitNotRun), o.Message)
	g.Expect(o.Message).To(ContainSubstring("The tool was not called"))
}

func TestCutKeepsAMarkerWithinTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		cut  bool
	}{
		{"short", "Echo: hi", false},
		{"exactly the limit", strings.Repeat("a", mcpcall.MaxMessageBytes), false},
		{"ascii over", strings.Repeat("a", 10000), true},
		{"multibyte over", strings.Repeat("é", 5000), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := mcpcall.Cut(tc.in, mcpcall.MaxMessageBytes)
			if len(out) > mcpcall.MaxMessageBytes {
				t.Fatalf("%d bytes, over the limit", len(out))
			}
			if !utf8.ValidString(out) {
				t.Fatal("cut inside a character")
			}
			if got := strings.Contains(out, "[mcp-call: result truncated"); got != tc.cut {
				t.Fatalf("marker present = %v, want %v", got, tc.cut)
			}
			if !tc.cut && out != tc.in {
				t.Fatal("a message that fits was changed")
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{
		mcpclient.EnvURL: "https://mcp.example.com/mcp", mcpclient.EnvTool: "echo", "TOOL_ARGUMENTS": `{"a":1}`,
		mcpclient.EnvHeaderName(0): "Authorization", mcpclient.EnvHeaderValue(0): "Bearer x",
		mcpclient.EnvHeaderName(1): "X-Team", mcpclient.EnvHeaderValue(1): "payments",
	}
	c := mcpcall.FromEnv(func(k string) string { return env[k] }, "test")
	if c.Server.URL != "https://mcp.example.com/mcp" || c.Tool != "echo" || string(c.Arguments) != `{"a":1}` ||
		c.Server.AllowInsecureHTTP || c.Server.CABundle != nil {
		t.Fatalf("unexpected call %+v", c)
	}
	want := []mcpclient.Header{{Name: "Authorization", Value: "Bearer x"}, {Name: "X-Team", Value: "payments"}}
	if len(c.Server.Headers) != 2 || c.Server.Headers[0] != want[0] || c.Server.Headers[1] != want[1] {
		t.Fatalf("headers %+v, want %+v", c.Server.Headers, want)
	}
}
