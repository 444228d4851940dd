package controllers

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/internal/provider"
)

var (
	providerRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_provider_requests_total",
		Help: "Provider HTTP attempts, retries included, by provider object (its kind, namespace and name, or default for --provider-url) and operation.",
	}, []string{"provider", "op"})

	providerRequestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_provider_request_errors_total",
		Help: "Failed provider HTTP attempts, by provider object (its kind, namespace and name, or default for --provider-url), operation and error code.",
	}, []string{"provider", "op", "code"})
)

func init() {
	metrics.Registry.MustRegister(providerRequests, providerRequestErrors)
}

// CountProviderRequest is the OnAttempt hook of the manager's own provider (--provider-url).
func CountProviderRequest(op string) {
	providerRequests.WithLabelValues(providercache.DefaultLabel, op).Inc()
}

// CountProviderError is the OnError hook of the manager's own provider (--provider-url).
func CountProviderError(op, code string) {
	providerRequestErrors.WithLabelValues(providercache.DefaultLabel, op, code).Inc()
}

// providerOptions are what the clients of provider object k start from: hooks that count their
// attempts and failures under k's label.
func providerOptions(k providercache.Key) provider.Options {
	label := k.Label()
	return provider.Options{
		OnAttempt: func(op string) { providerRequests.WithLabelValues(label, op).Inc() },
		OnError:   func(op, code string) { providerRequestErrors.WithLabelValues(label, op, code).Inc() },
	}
}

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
