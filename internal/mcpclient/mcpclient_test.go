package mcpclient_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"toolgate.dev/toolgate/internal/mcpclient"
)

// server is an MCP server (the Go SDK's) with one tool, over HTTPS, that records the Authorization
// header of every request.
func server(t *testing.T) (*httptest.Server, func() []string) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "v1"}, nil)
	s.AddTool(&mcp.Tool{Name: "lookup", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var mu sync.Mutex
	var auth []string
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), auth...) }
}

func caOf(ts *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
}

func TestDiscoverTrustsTheCABundleAndSendsTheHeaders(t *testing.T) {
	ts, auth := server(t)
	cfg := mcpclient.Config{URL: ts.URL, CABundle: caOf(ts), Headers: []mcpclient.Header{{Name: "Authorization", Value: "Bearer s3cret\n"}}}
	tools, err := mcpclient.Discover(context.Background(), cfg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 1 || tools[0].Name != "lookup" {
		t.Fatalf("tools %+v", tools)
	}
	for _, a := range auth() {
		if a != "Bearer s3cret" {
			t.Fatalf("a request carried Authorization %q", a)
		}
	}

	cfg.CABundle = nil // the system pool does not trust the test CA
	if _, err := mcpclient.Discover(context.Background(), cfg, 10*time.Second); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("want a certificate error, got %v", err)
	}
	cfg.CABundle = []byte("not PEM")
	if _, err := mcpclient.Discover(context.Background(), cfg, 10*time.Second); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("want a CA bundle error, got %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  mcpclient.Config
		want string
	}{
		{mcpclient.Config{URL: "https://mcp.example.com/mcp"}, ""},
		{mcpclient.Config{URL: "http://mcp.example.com/mcp", AllowInsecureHTTP: true}, ""},
		{mcpclient.Config{URL: "http://mcp.example.com/mcp"}, "is http://"},
		{mcpclient.Config{URL: "mcp.example.com/mcp"}, "not an absolute http(s) URL"},
		{mcpclient.Config{URL: ""}, "not an absolute http(s) URL"},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%q) = %v, want %q", c.cfg.URL, err, c.want)
		}
	}
}

// A redirect is not followed: it would carry the headers to another place.
func TestRedirectsAreNotFollowed(t *testing.T) {
	var hit atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit.Store(true) }))
	t.Cleanup(elsewhere.Close)
	redirect := httptest.NewServer(http.RedirectHandler(elsewhere.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)
	cfg := mcpclient.Config{URL: redirect.URL, AllowInsecureHTTP: true, Headers: []mcpclient.Header{{Name: "Authorization", Value: "Bearer x"}}}
	if _, err := mcpclient.Discover(context.Background(), cfg, 5*time.Second); err == nil {
		t.Fatal("a redirect answered initialize")
	}
	if hit.Load() {
		t.Fatal("the redirect was followed")
	}
}
