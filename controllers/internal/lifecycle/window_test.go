package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)

func TestRequestedTimeout(t *testing.T) {
	tm := DefaultTiming()
	w := Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 5 * time.Minute}
	// limit = 45m - 5m - 10s = 39m50s after creation.
	cases := []struct {
		name     string
		explicit *time.Duration
		now      time.Time
		want     time.Duration
		wantErr  string
	}{
		{name: "explicit fits", explicit: ptr.To(30 * time.Minute), now: t0, want: 30 * time.Minute},
		{name: "explicit exactly fits", explicit: ptr.To(39*time.Minute + 35*time.Second), now: t0, want: 39*time.Minute + 35*time.Second},
		{name: "explicit one second too long", explicit: ptr.To(39*time.Minute + 36*time.Second), now: t0, wantErr: "timeout 39m36s + final-state margin 15s must be at most the 39m50s left"},
		{name: "explicit fits at creation but not later", explicit: ptr.To(30 * time.Minute), now: t0.Add(10 * time.Minute), wantErr: "at most the 29m50s left"},
		// The largest that fits is 39m30s; asked for in one unit it is rounded down to whole minutes.
		{name: "default is the largest that fits, in whole minutes", now: t0, want: 39 * time.Minute},
		{name: "default shrinks with the time already spent", now: t0.Add(10*time.Minute + 500*time.Millisecond), want: 29 * time.Minute},
		{name: "default under a minute is in whole seconds", now: t0.Add(39*time.Minute + 500*time.Millisecond), want: 29 * time.Second},
		{name: "default when no room is left", now: t0.Add(39*time.Minute + 40*time.Second), wantErr: "does not fit"},
		{name: "sub-second explicit truncated and refused", explicit: ptr.To(500 * time.Millisecond), now: t0, wantErr: "timeout 0s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := tm.RequestedTimeout(w, tc.explicit, tc.now)
			err := tm.CheckFits(w, got, tc.now)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestRequestedTimeoutNoRoom(t *testing.T) {
	g := NewWithT(t)
	// A waiting limit shorter than the execution timeout leaves no room at all.
	w := Window{Created: t0, WaitingLimit: 2 * time.Minute, ExecutionTimeout: 5 * time.Minute}
	tm := DefaultTiming()
	err := tm.CheckFits(w, tm.RequestedTimeout(w, nil, t0), t0)
	g.Expect(err).To(MatchError(ContainSubstring("raise spec.waitingLimit or lower spec.timeout")))
	g.Expect(err).To(MatchError(ContainSubstring("waitingLimit 2m0s - Tool executionTimeout 5m0s - return margin 10s")))
}

func TestPollUntil(t *testing.T) {
	tm := DefaultTiming()
	w := Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 5 * time.Minute}
	limit := t0.Add(39*time.Minute + 50*time.Second)
	cases := []struct {
		name     string
		deadline time.Time
		want     time.Time
	}{
		{name: "deadline plus margin", deadline: t0.Add(30 * time.Minute), want: t0.Add(30*time.Minute + 15*time.Second)},
		{name: "capped by our limit", deadline: t0.Add(39*time.Minute + 40*time.Second), want: limit},
		{name: "unknown deadline polls to our limit", deadline: time.Time{}, want: limit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tm.PollUntil(w, tc.deadline)).To(Equal(tc.want))
		})
	}
}

func TestApprovalUsable(t *testing.T) {
	tm := DefaultTiming()
	expires := t0.Add(7 * time.Minute)
	cases := []struct {
		name string
		now  time.Time
		want bool
	}{
		{name: "well before", now: t0.Add(2 * time.Minute), want: true},
		{name: "just inside the skew margin", now: expires.Add(-time.Second - time.Nanosecond), want: true},
		{name: "at the skew margin", now: expires.Add(-time.Second), want: false},
		{name: "at expiry", now: expires, want: false},
		{name: "after expiry", now: expires.Add(time.Hour), want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tm.ApprovalUsable(tc.now, expires)).To(Equal(tc.want))
		})
	}
}

func TestActiveDeadline(t *testing.T) {
	tm := DefaultTiming()
	w := Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 5 * time.Minute}
	cases := []struct {
		name string
		now  time.Time
		want int64
	}{
		{name: "capped by execution timeout", now: t0.Add(2 * time.Minute), want: 300},
		{name: "what is left of the waiting limit", now: t0.Add(42 * time.Minute), want: 170},
		{name: "nothing left", now: t0.Add(44*time.Minute + 50*time.Second), want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tm.ActiveDeadline(w, tc.now)).To(Equal(tc.want))
		})
	}
}
