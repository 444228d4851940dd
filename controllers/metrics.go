package controllers

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	providerRequestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_provider_request_errors_total",
		Help: "Failed provider HTTP attempts, by operation and error code.",
	}, []string{"op", "code"})
)

func init() {
	metrics.Registry.MustRegister(providerRequestErrors)
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
