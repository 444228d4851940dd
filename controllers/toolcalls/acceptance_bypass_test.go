package toolcalls_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// The fix every rejected acceptance record names.
const createWithoutRecord = "create ToolCalls without toolgate.dev/ finalizers or annotations"

// forge creates a ToolCall that already carries the finalizer and the given annotations, as anyone
// allowed to create ToolCalls can: the acceptance record the controller would otherwise write.
func forge(h *th.Harness, name, args string, waitingLimit time.Duration, timeout *time.Duration, annotations map[string]string) *tg.ToolCall {
	h.T.Helper()
	tc := h.NewToolCall(name, "issue_refund", args, waitingLimit, timeout)
	tc.Finalizers = []string{tg.Finalizer}
	tc.Annotations = annotations
	h.G.Expect(h.K8s.Create(context.Background(), tc)).To(Succeed())
	return tc
}

// record is an acceptance record for the harness's refund Tool (executionTimeout 5s).
func record(exec, approval string) map[string]string {
	return map[string]string{tg.AnnotationExecutionTimeout: exec, tg.AnnotationApprovalTimeout: approval}
}

// versioned adds the Tool's version to an acceptance record, as the controller writes it.
func versioned(record map[string]string, tool *tg.Tool) map[string]string {
	record[tg.AnnotationToolUID] = string(tool.UID)
	record[tg.AnnotationToolGeneration] = strconv.FormatInt(tool.Generation, 10)
	return record
}

// expectNothingLeftPending checks that every approval request was withdrawn (cancelled by DELETE, in
// both provider profiles) and no Job exists.
func expectNothingLeftPending(h *th.Harness) {
	h.T.Helper()
	h.G.Eventually(func(g Gomega) {
		all, err := h.Provider.List("")
		g.Expect(err).NotTo(HaveOccurred())
		for _, req := range all {
			g.Expect(req.Status).To(Equal(h.WithdrawnStatus()), "request %s", req.ID)
		}
	}).Should(Succeed())
	h.G.Expect(h.Jobs()).To(BeEmpty())
}

// A ToolCall created with a forged acceptance record is still held to the Tool's argumentsSchema.
func TestForgedAcceptanceDoesNotSkipArgumentValidation(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	forge(h, "refund", `{"payment_id":"p","amount":0,"currency":"JPY"}`, 2*time.Minute, nil, record("5s", "60s"))

	r := h.WaitPhase("refund", tg.PhaseRejected)
	g.Expect(r.Status.Reason).To(Equal(tg.ReasonInvalidArguments))
	g.Expect(r.Status.Message).To(And(ContainSubstring("at /amount"), ContainSubstring("argumentsSchema")))
	g.Eventually(func() []string { return h.Get("refund").Finalizers }).Should(BeEmpty())
	expectNothingLeftPending(h)
}

// Annotations that this controller would not have written end the ToolCall before any human is
// asked, with a message that names the annotation and the fix.
func TestForgedAcceptanceAnnotationsAreRejected(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	// With a 2m waiting limit: approval limit = 2m - 5s exec - 1s return = 114s; at most 112s fits.
	cases := []struct {
		name         string
		waitingLimit time.Duration
		timeout      *time.Duration
		annotations  map[string]string
		message      []string
	}{
		// The bypass itself: a long execution timeout would become the Job's activeDeadlineSeconds.
		{"exec-longer", 2 * time.Hour, nil, record("1h", "60s"), []string{tg.AnnotationExecutionTimeout, "is 1h0m0s", "executionTimeout 5s"}},
		{"exec-shorter", 2 * time.Minute, nil, record("1s", "60s"), []string{tg.AnnotationExecutionTimeout, "is 1s"}},
		{"exec-not-duration", 2 * time.Minute, nil, record("unlimited", "60s"), []string{tg.AnnotationExecutionTimeout, `"unlimited", not a duration`}},
		{"approval-too-long", 2 * time.Minute, nil, record("5s", "10m"), []string{tg.AnnotationApprovalTimeout, "is 10m0s", "from 1s to 1m52s"}},
		{"approval-just-too-long", 2 * time.Minute, nil, record("5s", "113s"), []string{tg.AnnotationApprovalTimeout, "is 1m53s"}},
		{"approval-not-spec", 2 * time.Minute, ptr.To(time.Minute), record("5s", "90s"), []string{tg.AnnotationApprovalTimeout, "is 1m30s while spec.timeout is 1m0s"}},
		{"approval-fraction", 2 * time.Minute, nil, record("5s", "30500ms"), []string{tg.AnnotationApprovalTimeout, "whole seconds"}},
		{"approval-missing", 2 * time.Minute, nil, map[string]string{tg.AnnotationExecutionTimeout: "5s"}, []string{tg.AnnotationApprovalTimeout, "is missing"}},
	}
	for _, c := range cases {
		forge(h, c.name, th.RefundArgs, c.waitingLimit, c.timeout, c.annotations)
	}
	for _, c := range cases {
		r := h.WaitPhase(c.name, tg.PhaseRejected)
		g.Expect(r.Status.Reason).To(Equal(tg.ReasonAcceptanceRecordInvalid), c.name)
		for _, m := range append(c.message, createWithoutRecord, "The call did not run.") {
			g.Expect(r.Status.Message).To(ContainSubstring(m), c.name)
		}
		g.Eventually(func() []string { return h.Get(c.name).Finalizers }).Should(BeEmpty(), c.name)
		g.Eventually(func() []string { return h.EventReasons(c.name) }).Should(ContainElement(tg.ReasonAcceptanceRecordInvalid), c.name)
	}
	expectNothingLeftPending(h)
}

// The finalizer without the annotations it is written with: rejected at once instead of retried
// forever, and nothing is sent to the provider (no request can exist without both annotations).
func TestFinalizerWithoutAnnotationsIsRejected(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	forge(h, "refund", th.RefundArgs, 2*time.Minute, nil, nil)

	r := h.WaitPhase("refund", tg.PhaseRejected)
	g.Expect(r.Status.Reason).To(Equal(tg.ReasonAcceptanceRecordInvalid))
	g.Expect(r.Status.Message).To(And(
		ContainSubstring("finalizer "+tg.Finalizer),
		ContainSubstring("annotation "+tg.AnnotationExecutionTimeout+" is missing"),
		ContainSubstring(createWithoutRecord)))
	g.Eventually(func() []string { return h.Get("refund").Finalizers }).Should(BeEmpty())
	g.Expect(h.Provider.Stats().Submits).To(BeZero())
	g.Expect(h.Jobs()).To(BeEmpty())
}

// A forged record that matches what the controller would have written gains nothing: the call is
// asked for as any other, and its Job is held to the Tool's executionTimeout.
func TestConsistentForgedRecordIsHeldToTheToolsLimits(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	tool := h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	forge(h, "refund", th.RefundArgs, 2*time.Minute, nil, versioned(record("5s", "60s"), tool))

	req := h.PendingRequest("refund")
	g.Expect(req.Timeout).To(Equal("1m"))
	h.Approve(req.ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	jobs := h.Jobs()
	g.Expect(jobs).To(HaveLen(1))
	g.Expect(jobs[0].Name).To(Equal(running.Status.JobName))
	// The Tool's executionTimeout (5s): the 2m waiting limit leaves more than that.
	g.Expect(*jobs[0].Spec.ActiveDeadlineSeconds).To(BeEquivalentTo(5))
}

// A genuine record is trusted again after a restart: the submission failed after acceptance, and
// the next manager's POST carries the recorded (defaulted) timeout and creates the one request.
func TestGenuineAcceptanceRecordIsSubmittedAfterRestart(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	g.Expect(h.Provider.Faults().Set(faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Probability: 1})).To(Succeed())
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	p := h.WaitPhase("refund", tg.PhasePending)
	g.Expect(p.Status.Reason).To(Equal(tg.ReasonSubmitFailed))
	g.Expect(p.Finalizers).To(ContainElement(tg.Finalizer))
	// The defaulted timeout by the timing rules (Timing.RequestedTimeout with the harness's margins):
	// the approval limit, creation + 2m - 5s executionTimeout - 1s return margin, less the 2s
	// final-state margin and the 1s submit allowance, counted from the acceptance and rounded down to
	// whole minutes: 1m for an acceptance in the first 51s after creation.
	w := controllers.Window{Created: p.CreationTimestamp.Time, WaitingLimit: 2 * time.Minute, ExecutionTimeout: 5 * time.Second}
	g.Expect(th.TestTiming().RequestedTimeout(w, nil, p.CreationTimestamp.Time)).To(Equal(time.Minute))
	g.Expect(th.TestTiming().RequestedTimeout(w, nil, p.CreationTimestamp.Add(51*time.Second))).To(Equal(time.Minute))
	recorded := p.Annotations[tg.AnnotationApprovalTimeout]
	g.Expect(recorded).To(Equal("1m0s"))

	h.StopManager()
	h.Provider.Faults().Clear()
	h.Start()
	req := h.PendingRequest("refund")
	g.Expect(req.Timeout).To(Equal("1m"), "the recorded timeout, as AAP writes it")
	g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1))
	g.Expect(h.Get("refund").Annotations).To(HaveKeyWithValue(tg.AnnotationApprovalTimeout, recorded), "the record is never rewritten")
}

// The Tool's executionTimeout changed between the acceptance and a restart after the POST: the
// record no longer matches the Tool, so nothing runs on doubt, and the request the crash left at the
// provider is withdrawn.
func TestToolChangedAfterAcceptanceRejectsAndWithdrawsTheRequest(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	crashed := crashAt(h, afterSubmit)
	h.StopManager()
	h.Start()
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	g.Eventually(crashed).WithTimeout(20 * time.Second).Should(BeClosed())
	h.StopManager()
	pending, err := h.Provider.List(provider.StatusPending)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(HaveLen(1), "the crash left the submitted request")

	tool := &tg.Tool{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "issue-refund"}, tool)).To(Succeed())
	tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: 7 * time.Second}
	g.Expect(h.K8s.Update(context.Background(), tool)).To(Succeed())
	h.Restart()

	r := h.WaitPhase("refund", tg.PhaseRejected)
	g.Expect(r.Status.Reason).To(Equal(tg.ReasonAcceptanceRecordInvalid))
	g.Expect(r.Status.Message).To(And(ContainSubstring(tg.AnnotationExecutionTimeout+" is 5s"), ContainSubstring("executionTimeout 7s")))
	got, err := h.Provider.Get(pending[0].ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(h.WithdrawnStatus()))
	g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1), "withdrawing replays the POST; it creates nothing")
	expectNothingLeftPending(h)
}
