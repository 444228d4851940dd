package lifecycle

import (
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

var verbs = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z%]`)

// argsFor returns an argument of the right kind for each verb of format.
func argsFor(format string) []any {
	var args []any
	for _, v := range verbs.FindAllString(format, -1) {
		switch v[len(v)-1] {
		case '%':
		case 'd':
			args = append(args, 7)
		default:
			args = append(args, "x")
		}
	}
	return args
}

// Every row of the outcome table is complete and says what its phase means: a phase where the tool
// never runs says so, a phase where it runs or may still run does not say it did not.
func TestOutcomeTableRows(t *testing.T) {
	g := NewWithT(t)
	rows := Rows()
	g.Expect(rows).To(HaveLen(int(outcomes)))
	for o, row := range rows {
		g.Expect(row.Phase).NotTo(BeEmpty(), "outcome %d has no phase", o)
		g.Expect(row.Reason).To(MatchRegexp(`^[A-Z][A-Za-z]+$`), "outcome %d: the reason is one CamelCase word", o)
		g.Expect(row.Format).NotTo(BeEmpty(), "outcome %d has no message", o)
		switch row.Phase {
		case tg.PhaseDenied, tg.PhaseExpired, tg.PhaseApprovalUnavailable, tg.PhaseCancelled:
			g.Expect(row.Closing).To(Equal(DidNotRun), "outcome %d (%s/%s) ends a call that never ran: its message says so", o, row.Phase, row.Reason)
		case tg.PhasePending, tg.PhaseAwaitingApproval, tg.PhaseRunning, tg.PhaseSucceeded:
			g.Expect(row.Closing).NotTo(Equal(DidNotRun), "outcome %d (%s/%s) is not an end without running", o, row.Phase, row.Reason)
			g.Expect(row.Format).NotTo(ContainSubstring("did not run"), "outcome %d (%s/%s)", o, row.Phase, row.Reason)
		}
		// The closing sentence is data, never written into a format by hand.
		g.Expect(row.Format).NotTo(HaveSuffix(strings.TrimSpace(DidNotRun)), "outcome %d (%s/%s): use Closing: DidNotRun", o, row.Phase, row.Reason)
	}
}

// Every format renders cleanly with as many arguments as it has verbs, and ends a sentence, so that
// no status ever shows %!s(MISSING) or a cut-off message.
func TestOutcomeMessagesRender(t *testing.T) {
	for o, row := range Rows() {
		msg := Outcome(o).Status(argsFor(row.Format)...).Message
		if strings.Contains(msg, "%!") {
			t.Errorf("outcome %d (%s/%s) renders as %q", o, row.Phase, row.Reason, msg)
		}
		if !strings.HasSuffix(msg, ".") && !strings.HasSuffix(row.Format, "%s") && !strings.HasSuffix(row.Format, "%v") {
			t.Errorf("outcome %d (%s/%s) does not end a sentence: %q", o, row.Phase, row.Reason, msg)
		}
	}
}

// Statuses carry their row's phase and reason, and the messages users read are exactly these.
func TestOutcomeStatuses(t *testing.T) {
	cases := []struct {
		name    string
		status  *Status
		phase   tg.ToolCallPhase
		reason  string
		message string
	}{
		{"waiting", AwaitingHuman.Status(), tg.PhaseAwaitingApproval, tg.ReasonAwaitingApproval,
			"Waiting for a human to approve or deny the call."},
		{"retrying", SubmitRetrying.Status("provider error unavailable"), tg.PhasePending, tg.ReasonSubmitFailed,
			"The approval request could not be submitted yet (provider error unavailable); retrying until the waiting limit."},
		{"running", JobRunning.Status("refund-1-abc"), tg.PhaseRunning, tg.ReasonJobCreated,
			"Approved; the tool is running as Job refund-1-abc."},
		{"denied with a note", HumanDeniedWithNote.Status(`not "today"`), tg.PhaseDenied, tg.ReasonDenied,
			`A human denied the call: "not \"today\"". The call did not run.`},
		{"denied", HumanDenied.Status(), tg.PhaseDenied, tg.ReasonDenied,
			"A human denied the call. The call did not run."},
		{"job failed", JobFailed.Status("BackoffLimitExceeded: Job has reached the specified backoff limit"), tg.PhaseFailed, tg.ReasonJobFailed,
			"The tool's Job failed (BackoffLimitExceeded: Job has reached the specified backoff limit); status.result holds the tool's last message, if it wrote one."},
		{"tool gone before the Job", ApprovedToolMissing.Status(UnknownTool.Status("issue_refund", "demo", "issue_refund").Message), tg.PhaseFailed, tg.ReasonInvalidTool,
			`The call was approved but could not start: spec.tool "issue_refund": no Tool in namespace demo has spec.toolName "issue_refund"; ask an admin to create one, or fix spec.tool. The call did not run.`},
		{"record not ours", RecordInvalid.Status("annotation toolgate.dev/approval-timeout is missing"), tg.PhaseRejected, tg.ReasonAcceptanceRecordInvalid,
			"The ToolCall carries the finalizer toolgate.dev/cancel-approval-request, which records that the controller accepted it, but annotation " +
				"toolgate.dev/approval-timeout is missing. The controller does not submit or run a ToolCall on an acceptance record it did not write: create " +
				"ToolCalls without toolgate.dev/ finalizers or annotations (the controller adds them). The call did not run."},
		{"rules do not compile", RulesInvalid.Status("refund", "rule big: undeclared reference"), tg.PhaseRejected, tg.ReasonInvalidApprovalRules,
			"Tool refund: its spec.approval does not compile (rule big: undeclared reference); an admin must fix the Tool. No human was asked and the call did not run."},
		{"tool changed while waiting", ToolChangedWithdrawn.Status("Tool refund was changed after the ToolCall was accepted (generation 2, accepted against 1)"),
			tg.PhaseCancelled, tg.ReasonToolChanged,
			"The call could not be approved: Tool refund was changed after the ToolCall was accepted (generation 2, accepted against 1), so the approval request " +
				"was withdrawn before anyone decided; an approval would cover the accepted version only. Create the ToolCall again to run it with the Tool as it is now. The call did not run."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(c.status.Phase()).To(Equal(c.phase))
			g.Expect(c.status.Reason()).To(Equal(c.reason))
			g.Expect(c.status.Message).To(Equal(c.message))
		})
	}
}

// The Failed outcome of a wait for an image quotes what the Running outcome recorded: the body of its
// message, without the sentence that promised the Job's deadline.
func TestImageWaitBodyRoundTrips(t *testing.T) {
	g := NewWithT(t)
	running := ImageWaiting.Status("refund-1-abc", "tool", "image name localhost/refund: is not valid", "InvalidImageName")
	g.Expect(running.Message).To(Equal("Job refund-1-abc's container tool has not started: image name localhost/refund: is not valid (InvalidImageName). " +
		"The call was approved; the tool has not run, and the Job's deadline ends the call unless the image becomes available."))
	body := ImageWaiting.Body(running.Message)
	g.Expect(body).To(Equal("Job refund-1-abc's container tool has not started: image name localhost/refund: is not valid (InvalidImageName)."))

	failed := ImageNeverArrived.Status("DeadlineExceeded: Job was active longer than specified deadline", body)
	g.Expect(failed.Phase()).To(Equal(tg.PhaseFailed))
	g.Expect(failed.Reason()).To(Equal(tg.ReasonImageUnavailable))
	g.Expect(failed.Message).To(Equal("The tool's Job failed (DeadlineExceeded: Job was active longer than specified deadline) before its container started, " +
		"so the tool did not run, as last reported by the kubelet. " + body))

	// A message the row did not write is quoted whole.
	g.Expect(ImageWaiting.Body("edited by hand")).To(Equal("edited by hand"))
}

// Rows returns a copy: a caller cannot rewrite what the controller records.
func TestRowsIsACopy(t *testing.T) {
	g := NewWithT(t)
	Rows()[AwaitingHuman] = Row{Phase: tg.PhaseFailed}
	EventRows()[RuleApproved] = EventRow{Type: corev1.EventTypeWarning}
	g.Expect(AwaitingHuman.Status().Phase()).To(Equal(tg.PhaseAwaitingApproval))
	g.Expect(RuleApproved.Row().Type).To(Equal(corev1.EventTypeNormal))
}

// Every event has a type, a reason and an action, and its note renders cleanly.
func TestEventTableRows(t *testing.T) {
	g := NewWithT(t)
	rows := EventRows()
	g.Expect(rows).To(HaveLen(int(events)))
	for e, row := range rows {
		g.Expect(row.Type).To(BeElementOf(corev1.EventTypeNormal, corev1.EventTypeWarning), "event %d", e)
		g.Expect(row.Reason).To(MatchRegexp(`^[A-Z][A-Za-z]+$`), "event %d", e)
		g.Expect(row.Action).To(MatchRegexp(`^[A-Z][A-Za-z]+$`), "event %d", e)
		note := Event(e).Note(argsFor(row.Format)...)
		g.Expect(note).NotTo(ContainSubstring("%!"), "event %d", e)
		g.Expect(note).To(HaveSuffix("."), "event %d", e)
	}
	g.Expect(GaveUpCancelOnDelete.Note("unavailable")).To(Equal("Gave up cancelling the approval request (unavailable); it ends at its provider deadline."))
}
