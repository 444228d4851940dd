package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// recordedCall is a ToolCall with the acceptance record admission writes for acceptedTool.
func recordedCall() *tg.ToolCall {
	tc := &tg.ToolCall{}
	tc.Name, tc.Namespace, tc.UID = "refund", "demo", "call-uid-1"
	tc.CreationTimestamp = metav1.NewTime(t0)
	tc.Spec.Tool = "issue_refund"
	tc.Spec.Arguments = runtime.RawExtension{Raw: []byte(`{"payment_id":"payment_123"}`)}
	tc.Spec.WaitingLimit = metav1.Duration{Duration: 45 * time.Minute}
	tc.Spec.Reason = "the customer asked for a refund"
	r := Record{ExecutionTimeout: 5 * time.Minute, ApprovalTimeout: 30 * time.Minute, Tool: VersionOf(acceptedTool())}
	r.Write(tc)
	return tc
}

// The acceptance record is read into the call's window and its approval request, the same on every
// read; a record that lacks what admission writes is an error that names the annotation.
func TestRecordAcceptance(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*tg.ToolCall)
		wantErr string
		check   func(g Gomega, a Acceptance)
	}{
		{name: "a record admission wrote", check: func(g Gomega, a Acceptance) {
			g.Expect(a.Window).To(Equal(Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 5 * time.Minute}))
			g.Expect(a.Submission.IdempotencyKey).To(Equal("call-uid-1"), "the key is the ToolCall's UID, the same on every attempt")
			g.Expect(a.Submission.Tool).To(Equal("issue_refund"))
			g.Expect(string(a.Submission.Arguments)).To(Equal(`{"payment_id":"payment_123"}`))
			g.Expect(a.Submission.Timeout).To(Equal(30 * time.Minute))
			g.Expect(a.Submission.AgentReasoning).To(Equal("the customer asked for a refund"))
			g.Expect(string(a.Submission.Context)).To(MatchJSON(
				`{"namespace":"demo","tool_call":{"name":"refund","uid":"call-uid-1"},"tool":{"name":"issue-refund","generation":3}}`))
			ref, err := a.Submission.Ref()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ref).To(Equal(provider.Ref{Tool: "issue_refund", Arguments: `{"payment_id":"payment_123"}`}))
		}},
		{name: "the requester is in the context, with its groups", edit: func(tc *tg.ToolCall) {
			tc.Spec.Requester = &tg.Requester{Username: "agent@example.com"}
		}, check: func(g Gomega, a Acceptance) {
			g.Expect(string(a.Submission.Context)).To(MatchJSON(`{"namespace":"demo","tool_call":{"name":"refund","uid":"call-uid-1"},` +
				`"requester":{"username":"agent@example.com","groups":[]},"tool":{"name":"issue-refund","generation":3}}`))
		}},
		{name: "a record without the Tool's version sends no tool in the context", edit: func(tc *tg.ToolCall) {
			delete(tc.Annotations, tg.AnnotationToolGeneration)
		}, check: func(g Gomega, a Acceptance) {
			g.Expect(string(a.Submission.Context)).To(MatchJSON(`{"namespace":"demo","tool_call":{"name":"refund","uid":"call-uid-1"}}`))
		}},
		{name: "not accepted yet", edit: func(tc *tg.ToolCall) { tc.Annotations = nil },
			wantErr: "annotation toolgate.dev/execution-timeout is missing (the controller writes it together with the finalizer)"},
		{name: "an approval timeout that is not a duration", edit: func(tc *tg.ToolCall) { tc.Annotations[tg.AnnotationApprovalTimeout] = "soon" },
			wantErr: `annotation toolgate.dev/approval-timeout is "soon", not a duration`},
		{name: "a Tool generation that is not a number", edit: func(tc *tg.ToolCall) { tc.Annotations[tg.AnnotationToolGeneration] = "three" },
			wantErr: "annotation toolgate.dev/tool-generation, written when the ToolCall was accepted, is not a number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			tc := recordedCall()
			if c.edit != nil {
				c.edit(tc)
			}
			a, err := ReadRecord(tc).Acceptance(tc, nil)
			if c.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(c.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			c.check(g, a)
			again, err := ReadRecord(tc).Acceptance(tc, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again).To(Equal(a), "every read of the record is the same request")
		})
	}
}

// A call's window comes from its creation, its waiting limit and the Tool's execution timeout, the
// default when the Tool sets none.
func TestNewWindowAndExecutionTimeout(t *testing.T) {
	g := NewWithT(t)
	tool := acceptedTool()
	g.Expect(ExecutionTimeout(tool)).To(Equal(5*time.Minute), "the default, %s", tg.DefaultExecutionTimeout)
	tool.Spec.ExecutionTimeout = &metav1.Duration{}
	g.Expect(ExecutionTimeout(tool)).To(Equal(5*time.Minute), "zero is not a timeout")
	tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: 90 * time.Second}
	g.Expect(ExecutionTimeout(tool)).To(Equal(90 * time.Second))

	w := NewWindow(recordedCall(), ExecutionTimeout(tool))
	g.Expect(w).To(Equal(Window{Created: t0, WaitingLimit: 45 * time.Minute, ExecutionTimeout: 90 * time.Second}))
	g.Expect(DefaultTiming().ApprovalLimit(w)).To(Equal(t0.Add(45*time.Minute - 90*time.Second - 10*time.Second)))
}

// A record read back is the record written, every field of it; what a forged or damaged annotation
// holds is a problem that names the annotation, and never a value.
func TestRecordWriteAndRead(t *testing.T) {
	g := NewWithT(t)
	want := Record{ExecutionTimeout: 90 * time.Second, ApprovalTimeout: 20 * time.Minute, Tool: VersionOf(acceptedTool()),
		Provider: ProviderRef{Kind: tg.KindClusterApprovalProvider, Name: "default"}, Instance: "inst-1", RuleApproved: true}
	tc := &tg.ToolCall{}
	tc.Annotations = map[string]string{"kept": "yes", tg.AnnotationProvider: "forged/x"}
	want.Write(tc)
	got := ReadRecord(tc)
	g.Expect(got.Problem(tg.AnnotationExecutionTimeout, tg.AnnotationApprovalTimeout, tg.AnnotationToolUID,
		tg.AnnotationToolGeneration, tg.AnnotationProvider)).To(Succeed())
	g.Expect(got).To(Equal(want), "the record written is the record read, so a reconcile that wrote it goes on with it")
	ga, err := got.Acceptance(tc, nil)
	g.Expect(err).NotTo(HaveOccurred())
	wa, err := want.Acceptance(tc, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wa).To(Equal(ga), "the same request body, from the record written and from the one read")
	g.Expect(tc.Annotations).To(HaveKeyWithValue("kept", "yes"), "annotations that are not the record's are kept")
	g.Expect(tc.Annotations).To(HaveKeyWithValue(tg.AnnotationApprovalRule, ""), "a rule approved, even one without a name")

	flags := Record{ExecutionTimeout: time.Minute, ApprovalTimeout: time.Minute, Tool: VersionOf(acceptedTool())}
	flags.Write(tc)
	g.Expect(tc.Annotations).NotTo(HaveKey(tg.AnnotationProvider), "the manager's flags are no annotation, whatever was there before")
	g.Expect(tc.Annotations).NotTo(HaveKey(tg.AnnotationProviderInstance))
	g.Expect(tc.Annotations).NotTo(HaveKey(tg.AnnotationApprovalRule), "no rule approved")

	for _, c := range []struct{ key, value, want string }{
		{tg.AnnotationProvider, "ApprovalProvider/", `annotation toolgate.dev/provider is "ApprovalProvider/", not ApprovalProvider/<name> or ClusterApprovalProvider/<name>`},
		{tg.AnnotationProvider, "Secret/x", `not ApprovalProvider/<name>`},
		{tg.AnnotationExecutionTimeout, "5", `annotation toolgate.dev/execution-timeout is "5", not a duration`},
		{tg.AnnotationToolGeneration, "", "is not a number"},
	} {
		tc := recordedCall()
		tc.Annotations[c.key] = c.value
		r := ReadRecord(tc)
		g.Expect(r.Problem(c.key)).To(MatchError(ContainSubstring(c.want)), "%s=%q", c.key, c.value)
		g.Expect(r.Provider).To(Equal(ProviderRef{}), "a malformed provider is no provider")
	}
	tc = recordedCall()
	delete(tc.Annotations, tg.AnnotationToolUID)
	g.Expect(ReadRecord(tc).RecordsToolVersion()).To(BeFalse())
	g.Expect(ReadRecord(tc).Problem(tg.AnnotationToolUID)).To(MatchError("annotation toolgate.dev/tool-uid is missing (the controller writes it together with the finalizer)"))
}
