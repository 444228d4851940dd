package mcpservers

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// pace turns any number of notifications into at most one listing per interval: the first at once,
// those that arrive meanwhile into one when the interval has passed (on the injected clock).
func TestPaceCoalescesNotificationsToOneListingPerInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newListeners(logr.Discard(), Options{ListingInterval: time.Minute, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pending := make(chan struct{}, 1)
	notify := func() {
		select {
		case pending <- struct{}{}:
		default:
		}
	}
	go l.pace(ctx, types.NamespacedName{Namespace: "ns", Name: "srv"}, pending)

	listings := 0
	expectListing := func(why string) {
		t.Helper()
		select {
		case <-l.events:
			listings++
		case <-time.After(10 * time.Second):
			t.Fatalf("no listing %s", why)
		}
	}
	expectNone := func(why string) {
		t.Helper()
		select {
		case <-l.events:
			t.Fatalf("a listing %s", why)
		default:
		}
	}

	notify()
	expectListing("for the first notification")
	for range 1000 {
		notify()
	}
	// The pacer waits for the interval on the clock, with one notification pending.
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the pacer does not wait for the interval")
		}
		runtime.Gosched()
	}
	expectNone("before the interval passed")
	clk.Step(time.Minute)
	expectListing("once the interval passed")
	expectNone("for the notifications coalesced into the last one")
	if listings != 2 {
		t.Fatalf("%d listings for 1001 notifications, want 2", listings)
	}
}
