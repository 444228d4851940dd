// Package mcpclient connects to a streamable HTTP MCP server with the MCP Go SDK's client, for the
// MCPServer controller (which lists the server's tools) and the mcp-call executor (which calls one).
// The session it opens has no standalone SSE stream and never reconnects: a stream that breaks ends
// the request that was waiting on it, so that a call is never sent twice.
package mcpclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Header is one request header sent on every request to the server.
type Header struct{ Name, Value string }

// Config is where the server is and how to reach it.
type Config struct {
	// URL is the server's streamable HTTP endpoint.
	URL string
	// AllowInsecureHTTP accepts an http:// URL.
	AllowInsecureHTTP bool
	// CABundle is a PEM bundle of the CAs to trust instead of the system pool (nil: the system pool).
	CABundle []byte
	// Headers are sent on every request.
	Headers []Header
	// Version is the client's version sent in initialize.
	Version string
	// Limits bound what the session reads from the server (zero fields: DefaultLimits).
	Limits Limits
}

// Validate says what is wrong with c's URL, naming the fix.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("the server URL %q is not an absolute http(s) URL such as https://mcp.example.com/mcp", c.URL)
	case u.Scheme == "http" && !c.AllowInsecureHTTP:
		return fmt.Errorf("the server URL %q is http://: use https://, or allow insecure HTTP for a development server", c.URL)
	}
	return nil
}

// HTTPClient is the HTTP client that reaches the server: the CA bundle's pool (or the system's), the
// headers added to every request, no redirects (a redirect would carry the headers elsewhere), and
// response headers bounded. It does not bound the bodies: a session's client does (guard).
func (c Config) HTTPClient() (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxResponseHeaderBytes = maxHeaderBytes
	if len(c.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CABundle) {
			return nil, errors.New("the CA bundle holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{
		Transport: &headerTransport{base: tr, headers: c.Headers},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, nil
}

// maxHeaderBytes bounds the response headers of one answer.
const maxHeaderBytes = 64 << 10

// sessionClient is the HTTP client of one session, whose guard bounds and accounts what it reads.
func (c Config) sessionClient() (*http.Client, *guard, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	hc, err := c.HTTPClient()
	if err != nil {
		return nil, nil, err
	}
	g := &guard{base: hc.Transport, limits: c.Limits.WithDefaults()}
	hc.Transport = g
	return hc, g, nil
}

// transport is the session's MCP transport: the SDK's own cap on an event (its MaxEventSize; 0
// would mean none) is kept above the guard's, which is the one that names the limit.
func (c Config) transport(hc *http.Client, standalone bool) *mcp.StreamableClientTransport {
	t := &mcp.StreamableClientTransport{
		Endpoint:     c.URL,
		HTTPClient:   hc,
		MaxEventSize: int(2*c.Limits.WithDefaults().MaxEventBytes) + 1024,
	}
	if !standalone {
		t.MaxRetries, t.DisableStandaloneSSE = -1, true
	}
	return t
}

// Connect opens a session with the server (initialize). Close it when done. A failure is an *Error.
func Connect(ctx context.Context, c Config) (*mcp.ClientSession, error) {
	s, _, err := connect(ctx, c, 0)
	return s, err
}

// connect opens a session whose every HTTP request ends within requestTimeout (0: none): the SDK
// sends some requests (the cancellation of a call, say) on a context of their own, which a server
// that never answers would otherwise hold open after the listing gave up.
func connect(ctx context.Context, c Config, requestTimeout time.Duration) (*mcp.ClientSession, *guard, error) {
	hc, g, err := c.sessionClient()
	if err != nil {
		return nil, nil, err
	}
	hc.Timeout = requestTimeout
	client := mcp.NewClient(&mcp.Implementation{Name: "toolgate", Version: c.Version}, nil)
	s, err := client.Connect(ctx, c.transport(hc, false), nil)
	if err != nil {
		return nil, g, g.classify(ctx, err)
	}
	return s, g, nil
}

// Listen opens a session that stays open to hear the server: toolsChanged is called on each
// notifications/tools/list_changed it sends (over the standalone SSE stream the transport keeps
// open; each event bounded by Limits.MaxEventBytes). Wait on the session to learn when it ends;
// close it to stop. overLimit, when set, hears the first limit the server goes over (the session
// then ends). A failure to open it is an *Error.
func Listen(ctx context.Context, c Config, toolsChanged func(), overLimit func(*LimitError)) (*mcp.ClientSession, error) {
	hc, g, err := c.sessionClient()
	if err != nil {
		return nil, err
	}
	g.onExceed = overLimit
	client := mcp.NewClient(&mcp.Implementation{Name: "toolgate", Version: c.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { toolsChanged() },
	})
	s, err := client.Connect(ctx, c.transport(hc, true), nil)
	if err != nil {
		return nil, g.classify(ctx, err)
	}
	return s, nil
}

// MaxTools is the default bound on the tools ListTools reads from one server.
const MaxTools = 2000

// ListTools lists every tool of the server, following tools/list's pagination: at most maxTools
// tools (and pages; 0: the default), else a *LimitError.
func ListTools(ctx context.Context, s *mcp.ClientSession, maxTools int) ([]*mcp.Tool, error) {
	if maxTools <= 0 {
		maxTools = MaxTools
	}
	var tools []*mcp.Tool
	params := &mcp.ListToolsParams{}
	for pages := 0; ; pages++ {
		if pages == maxTools+1 {
			return nil, &LimitError{LimitTools, int64(maxTools)}
		}
		res, err := s.ListTools(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		if len(tools)+len(res.Tools) > maxTools {
			return nil, &LimitError{LimitTools, int64(maxTools)}
		}
		tools = append(tools, res.Tools...)
		if res.NextCursor == "" {
			return tools, nil
		}
		params.Cursor = res.NextCursor
	}
}

// Discover connects, lists the server's tools and closes the session, within timeout. A failure is
// an *Error: its Summary is for a status, the rest for a log.
func Discover(ctx context.Context, c Config, timeout time.Duration) ([]*mcp.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, g, err := connect(ctx, c, timeout)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Close() }()
	tools, err := ListTools(ctx, s, c.Limits.WithDefaults().MaxTools)
	if lerr := (*LimitError)(nil); errors.As(err, &lerr) {
		return nil, &Error{lerr.Error(), err}
	} else if err != nil {
		return nil, g.classify(ctx, err)
	}
	return tools, nil
}

type headerTransport struct {
	base    http.RoundTripper
	headers []Header
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for _, h := range t.headers {
			req.Header.Set(h.Name, strings.TrimSpace(h.Value))
		}
	}
	return t.base.RoundTrip(req)
}

// The env of a generated Tool's Job, which the mcp-call executor reads (besides TOOL_ARGUMENTS).
const (
	// EnvURL is the server's streamable HTTP endpoint.
	EnvURL = "MCP_SERVER_URL"
	// EnvTool is the tool's name at the server.
	EnvTool = "MCP_TOOL"
	// EnvAllowInsecureHTTP is "true" to accept an http:// URL.
	EnvAllowInsecureHTTP = "MCP_ALLOW_INSECURE_HTTP"
	// EnvCABundle is a PEM bundle of the CAs to trust instead of the system pool.
	EnvCABundle = "MCP_CA_BUNDLE"
)

// EnvHeaderName is the env holding the name of request header i (0, 1, ...); EnvHeaderValue holds
// its value (from a Secret).
func EnvHeaderName(i int) string { return fmt.Sprintf("MCP_HEADER_%d_NAME", i) }

// EnvHeaderValue is the env holding the value of request header i.
func EnvHeaderValue(i int) string { return fmt.Sprintf("MCP_HEADER_%d_VALUE", i) }
