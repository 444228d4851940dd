// Command toolgate-mcp serves a namespace's Toolgate Tools to MCP clients (docs/mcp-gateway.md): each
// Tool is an MCP tool, and each tools/call becomes a ToolCall that a human approves before it runs.
// It speaks MCP's streamable HTTP transport on --listen, or stdio with --stdio.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpgateway"
)

// inClusterNamespaceFile holds the namespace of the Pod's ServiceAccount.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func main() {
	var (
		listen, namespace, logLevel string
		audience, resourceURL       string
		stdio, unauthenticated      bool
		sessionTimeout              time.Duration
		maxSessions                 int
		tlsCert, tlsKey             string
		metricsAddr, probeAddr      string
		o                           mcpgateway.Options
	)
	flag.StringVar(&listen, "listen", "127.0.0.1:8090", "Address of the streamable HTTP endpoint (served at every path, e.g. http://127.0.0.1:8090/mcp).")
	flag.BoolVar(&stdio, "stdio", false, "Serve one MCP session on stdin/stdout instead of HTTP.")
	flag.StringVar(&namespace, "namespace", "", "Namespace whose Tools are served and where ToolCalls are created. Default: the Pod's namespace when run in a cluster.")
	flag.DurationVar(&o.WaitingLimit, "waiting-limit", mcpgateway.DefaultWaitingLimit, "Each ToolCall's spec.waitingLimit, unless a call sets _meta "+mcpgateway.MetaWaitingLimit+".")
	flag.DurationVar(&o.Timeout, "approval-timeout", 0, "Each ToolCall's spec.timeout (approval timeout); 0 lets the controller choose the largest that fits.")
	flag.BoolVar(&o.Progress, "progress", true, "Send notifications/progress with the ToolCall's phase to clients that ask for progress.")
	flag.DurationVar(&o.PingInterval, "ping-interval", mcpgateway.DefaultPingInterval, "How often a call in progress over HTTP pings its client; a client that is gone has its call abandoned within two intervals (negative: never ping).")
	flag.DurationVar(&sessionTimeout, "session-timeout", 30*time.Minute, "Close HTTP sessions idle for this long (0: never).")
	flag.IntVar(&maxSessions, "max-sessions-per-caller", mcpgateway.DefaultMaxSessionsPerCaller, "Over HTTP, the most sessions one authenticated caller may hold at once; another is refused (429).")
	flag.StringVar(&audience, "token-audience", "", "Over HTTP, the audience callers' bearer tokens must be issued for (e.g. a projected ServiceAccount token with this audience). Default: the --url, so that a token issued for one gateway is not accepted by another.")
	flag.StringVar(&resourceURL, "url", "", "Over HTTP, the endpoint as clients reach it, e.g. https://toolgate-mcp.payments.svc:8090/mcp (the resource of the OAuth protected resource metadata a 401 names). Default: http(s)://<--listen>/mcp.")
	flag.StringVar(&tlsCert, "tls-cert-file", "", "Serve HTTPS with this PEM certificate (and --tls-key-file), read again when it changes; without it, plain HTTP (only behind something that terminates TLS).")
	flag.StringVar(&tlsKey, "tls-key-file", "", "The PEM private key of --tls-cert-file.")
	flag.BoolVar(&unauthenticated, "unauthenticated", false, "Over HTTP, do not authenticate callers: every ToolCall is created as the gateway's own identity. Only behind something that authenticates them.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "Over HTTP, the address to serve Prometheus metrics at /metrics on (plain HTTP, e.g. :8080); 0 serves none.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "0", "Over HTTP, the address to serve /healthz and /readyz on (plain HTTP, e.g. :8081; ready once the namespace's Tools are listed); 0 serves none.")
	flag.StringVar(&logLevel, "log-level", "", "Log level: debug, info, warn (the same as info) or error; default info (debug with --zap-devel). The same as --zap-log-level, which also takes a number (more verbose than debug): give one of the two.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	if err := applyLogLevel(&zapOpts, logLevel, flagSet("zap-log-level")); err != nil {
		fail(2, "%v", err)
	}
	// stdout carries the MCP session with --stdio: logs go to stderr only (zap's default).
	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	logf.SetLogger(logger) // controller-runtime's client logs the apiserver's warnings through it
	o.Logger = logger

	if namespace == "" {
		b, err := os.ReadFile(inClusterNamespaceFile)
		if err != nil {
			fail(2, "--namespace is required outside a cluster (%s is not readable: %v)", inClusterNamespaceFile, err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	if o.WaitingLimit <= 0 {
		fail(2, "--waiting-limit must be positive, e.g. 10m")
	}
	if o.PingInterval == 0 {
		fail(2, "--ping-interval must be positive, e.g. 10s (or negative to turn pings off)")
	}
	if o.Timeout < 0 {
		fail(2, "--approval-timeout must be 0 (the controller chooses) or positive, e.g. 5m")
	}

	cfg, err := config.GetConfig()
	if err != nil {
		fail(1, "no Kubernetes configuration (use --kubeconfig, $KUBECONFIG or run in a cluster): %v", err)
	}
	scheme := runtime.NewScheme()
	if err := tg.AddToScheme(scheme); err != nil {
		fail(1, "building the scheme: %v", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fail(1, "building the Kubernetes client: %v", err)
	}
	if (tlsCert == "") != (tlsKey == "") {
		fail(2, "--tls-cert-file and --tls-key-file go together: give both to serve HTTPS, or neither")
	}
	if maxSessions <= 0 {
		fail(2, "--max-sessions-per-caller must be positive, e.g. %d", mcpgateway.DefaultMaxSessionsPerCaller)
	}
	urlScheme := "http"
	if tlsCert != "" {
		urlScheme = "https"
	}
	if resourceURL == "" {
		resourceURL = urlScheme + "://" + listen + "/mcp"
	}
	if !stdio && !unauthenticated {
		if audience == "" {
			audience = resourceURL
		}
		o.Auth = &mcpgateway.Auth{Config: cfg, Audiences: []string{audience}, ResourceURL: resourceURL, MaxSessionsPerCaller: maxSessions}
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.Registerer = registry
	g, err := mcpgateway.New(c, namespace, o)
	if err != nil {
		fail(2, "%v", err)
	}

	signals, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// run outlives the signal by the time Close takes to abandon the calls in progress.
	run, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	go func() {
		if err := g.Run(run); err != nil {
			logger.Error(err, "keeping the tool list up to date stopped")
		}
	}()

	if stdio {
		logger.Info("serving MCP on stdio", "namespace", namespace)
		done := make(chan error, 1)
		go func() { done <- g.Server().Run(run, &mcp.StdioTransport{}) }()
		select {
		case err := <-done: // the client closed stdin
			if err != nil && !errors.Is(err, context.Canceled) {
				logger.Error(err, "MCP session ended")
			}
			// Withdrawals the apiserver refused so far get their retries before the process exits.
			shutdown(g, logger)
		case <-signals.Done():
			shutdown(g, logger)
			cancelRun()
			<-done
		}
		return
	}

	for _, ops := range []struct{ flag, addr string }{{"--metrics-bind-address", metricsAddr}, {"--health-probe-bind-address", probeAddr}} {
		if ops.addr == "0" || ops.addr == "" {
			continue
		}
		handler := metricsHandler(registry)
		if ops.flag == "--health-probe-bind-address" {
			handler = probesHandler(g)
		}
		if err := serveOps(run, logger, ops.addr, handler); err != nil {
			fail(1, "%s %s: %v", ops.flag, ops.addr, err)
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fail(1, "--listen %s: %v", listen, err)
	}
	srv := &http.Server{
		Handler:           g.HTTPHandler(&mcp.StreamableHTTPOptions{SessionTimeout: sessionTimeout}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if tlsCert != "" {
		cw, err := certwatcher.New(tlsCert, tlsKey)
		if err != nil {
			fail(1, "--tls-cert-file %s, --tls-key-file %s: %v", tlsCert, tlsKey, err)
		}
		go func() {
			if err := cw.Start(run); err != nil {
				logger.Error(err, "watching the TLS certificate stopped")
			}
		}()
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	logger.Info("serving MCP over streamable HTTP", "url", urlScheme+"://"+ln.Addr().String()+"/mcp", "namespace", namespace, "authenticated", o.Auth != nil)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		fail(1, "serving HTTP: %v", err)
	case <-signals.Done():
	}
	shutdown(g, logger)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		// Open event streams never become idle: close what is left.
		_ = srv.Close()
	}
}

// shutdown abandons the calls still waiting, so that none of them runs for a client that is gone.
func shutdown(g *mcpgateway.Gateway, logger logr.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		logger.Error(err, "abandoning the calls in progress")
	}
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

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "toolgate-mcp: "+format+"\n", args...)
	os.Exit(code)
}
