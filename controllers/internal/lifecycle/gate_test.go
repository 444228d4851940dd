package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// acceptedTool is the Tool the gate's calls were accepted against.
func acceptedTool() *tg.Tool {
	tool := &tg.Tool{}
	tool.Name, tool.UID, tool.Generation = "issue-refund", "tool-uid-1", 3
	tool.Spec.ToolName = "issue_refund"
	return tool
}

// acceptedCall is a ToolCall accepted against acceptedTool, with decision d.
func acceptedCall(d *tg.Decision) *tg.ToolCall {
	tc := &tg.ToolCall{}
	tc.Spec.Tool = "issue_refund"
	tc.Annotations = map[string]string{
		tg.AnnotationToolUID: "tool-uid-1", tg.AnnotationToolGeneration: "3", tg.AnnotationToolName: "issue-refund",
	}
	tc.Status.Decision = d
	return tc
}

func approval(expires time.Time) *tg.Decision {
	return &tg.Decision{Status: provider.StatusApproved, Source: tg.DecisionSourceProvider, ExpiresAt: &metav1.Time{Time: expires}}
}

// The run gate, immediately before the Job: only an approval still usable at now, within the approval
// limit, with a second left to run, for the accepted version of the Tool, lets the call start; each
// refusal is the outcome that says why.
func TestRunGate(t *testing.T) {
	tm := DefaultTiming()
	w := Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 5 * time.Minute}
	limit := tm.ApprovalLimit(w) // t0 + 39m50s
	expires := t0.Add(10 * time.Minute)
	edited := acceptedTool()
	edited.Generation = 4
	recreated := acceptedTool()
	recreated.UID = "tool-uid-2"
	unrecorded := acceptedCall(approval(expires))
	unrecorded.Annotations = nil

	cases := []struct {
		name    string
		tc      *tg.ToolCall
		tool    *tg.Tool
		w       Window
		now     time.Time
		want    Outcome // -1: the call starts
		message string
	}{
		{name: "a valid approval starts the call", tc: acceptedCall(approval(expires)), tool: acceptedTool(), w: w, now: t0.Add(time.Minute), want: -1},
		{name: "just inside the skew margin", tc: acceptedCall(approval(expires)), tool: acceptedTool(), w: w, now: expires.Add(-time.Second - time.Nanosecond), want: -1},
		{name: "at the skew margin the approval is spent", tc: acceptedCall(approval(expires)), tool: acceptedTool(), w: w, now: expires.Add(-time.Second),
			want: ApprovalExpired, message: "The approval expired at 2026-09-16T12:10:00Z, before the call could start. The call did not run."},
		{name: "an approval without an expiry is never usable", tc: acceptedCall(&tg.Decision{Status: provider.StatusApproved}), tool: acceptedTool(), w: w, now: t0,
			want: ApprovalExpired},
		{name: "no decision", tc: acceptedCall(nil), tool: acceptedTool(), w: w, now: t0,
			want: DecisionNotApproval, message: "Approval could not be obtained: the recorded decision is not an approval. The call did not run."},
		{name: "a denial never runs", tc: acceptedCall(&tg.Decision{Status: provider.StatusDenied, ExpiresAt: &metav1.Time{Time: expires}}), tool: acceptedTool(), w: w, now: t0,
			want: DecisionNotApproval},
		{name: "at the approval limit", tc: acceptedCall(approval(t0.Add(time.Hour))), tool: acceptedTool(), w: w, now: limit,
			want: ApprovedTooLate, message: "Approval could not be obtained in time: the approval arrived after the waiting limit left room to run the tool. The call did not run."},
		{name: "an execution timeout under a second leaves nothing to run", tc: acceptedCall(approval(t0.Add(time.Hour))),
			tool: acceptedTool(), w: Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 500 * time.Millisecond}, now: t0.Add(time.Minute),
			want: ApprovedTooLate},
		{name: "the Tool was edited", tc: acceptedCall(approval(expires)), tool: edited, w: w, now: t0,
			want: ApprovedToolChanged, message: "The call was approved but could not start: Tool issue-refund was changed after the ToolCall was accepted (generation 4, accepted against 3); " +
				"the approval covers the accepted version only. Create the ToolCall again to run it with the Tool as it is now. The call did not run."},
		{name: "the Tool was re-created", tc: acceptedCall(approval(expires)), tool: recreated, w: w, now: t0, want: ApprovedToolChanged},
		{name: "a changed Tool wins over a spent approval", tc: acceptedCall(approval(expires)), tool: edited, w: w, now: expires, want: ApprovedToolChanged},
		{name: "no version recorded", tc: unrecorded, tool: acceptedTool(), w: w, now: t0, want: ApprovedToolChanged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			stop := RunGate(c.tc, c.tool, c.w, tm, c.now)
			if c.want < 0 {
				g.Expect(stop).To(BeNil())
				return
			}
			g.Expect(stop).NotTo(BeNil())
			g.Expect(stop.Outcome()).To(Equal(c.want), "%s/%s %q", stop.Phase(), stop.Reason(), stop.Message)
			g.Expect(stop.Phase().IsTerminal()).To(BeTrue())
			if c.message != "" {
				g.Expect(stop.Message).To(Equal(c.message))
			}
		})
	}
}

// How a Tool differs from the version a call was accepted against, one Tool at a time and among the
// namespace's Tools.
func TestToolVersionMismatch(t *testing.T) {
	otherName := acceptedCall(nil)
	otherName.Annotations[tg.AnnotationToolName] = "refund-v2"
	badGeneration := acceptedCall(nil)
	badGeneration.Annotations[tg.AnnotationToolGeneration] = "three"
	edited := acceptedTool()
	edited.Generation = 5
	recreated := acceptedTool()
	recreated.UID = "tool-uid-9"
	cases := []struct {
		name string
		tc   *tg.ToolCall
		tool *tg.Tool
		want string
	}{
		{"the accepted version", acceptedCall(nil), acceptedTool(), ""},
		{"edited", acceptedCall(nil), edited, "Tool issue-refund was changed after the ToolCall was accepted (generation 5, accepted against 3)"},
		{"re-created", acceptedCall(nil), recreated, "Tool issue-refund was deleted and created again after the ToolCall was accepted (UID tool-uid-9, accepted against tool-uid-1)"},
		{"a record naming another Tool", otherName, acceptedTool(), "the ToolCall records Tool refund-v2 (annotation toolgate.dev/tool-name) but was accepted against Tool issue-refund"},
		{"a generation that is not a number", badGeneration, acceptedTool(),
			"the ToolCall does not record which version of Tool issue-refund it was accepted against (annotations toolgate.dev/tool-uid and toolgate.dev/tool-generation)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(ToolVersionMismatch(c.tc, c.tool)).To(Equal(c.want))
		})
	}
}

func TestToolChangeAmong(t *testing.T) {
	tool := func(name string, uid types.UID, gen int64, toolName string) tg.Tool {
		tl := tg.Tool{}
		tl.Name, tl.UID, tl.Generation, tl.Spec.ToolName = name, uid, gen, toolName
		return tl
	}
	deleting := tool("issue-refund", "tool-uid-1", 3, "issue_refund")
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	noRecord := acceptedCall(nil)
	noRecord.Annotations = nil
	cases := []struct {
		name  string
		tc    *tg.ToolCall
		tools []tg.Tool
		want  string
	}{
		{"unchanged", acceptedCall(nil), []tg.Tool{tool("issue-refund", "tool-uid-1", 3, "issue_refund")}, ""},
		{"another toolName is not this call's", acceptedCall(nil), []tg.Tool{tool("other", "tool-uid-7", 1, "send_email"), tool("issue-refund", "tool-uid-1", 3, "issue_refund")}, ""},
		{"edited", acceptedCall(nil), []tg.Tool{tool("issue-refund", "tool-uid-1", 4, "issue_refund")},
			"Tool issue-refund was changed after the ToolCall was accepted (generation 4, accepted against 3)"},
		{"being deleted", acceptedCall(nil), []tg.Tool{deleting}, "Tool issue-refund is being deleted"},
		{"deleted", acceptedCall(nil), []tg.Tool{tool("other", "tool-uid-7", 1, "send_email")},
			"the Tool with toolName issue_refund that the ToolCall was accepted against was deleted"},
		{"re-created", acceptedCall(nil), []tg.Tool{tool("issue-refund", "tool-uid-2", 1, "issue_refund")},
			"Tool issue-refund was deleted and created again after the ToolCall was accepted (UID tool-uid-2, accepted against tool-uid-1)"},
		{"no version recorded is the acceptance check's", noRecord, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(ToolChangeAmong(c.tc, c.tools)).To(Equal(c.want))
		})
	}
}
