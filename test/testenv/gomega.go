package testenv

import (
	"time"

	"github.com/onsi/gomega"
)

// EventuallyTimeout is how long an Eventually waits when its test names no timeout, in every package
// that runs against the control plane (they all import this package, directly or through
// test/testharness).
//
// gomega's own default is 1s, which is what a reconcile, an informer's event, a Job's creation or an
// Event's delivery usually takes on an idle machine, not on a loaded one: `make test` runs the chaos
// run beside the scenarios, under -race, on two cores, where the same steps have been seen to take
// several seconds. 30s is an order of magnitude above that and still far below the go test timeout, so
// a stuck wait fails with its own message, not the binary's panic. A wait that succeeds returns as soon
// as its condition holds: the larger bound costs a passing test nothing. Polling stays at gomega's
// 10ms. Waits with a bound of their own meaning (a deadline a test asserts) keep their WithTimeout.
const EventuallyTimeout = 30 * time.Second

// init sets the default before any TestMain runs, so that every gomega built afterwards has it: the
// package-level Eventually and every NewWithT(t), which copies the defaults when it is built.
func init() {
	gomega.SetDefaultEventuallyTimeout(EventuallyTimeout)
}
