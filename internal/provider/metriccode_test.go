package provider

import (
	"testing"

	. "github.com/onsi/gomega"
)

// A provider's own error codes never become metric label values.
func TestMetricCodeIsBounded(t *testing.T) {
	g := NewWithT(t)
	for code, want := range map[string]string{
		CodeRateLimited: CodeRateLimited, CodeTimeout: CodeTimeout, CodeUntrusted: CodeUntrusted,
		"upstream:Bearer [redacted]": "other", "": "other", "quota_exceeded": "other",
	} {
		g.Expect(metricCode(code)).To(Equal(want), code)
	}
}
