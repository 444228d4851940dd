package testenv_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/test/testenv"
)

// Importing testenv gives every gomega built afterwards its Eventually default, NewWithT(t) and the
// package-level Eventually alike: a condition that holds only after gomega's own 1s default is still
// waited for.
func TestEventuallyDefaultOutlastsGomegasOwn(t *testing.T) {
	NewWithT(t).Expect(testenv.EventuallyTimeout).To(Equal(30 * time.Second))
	later := func() func() bool {
		ready := time.Now().Add(1500 * time.Millisecond)
		return func() bool { return time.Now().After(ready) }
	}
	NewWithT(t).Eventually(later()).Should(BeTrue(), "NewWithT(t)")
	RegisterTestingT(t)
	Eventually(later()).Should(BeTrue(), "the package-level Eventually")
}
