package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func liveToolCall(phase tg.ToolCallPhase, mutate ...func(*tg.ToolCall)) *tg.ToolCall {
	tc := &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Name: "refund", CreationTimestamp: metav1.NewTime(t0)},
		Spec:       tg.ToolCallSpec{Tool: "issue_refund", WaitingLimit: metav1.Duration{Duration: 2 * time.Minute}},
		Status:     tg.ToolCallStatus{Phase: phase},
	}
	for _, m := range mutate {
		m(tc)
	}
	return tc
}

func TestLiveParts(t *testing.T) {
	deadline := func(tc *tg.ToolCall) { d := metav1.NewTime(t0.Add(75 * time.Second)); tc.Status.DeadlineAt = &d }
	cases := []struct {
		name string
		tc   *tg.ToolCall
		now  time.Time
		want []string
	}{
		{"created, not yet seen", liveToolCall(""), t0.Add(2 * time.Second),
			[]string{"Pending", "1m58s left of the 2m waiting limit"}},
		{"submit failing", liveToolCall(tg.PhasePending, func(tc *tg.ToolCall) { tc.Status.Reason = tg.ReasonSubmitFailed }), t0.Add(time.Minute),
			[]string{"Pending (SubmitFailed)", "1m left of the 2m waiting limit"}},
		{"awaiting", liveToolCall(tg.PhaseAwaitingApproval, deadline), t0.Add(28 * time.Second),
			[]string{"AwaitingApproval", "1m32s left of the 2m waiting limit", "provider deadline in 47s (12:01:15)"}},
		{"deadline passed", liveToolCall(tg.PhaseAwaitingApproval, deadline), t0.Add(80 * time.Second),
			[]string{"AwaitingApproval", "40s left of the 2m waiting limit", "provider deadline passed (12:01:15)"}},
		{"running", liveToolCall(tg.PhaseRunning, deadline, func(tc *tg.ToolCall) { tc.Status.JobName = "refund-0a1b2c3d4e" }), t0.Add(90 * time.Second),
			[]string{"Running", "30s left of the 2m waiting limit", "job refund-0a1b2c3d4e"}},
		{"limit passed", liveToolCall(tg.PhaseRunning), t0.Add(3 * time.Minute),
			[]string{"Running", "the 2m waiting limit has passed"}},
		{"approved by a rule", liveToolCall(tg.PhaseRunning, func(tc *tg.ToolCall) {
			tc.Status.JobName = "refund-0a1b2c3d4e"
			tc.Status.Decision = &tg.Decision{Status: "approved", Source: tg.DecisionSourcePolicy, Rule: "small-gbp-refunds"}
		}), t0.Add(90 * time.Second),
			[]string{"Running", "30s left of the 2m waiting limit", "approved by rule small-gbp-refunds", "job refund-0a1b2c3d4e"}},
		{"denied by a rule", liveToolCall(tg.PhaseRejected, func(tc *tg.ToolCall) {
			tc.Status.Decision = &tg.Decision{Status: "denied", Source: tg.DecisionSourcePolicy, Rule: "never-prod"}
		}), t0.Add(time.Second),
			[]string{"Rejected", "denied by rule never-prod"}},
		{"terminal", liveToolCall(tg.PhaseDenied, deadline, func(tc *tg.ToolCall) { tc.Status.Reason = tg.ReasonDenied }), t0.Add(10 * time.Second),
			[]string{"Denied"}},
	}
	for _, c := range cases {
		NewWithT(t).Expect(liveParts(c.tc, c.now)).To(Equal(c.want), c.name)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "<1s", 400 * time.Millisecond: "<1s", 10 * time.Second: "10s", 90 * time.Second: "1m30s",
		2 * time.Minute: "2m", time.Hour: "1h", time.Hour + 5*time.Minute: "1h5m", time.Hour + 5*time.Second: "1h0m5s",
		1500 * time.Millisecond: "2s",
	} {
		NewWithT(t).Expect(shortDuration(d)).To(Equal(want), d.String())
	}
}

func TestLiveWithoutATerminalPrintsOneLinePerPhase(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	l := newLive(&b, false)
	l.now = func() time.Time { return t0.Add(30 * time.Second) }
	l.update(liveToolCall(""))
	l.update(liveToolCall(tg.PhaseAwaitingApproval))
	l.update(liveToolCall(tg.PhaseAwaitingApproval, func(tc *tg.ToolCall) { tc.Finalizers = []string{"x"} }))
	l.update(liveToolCall(tg.PhaseRunning))
	l.update(liveToolCall(tg.PhaseSucceeded)) // the outcome is report's to print
	l.stop()
	l.update(liveToolCall(tg.PhaseRunning))
	g.Expect(b.String()).To(Equal("" +
		"toolcall refund: Pending, 1m30s left of the 2m waiting limit\n" +
		"toolcall refund: AwaitingApproval, 1m30s left of the 2m waiting limit\n" +
		"toolcall refund: Running, 1m30s left of the 2m waiting limit\n"))
}

func TestLiveOnATerminalRedrawsOneLineAndErasesIt(t *testing.T) {
	g := NewWithT(t)
	var b syncBuffer
	l := newLive(&b, true)
	l.mu.Lock()
	l.now = func() time.Time { return t0.Add(30 * time.Second) }
	l.mu.Unlock()
	l.update(liveToolCall(""))
	l.update(liveToolCall(tg.PhaseAwaitingApproval))
	l.update(liveToolCall(tg.PhaseSucceeded))
	l.stop()
	out := b.String()
	const pending = "toolcall refund: Pending  1m30s left of the 2m waiting limit"
	const awaiting = "toolcall refund: AwaitingApproval  1m30s left of the 2m waiting limit"
	g.Expect(out).To(HavePrefix("\r" + pending + "\r" + awaiting + "\r"))
	g.Expect(out).NotTo(ContainSubstring("\n"), "one line, rewritten in place")
	g.Expect(out).NotTo(ContainSubstring("Succeeded"))
	g.Expect(out).To(HaveSuffix("\r"+strings.Repeat(" ", len(awaiting))+"\r"), "erased at the end")
}

func TestWideTableAndDescribeShowTheRuleThatDecided(t *testing.T) {
	g := NewWithT(t)
	byRule := liveToolCall(tg.PhaseRunning, func(tc *tg.ToolCall) {
		tc.Status.JobName = "refund-0a1b2c3d4e"
		tc.Status.Reason = tg.ReasonJobCreated
		tc.Status.Decision = &tg.Decision{Status: "approved", Source: tg.DecisionSourcePolicy, Rule: "small-gbp-refunds"}
		tc.Status.Conditions = []metav1.Condition{{Type: tg.ConditionReady, Status: metav1.ConditionFalse, Reason: tg.ReasonJobCreated}}
		tc.Spec.Requester = &tg.Requester{Username: "system:serviceaccount:payments:refund-agent"}
	})
	byHuman := liveToolCall(tg.PhaseDenied, func(tc *tg.ToolCall) {
		tc.Name = "refund-2"
		tc.Status.Reason = tg.ReasonDenied
		tc.Status.Decision = &tg.Decision{Status: "denied", Source: tg.DecisionSourceProvider}
	})
	var out bytes.Buffer
	table(&out, []tg.ToolCall{*byRule, *byHuman}, false, true, t0.Add(time.Minute))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "TOOL", "PHASE", "READY", "DECISION", "JOB", "AGE", "RULE", "REQUESTER", "REASON", "MESSAGE"}))
	g.Expect(strings.Fields(lines[1])[:10]).To(Equal([]string{"refund", "issue_refund", "Running", "False", "approved", "refund-0a1b2c3d4e", "60s", "small-gbp-refunds", "system:serviceaccount:payments:refund-agent", "JobCreated"}))
	g.Expect(strings.Fields(lines[2])[:4]).To(Equal([]string{"refund-2", "issue_refund", "Denied", "<none>"}), "no Ready condition yet")
	g.Expect(strings.Fields(lines[2])[7:9]).To(Equal([]string{"<none>", "<none>"}))

	g.Expect(decidedBy(byRule.Status.Decision)).To(Equal("rule small-gbp-refunds of the Tool's spec.approval (no human was asked)"))
	g.Expect(decidedBy(byHuman.Status.Decision)).To(Equal("the approvals provider"))
	g.Expect(decidedBy(&tg.Decision{Status: "approved"})).To(Equal("the approvals provider"), "an empty source is the provider")
}

func TestDescribeSaysWhoAsked(t *testing.T) {
	g := NewWithT(t)
	g.Expect(requestedBy(&tg.Requester{Username: "system:serviceaccount:payments:refund-agent", UID: "0f4c", Groups: []string{"system:serviceaccounts", "system:authenticated"}})).
		To(Equal("system:serviceaccount:payments:refund-agent (uid 0f4c), groups system:serviceaccounts, system:authenticated"))
	g.Expect(requestedBy(&tg.Requester{Username: "alice", Groups: []string{}})).To(Equal("alice"))
	g.Expect(requestedBy(nil)).To(ContainSubstring("not recorded"))
	var out bytes.Buffer
	describe(&out, liveToolCall(tg.PhasePending, func(tc *tg.ToolCall) {
		tc.Spec.Requester = &tg.Requester{Username: "alice", Groups: []string{"oncall"}}
	}), t0)
	g.Expect(out.String()).To(MatchRegexp(`(?m)^Requested by: +alice, groups oncall$`))
}
