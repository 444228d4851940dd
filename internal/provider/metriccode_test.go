package provider

import (
	"testing"

	. "github.com/onsi/gomega"
)

// A provider's own error codes never become metric label values: only the table's do.
func TestMetricCodeIsBounded(t *testing.T) {
	g := NewWithT(t)
	for code := range Codes {
		g.Expect(metricCode(code)).To(Equal(code))
	}
	for _, code := range []string{"upstream:Bearer [redacted]", "", "quota_exceeded", "Rate_Limited", "already_decided"} {
		g.Expect(metricCode(code)).To(Equal("other"), code)
	}
}
