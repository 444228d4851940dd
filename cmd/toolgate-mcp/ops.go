package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"toolgate.dev/toolgate/internal/mcpgateway"
)

// The operations endpoints, apart from the MCP endpoint: metrics for a scraper, probes for the
// kubelet. Both are plain HTTP, as the manager's probes are: they carry no caller data.

// metricsHandler serves registry's metrics at /metrics.
func metricsHandler(registry *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	return mux
}

// probesHandler serves /healthz (the process serves) and /readyz (the gateway lists its namespace's
// Tools: Run's informer has synced).
func probesHandler(g *mcpgateway.Gateway) http.Handler {
	mux := http.NewServeMux()
	for path, checks := range map[string]map[string]healthz.Checker{
		"/healthz": {"ping": healthz.Ping},
		"/readyz": {"tools": func(*http.Request) error {
			if !g.Ready() {
				return errors.New("the namespace's Tools are not listed yet")
			}
			return nil
		}},
	} {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks}) // serves path and path/<check>
		mux.Handle(path, h)
		mux.Handle(path+"/", h)
	}
	return mux
}

// serveOps serves handler on addr until ctx ends.
func serveOps(ctx context.Context, logger logr.Logger, addr string, handler http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "serving the operations endpoint stopped", "address", addr)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
