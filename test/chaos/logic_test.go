package chaos

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// The run's choices come from the seed alone: the same seed and index give the same plan, whatever
// was drawn before, and another seed gives other plans.
func TestPlansComeFromTheSeedAlone(t *testing.T) {
	g := NewWithT(t)
	first := make([]plan, 200)
	for i := range first {
		first[i] = planFor(42, i)
	}
	for i := len(first) - 1; i >= 0; i-- { // another order of drawing
		g.Expect(planFor(42, i)).To(Equal(first[i]), "call %d", i)
	}
	other := 0
	for i := range first {
		p := planFor(43, i)
		if p != first[i] {
			other++
		}
		g.Expect(p.limit).To(BeNumerically(">=", minWaitingLimit))
		g.Expect(p.limit).To(BeNumerically("<=", maxWaitingLimit))
		g.Expect(p.limit % time.Second).To(BeZero())
		g.Expect(p.delay).To(BeNumerically("<", maxHumanDelay))
	}
	g.Expect(other).To(BeNumerically(">", len(first)/2))
}

func TestExpectedFaults(t *testing.T) {
	rules := faultRules()
	tests := []struct {
		name                  string
		submits, gets, cancel int64
		want                  []faults.Kind
	}{
		{name: "no calls", want: nil},
		{name: "one GET meets the counted delay", gets: 1, want: []faults.Kind{faults.Delay}},
		{name: "three DELETEs: two races and a lost response", cancel: 3,
			want: []faults.Kind{faults.DecideBeforeCancel, faults.DropAfterCommit}},
		{name: "four DELETEs add the 502", cancel: 4,
			want: []faults.Kind{faults.DecideBeforeCancel, faults.DropAfterCommit, faults.Error5xx}},
		{name: "a short run's numbers", submits: 80, gets: 400, cancel: 20,
			want: []faults.Kind{faults.DecideBeforeCancel, faults.DropAfterCommit, faults.Error5xx,
				faults.Delay, faults.Reset, faults.RateLimit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := expectedFaults(rules, reference.Stats{Submits: tt.submits, Gets: tt.gets, Cancels: tt.cancel})
			want := map[faults.Kind]bool{}
			for _, k := range tt.want {
				want[k] = true
			}
			NewWithT(t).Expect(got).To(Equal(want))
		})
	}
}

func TestLateness(t *testing.T) {
	bound := 15 * time.Second
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &call{created: created, plan: plan{limit: 40 * time.Second}} // approval limit at +34s
	v := newToolVersions()
	v.editedAt["t"] = []time.Time{created.Add(25 * time.Second)}
	tests := []struct {
		name      string
		decided   time.Duration // after creation
		tool      string
		timeToRun bool
		allowed   []string
	}{
		{name: "early, no edit", decided: 2 * time.Second, tool: "other", timeToRun: true},
		{name: "early, before an edit with time to spare", decided: 9 * time.Second, tool: "t", timeToRun: true},
		{name: "close to the edit", decided: 12 * time.Second, tool: "t", allowed: []string{"ToolChanged"}},
		{name: "close to the limit", decided: 20 * time.Second, tool: "other", allowed: []string{"WaitingLimitReached", "ApprovalExpired"}},
		{name: "close to both", decided: 20 * time.Second, tool: "t", allowed: []string{"WaitingLimitReached", "ApprovalExpired", "ToolChanged"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			l := lateOf(c, tt.tool, created.Add(tt.decided), v, bound)
			g.Expect(l.timeToRun()).To(Equal(tt.timeToRun))
			allowed := l.allowedReasons()
			g.Expect(allowed).To(HaveLen(len(tt.allowed)))
			for _, r := range tt.allowed {
				g.Expect(allowed).To(HaveKey(r))
			}
		})
	}
}

// In asynchronous mode the delivery faults are expected from the delivery attempts alone: rules of op
// any (5xx, resets, rate limits) do not act on deliveries.
func TestExpectedDeliveryFaults(t *testing.T) {
	g := NewWithT(t)
	rules := append(faultRules(), deliveryFaultRules()...)
	g.Expect(expectedFaults(rules, reference.Stats{DeliveryAttempts: 2})).To(Equal(map[faults.Kind]bool{
		faults.DropDelivery: true, faults.Duplicate: true}))
	g.Expect(expectedFaults(rules, reference.Stats{DeliveryAttempts: 3})).To(HaveKey(faults.Delay))
	g.Expect(expectedFaults(faultRules(), reference.Stats{DeliveryAttempts: 1000})).To(BeEmpty(), "no delivery faults in synchronous mode")
}

func TestParseVariant(t *testing.T) {
	g := NewWithT(t)
	for entry, want := range map[string]variant{
		"full":       {name: "full", profile: reference.ProfileFull},
		"seed":       {name: "seed", profile: reference.ProfileSeed},
		"async":      {name: "full-async", profile: reference.ProfileFull, async: true},
		"seed-async": {name: "seed-async", profile: reference.ProfileSeed, async: true},
	} {
		g.Expect(parseVariant(entry)).To(Equal(want), entry)
	}
	for _, bad := range []string{"", "-async", "fast", "fast-async"} {
		g.Expect(parseVariant(bad)).Error().To(HaveOccurred(), bad)
	}
}
