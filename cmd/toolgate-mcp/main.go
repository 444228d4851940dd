// Command toolgate-mcp serves a namespace's Toolgate Tools to MCP clients (docs/mcp-gateway.md): each
// Tool is an MCP tool, and each tools/call becomes a ToolCall that a human approves before it runs.
// It speaks MCP's streamable HTTP transport on --listen, or stdio with --stdio.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpgateway"
)

func main() {
	f := parseFlags()
	logger := newLogger(f)
	if err := f.resolveNamespace(); err != nil {
		fail(2, "%v", err)
	}
	if err := f.check(); err != nil {
		fail(2, "%v", err)
	}
	cfg, c := kubeClient()
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := newGateway(f, cfg, c, logger, registry)

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

	if f.stdio {
		serveStdio(signals, run, cancelRun, g, f.namespace, logger)
		return
	}
	serveOpsEndpoints(run, f, g, registry, logger)
	serveHTTP(signals, run, f, g, logger)
}

// newLogger builds the logger of the --log-level and --zap-* flags, and gives it to controller-runtime,
// whose client logs the apiserver's warnings through it.
func newLogger(f *gatewayFlags) logr.Logger {
	if err := applyLogLevel(&f.zap, f.logLevel, flagSet("zap-log-level")); err != nil {
		fail(2, "%v", err)
	}
	// stdout carries the MCP session with --stdio: logs go to stderr only (zap's default).
	logger := zap.New(zap.UseFlagOptions(&f.zap))
	logf.SetLogger(logger)
	return logger
}

// kubeClient connects to the apiserver of --kubeconfig, $KUBECONFIG or the cluster the Pod runs in.
func kubeClient() (*rest.Config, client.WithWatch) {
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
	return cfg, c
}

// newGateway builds the gateway of the flags. Over HTTP it authenticates its callers, unless
// --unauthenticated, by bearer tokens issued for --token-audience (default: --url).
func newGateway(f *gatewayFlags, cfg *rest.Config, c client.WithWatch, logger logr.Logger, registry prometheus.Registerer) *mcpgateway.Gateway {
	if f.resourceURL == "" {
		f.resourceURL = f.urlScheme() + "://" + f.listen + "/mcp"
	}
	o := f.o
	if !f.stdio && !f.unauthenticated {
		if f.audience == "" {
			f.audience = f.resourceURL
		}
		o.Auth = &mcpgateway.Auth{Config: cfg, Audiences: []string{f.audience}, ResourceURL: f.resourceURL, MaxSessionsPerCaller: f.maxSessions}
	}
	o.Logger = logger
	o.Registerer = registry
	g, err := mcpgateway.New(c, f.namespace, o)
	if err != nil {
		fail(2, "%v", err)
	}
	return g
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "toolgate-mcp: "+format+"\n", args...)
	os.Exit(code)
}
