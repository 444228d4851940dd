package controllers

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
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

	policyDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_policy_decisions_total",
		Help: "ToolCalls decided by a rule of their Tool's spec.approval without asking a human, by action (Approve, Deny).",
	}, []string{"action"})
)

func init() {
	metrics.Registry.MustRegister(toolCallOutcomes, approvalWaitSeconds, providerRequestErrors, policyDecisions)
}

// CountProviderError is the provider client's OnError hook.
func CountProviderError(op, code string) { providerRequestErrors.WithLabelValues(op, code).Inc() }

var apiserverWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "toolgate_apiserver_writes_total",
	Help: "Write requests (create, update, patch, delete; dry runs excluded) the manager sent to the apiserver, by resource (with subresource) and HTTP method.",
}, []string{"resource", "method"})

func init() { metrics.Registry.MustRegister(apiserverWrites) }

// countWrites wraps the manager's apiserver transport to count its writes by resource.
func countWrites(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			if req.URL.Query().Has("dryRun") {
				break // validated, not stored
			}
			apiserverWrites.WithLabelValues(resourceOf(req), req.Method).Inc()
		}
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// apiPaths parses request paths the way the apiserver does.
var apiPaths = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// resourceOf names what a request writes, "resource" or "resource/subresource":
// /apis/toolgate.dev/v1alpha1/namespaces/ns/toolcalls/x/status is "toolcalls/status".
func resourceOf(req *http.Request) string {
	info, err := apiPaths.NewRequestInfo(req)
	switch {
	case err != nil || !info.IsResourceRequest:
		return "other"
	case info.Subresource != "":
		return info.Resource + "/" + info.Subresource
	}
	return info.Resource
}
