package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	toolCallOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_toolcalls_total",
		Help: "ToolCalls that reached a terminal phase, by outcome (the phase).",
	}, []string{"outcome"})

	approvalWaitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "toolgate_approval_wait_seconds",
		Help:    "Seconds from a ToolCall's creation to the provider's terminal answer being applied.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
	})

	providerRequestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_provider_request_errors_total",
		Help: "Failed provider HTTP attempts, by operation and error code.",
	}, []string{"op", "code"})

	pendingWaiters = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "toolgate_pending_waiters",
		Help: "Approval requests being long-polled right now.",
	})
)

func init() {
	metrics.Registry.MustRegister(toolCallOutcomes, approvalWaitSeconds, providerRequestErrors, pendingWaiters)
}

// CountProviderError is the provider client's OnError hook.
func CountProviderError(op, code string) { providerRequestErrors.WithLabelValues(op, code).Inc() }
