package mcpgateway

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"toolgate.dev/toolgate/pkg/toolcall"
)

// Metrics: what an operator reads to see the gateway work. Given Options.Registerer, New registers
// them there; the command serves them at --metrics-bind-address.

// Outcomes of one tools/call, the values of toolgate_mcp_calls_total's outcome label.
const (
	OutcomeSucceeded           = "succeeded"            // the tool ran and succeeded
	OutcomeFailed              = "failed"               // the tool ran and failed
	OutcomeDenied              = "denied"               // a human denied it
	OutcomeRejected            = "rejected"             // rejected before any human was asked (bad arguments, no such Tool)
	OutcomeExpired             = "expired"              // approved, but the approval expired before the tool started
	OutcomeApprovalUnavailable = "approval_unavailable" // no approval could be obtained in time
	OutcomeCancelled           = "cancelled"            // the approval request was cancelled
	OutcomeRefused             = "refused"              // refused by the gateway: the caller may not call it, or its _meta is not readable
	OutcomeAbandoned           = "abandoned"            // the client went away, or the gateway closed, before an outcome
	OutcomeError               = "error"                // the outcome could not be learned (e.g. the apiserver refused)
)

// Outcomes lists every outcome label value.
var Outcomes = []string{OutcomeSucceeded, OutcomeFailed, OutcomeDenied, OutcomeRejected, OutcomeExpired,
	OutcomeApprovalUnavailable, OutcomeCancelled, OutcomeRefused, OutcomeAbandoned, OutcomeError}

type metrics struct {
	calls *prometheus.CounterVec
	ready atomic.Bool // the Tools informer synced (Run)
}

func newMetrics(g *Gateway, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{calls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_mcp_calls_total",
		Help: "tools/call requests the MCP gateway answered, by outcome.",
	}, []string{"outcome"})}
	for _, o := range Outcomes {
		m.calls.WithLabelValues(o) // every outcome is exported from the start, at 0
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{
		m.calls,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "toolgate_mcp_sessions",
			Help: "MCP sessions the gateway holds open.",
		}, func() float64 { return float64(g.sessionCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "toolgate_mcp_calls_in_progress",
			Help: "tools/call requests waiting for their ToolCall's outcome.",
		}, func() float64 { return float64(g.inProgress()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "toolgate_mcp_tools",
			Help: "MCP tools the gateway lists: the Tools of its namespace.",
		}, func() float64 { return float64(g.publishedCount()) }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// outcome is the outcome label of a call that ended with err (nil: succeeded), its context ctx.
func outcome(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return OutcomeAbandoned
	case err == nil:
		return OutcomeSucceeded
	case errors.Is(err, toolcall.ErrDenied):
		return OutcomeDenied
	case errors.Is(err, toolcall.ErrRejected):
		return OutcomeRejected
	case errors.Is(err, toolcall.ErrExpired):
		return OutcomeExpired
	case errors.Is(err, toolcall.ErrApprovalUnavailable):
		return OutcomeApprovalUnavailable
	case errors.Is(err, toolcall.ErrCancelled):
		return OutcomeCancelled
	case errors.Is(err, toolcall.ErrFailed):
		return OutcomeFailed
	}
	return OutcomeError
}

// Ready reports whether the gateway follows its namespace's Tools: Run's informer has synced.
func (g *Gateway) Ready() bool { return g.metrics.ready.Load() }

func (g *Gateway) sessionCount() int {
	n := 0
	for range g.server.Sessions() {
		n++
	}
	return n
}

func (g *Gateway) inProgress() int {
	g.inflightMu.Lock()
	defer g.inflightMu.Unlock()
	n := 0
	for _, calls := range g.inflight {
		n += len(calls)
	}
	return n
}

func (g *Gateway) publishedCount() int {
	g.publishedMu.Lock()
	defer g.publishedMu.Unlock()
	return len(g.published)
}
