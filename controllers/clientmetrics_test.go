package controllers

import (
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

func TestResourceOf(t *testing.T) {
	g := NewWithT(t)
	for path, want := range map[string]string{
		"/apis/toolgate.dev/v1alpha1/namespaces/ns/toolcalls/x/status":   "toolcalls/status",
		"/apis/toolgate.dev/v1alpha1/namespaces/ns/toolcalls/x":          "toolcalls",
		"/apis/batch/v1/namespaces/ns/jobs":                              "jobs",
		"/apis/events.k8s.io/v1/namespaces/ns/events":                    "events",
		"/api/v1/namespaces/ns/pods/p":                                   "pods",
		"/api/v1/namespaces":                                             "namespaces",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/toolgate.dev": "leases",
		"/healthz": "other",
	} {
		req, err := http.NewRequest(http.MethodPatch, "https://apiserver"+path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resourceOf(req)).To(Equal(want), path)
	}
}
