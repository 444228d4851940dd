package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"toolgate.dev/toolgate/internal/mcpgateway"
)

// serveStdio serves one MCP session on stdin/stdout until the client closes stdin or a signal
// arrives, then abandons the calls still waiting.
func serveStdio(signals, run context.Context, cancelRun context.CancelFunc, g *mcpgateway.Gateway, namespace string, logger logr.Logger) {
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
}

// serveOpsEndpoints serves the metrics and the probes on the addresses their flags give, until run
// ends.
func serveOpsEndpoints(run context.Context, f *gatewayFlags, g *mcpgateway.Gateway, registry *prometheus.Registry, logger logr.Logger) {
	for _, ops := range []struct{ flag, addr string }{{"--metrics-bind-address", f.metricsAddr}, {"--health-probe-bind-address", f.probeAddr}} {
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
}

// serveHTTP serves MCP's streamable HTTP transport on --listen until a signal arrives, then abandons
// the calls still waiting and closes the server.
func serveHTTP(signals, run context.Context, f *gatewayFlags, g *mcpgateway.Gateway, logger logr.Logger) {
	srv := &http.Server{
		Handler:           g.HTTPHandler(&mcp.StreamableHTTPOptions{SessionTimeout: f.sessionTimeout}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ln := listen(run, f, srv, logger)
	logger.Info("serving MCP over streamable HTTP", "url", f.urlScheme()+"://"+ln.Addr().String()+"/mcp", "namespace", f.namespace, "authenticated", !f.unauthenticated)
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

// listen opens --listen, with TLS when --tls-cert-file is given: the certificate is read again when
// it changes, until run ends. It sets srv's TLS configuration.
func listen(run context.Context, f *gatewayFlags, srv *http.Server, logger logr.Logger) net.Listener {
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		fail(1, "--listen %s: %v", f.listen, err)
	}
	if f.tlsCert == "" {
		return ln
	}
	cw, err := certwatcher.New(f.tlsCert, f.tlsKey)
	if err != nil {
		fail(1, "--tls-cert-file %s, --tls-key-file %s: %v", f.tlsCert, f.tlsKey, err)
	}
	go func() {
		if err := cw.Start(run); err != nil {
			logger.Error(err, "watching the TLS certificate stopped")
		}
	}()
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate}
	return tls.NewListener(ln, srv.TLSConfig)
}

// shutdown abandons the calls still waiting, so that none of them runs for a client that is gone.
func shutdown(g *mcpgateway.Gateway, logger logr.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		logger.Error(err, "abandoning the calls in progress")
	}
}
