package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"toolgate.dev/toolgate/internal/mcpgateway"
)

// inClusterNamespaceFile holds the namespace of the Pod's ServiceAccount.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// gatewayFlags is toolgate-mcp's command line.
type gatewayFlags struct {
	listen, namespace, logLevel string
	audience, resourceURL       string
	stdio, unauthenticated      bool
	sessionTimeout              time.Duration
	maxSessions                 int
	tlsCert, tlsKey             string
	metricsAddr, probeAddr      string
	zap                         zap.Options
	// o is the gateway's options as the flags give them; main adds the logger, the registry and the
	// authentication.
	o mcpgateway.Options
}

// parseFlags reads the command line.
func parseFlags() *gatewayFlags {
	f := &gatewayFlags{}
	flag.StringVar(&f.listen, "listen", "127.0.0.1:8090", "Address of the streamable HTTP endpoint (served at every path, e.g. http://127.0.0.1:8090/mcp).")
	flag.BoolVar(&f.stdio, "stdio", false, "Serve one MCP session on stdin/stdout instead of HTTP.")
	flag.StringVar(&f.namespace, "namespace", "", "Namespace whose Tools are served and where ToolCalls are created. Default: the Pod's namespace when run in a cluster.")
	flag.DurationVar(&f.o.WaitingLimit, "waiting-limit", mcpgateway.DefaultWaitingLimit, "Each ToolCall's spec.waitingLimit, unless a call sets _meta "+mcpgateway.MetaWaitingLimit+".")
	flag.DurationVar(&f.o.Timeout, "approval-timeout", 0, "Each ToolCall's spec.timeout (approval timeout); 0 lets the controller choose the largest that fits.")
	flag.BoolVar(&f.o.Progress, "progress", true, "Send notifications/progress with the ToolCall's phase to clients that ask for progress.")
	flag.DurationVar(&f.o.PingInterval, "ping-interval", mcpgateway.DefaultPingInterval, "How often a call in progress over HTTP pings its client; a client that is gone has its call abandoned within two intervals (negative: never ping).")
	flag.DurationVar(&f.sessionTimeout, "session-timeout", 30*time.Minute, "Close HTTP sessions idle for this long (0: never).")
	flag.IntVar(&f.maxSessions, "max-sessions-per-caller", mcpgateway.DefaultMaxSessionsPerCaller, "Over HTTP, the most sessions one authenticated caller may hold at once; another is refused (429).")
	flag.StringVar(&f.audience, "token-audience", "", "Over HTTP, the audience callers' bearer tokens must be issued for (e.g. a projected ServiceAccount token with this audience). Default: the --url, so that a token issued for one gateway is not accepted by another.")
	flag.StringVar(&f.resourceURL, "url", "", "Over HTTP, the endpoint as clients reach it, e.g. https://toolgate-mcp.payments.svc:8090/mcp (the resource of the OAuth protected resource metadata a 401 names). Default: http(s)://<--listen>/mcp.")
	flag.StringVar(&f.tlsCert, "tls-cert-file", "", "Serve HTTPS with this PEM certificate (and --tls-key-file), read again when it changes; without it, plain HTTP (only behind something that terminates TLS).")
	flag.StringVar(&f.tlsKey, "tls-key-file", "", "The PEM private key of --tls-cert-file.")
	flag.BoolVar(&f.unauthenticated, "unauthenticated", false, "Over HTTP, do not authenticate callers: every ToolCall is created as the gateway's own identity. Only behind something that authenticates them.")
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", "0", "Over HTTP, the address to serve Prometheus metrics at /metrics on (plain HTTP, e.g. :8080); 0 serves none.")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", "0", "Over HTTP, the address to serve /healthz and /readyz on (plain HTTP, e.g. :8081; ready once the namespace's Tools are listed); 0 serves none.")
	flag.StringVar(&f.logLevel, "log-level", "", "Log level: debug, info, warn (the same as info) or error; default info (debug with --zap-devel). The same as --zap-log-level, which also takes a number (more verbose than debug): give one of the two.")
	f.zap.BindFlags(flag.CommandLine)
	flag.Parse()
	return f
}

// check refuses flags that cannot work, naming the flag and the fix.
func (f *gatewayFlags) check() error {
	switch {
	case f.o.WaitingLimit <= 0:
		return errors.New("--waiting-limit must be positive, e.g. 10m")
	case f.o.PingInterval == 0:
		return errors.New("--ping-interval must be positive, e.g. 10s (or negative to turn pings off)")
	case f.o.Timeout < 0:
		return errors.New("--approval-timeout must be 0 (the controller chooses) or positive, e.g. 5m")
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return errors.New("--tls-cert-file and --tls-key-file go together: give both to serve HTTPS, or neither")
	case f.maxSessions <= 0:
		return fmt.Errorf("--max-sessions-per-caller must be positive, e.g. %d", mcpgateway.DefaultMaxSessionsPerCaller)
	}
	return nil
}

// resolveNamespace fills in --namespace from the Pod's ServiceAccount when it was not given.
func (f *gatewayFlags) resolveNamespace() error {
	if f.namespace != "" {
		return nil
	}
	b, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return fmt.Errorf("--namespace is required outside a cluster (%s is not readable: %v)", inClusterNamespaceFile, err)
	}
	f.namespace = strings.TrimSpace(string(b))
	return nil
}

// urlScheme is the scheme the MCP endpoint is served with.
func (f *gatewayFlags) urlScheme() string {
	if f.tlsCert != "" {
		return "https"
	}
	return "http"
}

// applyLogLevel sets opts' level from --log-level, kept from before the --zap-* flags: debug, info
// and error are zap's levels of the same name (debug shows V(1)). logr has no warning level: what was
// logged as a warning is an info line, and the MCP SDK's slog warnings are treated as info by
// logr.ToSlogHandler, so warn means info, hiding nothing it showed before. Empty leaves
// --zap-log-level or zap's default.
func applyLogLevel(opts *zap.Options, level string, zapLevelSet bool) error {
	if level == "" {
		return nil
	}
	if zapLevelSet {
		return fmt.Errorf("--log-level %s and --zap-log-level both given: give one of the two", level)
	}
	var l zapcore.Level
	if err := l.UnmarshalText([]byte(level)); err != nil || l > zapcore.ErrorLevel {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error (or --zap-log-level, which also takes a number)", level)
	}
	if l == zapcore.WarnLevel {
		l = zapcore.InfoLevel
	}
	opts.Level = l
	return nil
}

// flagSet reports whether the command line gave the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
