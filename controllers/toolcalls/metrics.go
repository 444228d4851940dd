package toolcalls

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	toolCallOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_toolcalls_total",
		Help: "ToolCalls that reached a terminal phase, by namespace and outcome (the phase).",
	}, []string{"namespace", "outcome"})

	approvalWaitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "toolgate_approval_wait_seconds",
		Help:    "Seconds from a ToolCall's creation to the provider's terminal answer being applied.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
	})

	finishedCallsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_finished_toolcalls_deleted_total",
		Help: "Finished ToolCalls the manager deleted once their time to live had passed, by outcome (the phase).",
	}, []string{"outcome"})

	policyDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_policy_decisions_total",
		Help: "ToolCalls decided by a rule of their Tool's spec.approval without asking a human, by action (Approve, Deny).",
	}, []string{"action"})

	goneCursorUntrusted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolgate_gone_cursor_untrusted_total",
		Help: "Leader starts that found the saved position of withdrawn removals (Lease toolgate-gone-cursor) past the apiserver's present, and replayed from as far back as the apiserver keeps watch history instead.",
	})
)

func init() {
	metrics.Registry.MustRegister(toolCallOutcomes, approvalWaitSeconds, policyDecisions, finishedCallsDeleted, goneCursorUntrusted)
}
