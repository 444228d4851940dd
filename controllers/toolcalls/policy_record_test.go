package toolcalls

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/provider"
)

// A rule's approval already in the status is kept (after a failed Job create) only if this
// controller could have written it: the same rule, decided no later than now, valid no longer than
// the approval timeout from its decision and the approval limit. Anything else is recorded anew.
func TestRecordPolicyApprovalKeepsOnlyWhatTheRuleGrants(t *testing.T) {
	created := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	w := lifecycle.Window{Created: created, WaitingLimit: time.Hour, ExecutionTimeout: 5 * time.Minute}
	tm := lifecycle.Timing{ReturnMargin: 10 * time.Second, FinalStateMargin: 15 * time.Second, SkewMargin: time.Second}
	const timeout = 10 * time.Minute
	now := created.Add(2 * time.Minute)
	decided := created.Add(time.Minute)
	at := func(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }
	fresh := &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "small", DecidedAt: at(now), ExpiresAt: at(now.Add(timeout))}
	cases := []struct {
		name     string
		recorded *tg.Decision
		want     *tg.Decision
	}{
		{"none recorded", nil, fresh},
		{"the rule's own is kept", &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "small", DecidedAt: at(decided), ExpiresAt: at(decided.Add(timeout))},
			&tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "small", DecidedAt: at(decided), ExpiresAt: at(decided.Add(timeout))}},
		{"a longer validity is not", &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "small", DecidedAt: at(decided), ExpiresAt: at(decided.Add(timeout + time.Second))}, fresh},
		{"a decision in the future is not", &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "small", DecidedAt: at(now.Add(time.Hour)), ExpiresAt: at(now.Add(time.Hour))}, fresh},
		{"one without a decision time is not", &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "small", ExpiresAt: at(now)}, fresh},
		{"another rule's is not", &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourcePolicy, Rule: "other", DecidedAt: at(decided), ExpiresAt: at(decided.Add(time.Minute))}, fresh},
	}
	for _, c := range cases {
		tc := &tg.ToolCall{}
		tc.Status.Decision = c.recorded
		recordPolicyApproval(tc, "small", w, timeout, tm, now)
		got := tc.Status.Decision
		if got.Rule != c.want.Rule || !got.DecidedAt.Equal(c.want.DecidedAt) || !got.ExpiresAt.Equal(c.want.ExpiresAt) || got.Source != tg.DecisionSourcePolicy {
			t.Errorf("%s: recorded %+v, want %+v", c.name, got, c.want)
		}
	}
}
