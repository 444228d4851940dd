package conformance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/receipt"
	th "toolgate.dev/toolgate/test/testharness"
)

// A Tool's preview (docs/previews.md), checked at the strict provider: what the preview said reaches
// the approver in the request's context, the same bytes on every submission, the rules read it, and
// the execution Job receives its digest.

// refundPreview is what the refund tool's preview says.
const refundPreview = `{"action":"refund","amount":4900,"currency":"GBP","payment_id":"payment_123","charge":"ch_123","customer":"cus_42"}`

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// withPreview gives a Tool a preview of its own jobTemplate, onFailure as given, and a Secret in its
// template (an env variable and a volume) that the preview must not see.
func withPreview(onFailure tg.PreviewFailureAction, rules ...tg.ApprovalRule) func(*tg.Tool) {
	return func(t *tg.Tool) {
		t.Spec.Preview = &tg.ToolPreview{OnFailure: onFailure, Timeout: &metav1.Duration{Duration: 20 * time.Second}, MaxBytes: 1000}
		pod := &t.Spec.JobTemplate.Spec.Template.Spec
		pod.Volumes = []corev1.Volume{{Name: "ledger-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ledger-key"}}}}
		c := &pod.Containers[0]
		c.VolumeMounts = []corev1.VolumeMount{{Name: "ledger-key", MountPath: "/var/run/ledger"}}
		c.Env = []corev1.EnvVar{{Name: "LEDGER_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "ledger-key"}, Key: "token"}}}}
		if len(rules) > 0 {
			t.Spec.Approval = &tg.ApprovalPolicy{Rules: rules}
		}
	}
}

// previewCall starts a world with a previewed refund Tool (onFailure as given) and a call "refund" to it.
func previewCall(t *testing.T, onFailure tg.PreviewFailureAction, opts ...th.Option) (*world, *tg.ToolCall) {
	t.Helper()
	w := newWorld(t, nil, opts...)
	w.Tool("refund-previewed", "refund_previewed", th.RefundSchema, withPreview(onFailure))
	return w, w.ToolCall("refund", "refund_previewed", th.RefundArgs, 5*time.Minute, ptr.To(time.Minute))
}

// previewJob waits for the call's preview Job and returns it.
func (w *world) previewJob(name string) *batchv1.Job {
	w.T.Helper()
	jobName := toolcalls.PreviewJobName(w.Get(name))
	var job *batchv1.Job
	w.G.Eventually(func() *batchv1.Job {
		for _, j := range w.Jobs() {
			if j.Name == jobName {
				job = j.DeepCopy()
			}
		}
		return job
	}).ShouldNot(BeNil(), "the preview Job %s is created", jobName)
	return job
}

// contextPreview is the preview member of a request's context.
func contextPreview(g Gomega, raw json.RawMessage) map[string]any {
	var ctx map[string]any
	g.Expect(json.Unmarshal(raw, &ctx)).To(Succeed())
	p, ok := ctx["preview"].(map[string]any)
	g.Expect(ok).To(BeTrue(), "the context carries the preview: %s", raw)
	return p
}

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func TestPreviewGoesToTheApproverAndItsDigestToTheJob(t *testing.T) {
	w, _ := previewCall(t, tg.PreviewFailureDeny)
	g := w.G

	pj := w.previewJob("refund")
	g.Expect(pj.Labels).To(HaveKeyWithValue(tg.LabelPreview, "true"))
	g.Expect(pj.Spec.BackoffLimit).To(Equal(ptr.To[int32](0)))
	g.Expect(pj.Spec.ActiveDeadlineSeconds).To(Equal(ptr.To[int64](20)))
	pc := pj.Spec.Template.Spec.Containers[0]
	g.Expect(envOf(pc)).To(And(HaveKeyWithValue(tg.PreviewModeEnv, "preview"), HaveKeyWithValue(tg.PreviewMaxBytesEnv, "1000"),
		HaveKey("TOOL_ARGUMENTS"), Not(HaveKey("LEDGER_TOKEN"))), "the preview gets the call, not the Tool's Secrets")
	g.Expect(envOf(pc)["TOOL_ARGUMENTS"]).To(MatchJSON(th.RefundArgs))
	g.Expect(pc.VolumeMounts).To(BeEmpty())
	g.Expect(pj.Spec.Template.Spec.Volumes).To(BeEmpty())
	g.Expect(w.P.List()).To(BeEmpty(), "nothing is asked before the preview said what the call would do")

	w.FinishJob(pj.Name, true, refundPreview)
	req := w.pending("refund")
	p := contextPreview(g, req.Context)
	g.Expect(p).To(HaveKeyWithValue("source", "tool"))
	g.Expect(p).To(HaveKeyWithValue("format", "json"))
	g.Expect(p).To(HaveKeyWithValue("digest", digestOf(refundPreview)))
	g.Expect(p).To(HaveKeyWithValue("image", "busybox:1.36"))
	out, err := json.Marshal(p["output"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchJSON(refundPreview), "the output is in the context as the JSON itself")
	rec := w.Get("refund").Status.Preview
	g.Expect(rec).NotTo(BeNil())
	g.Expect(rec.Output).To(Equal(refundPreview))
	g.Expect(rec.Digest).To(Equal(digestOf(refundPreview)))
	g.Expect(rec.Proof).NotTo(BeEmpty())

	w.approve(req.ID, 5*time.Minute)
	running := w.WaitPhase("refund", tg.PhaseRunning)
	exec := jobEnv(w, running.Status.JobName)
	g.Expect(exec).To(And(HaveKeyWithValue(tg.PreviewModeEnv, "execute"), HaveKeyWithValue(tg.PreviewDigestEnv, digestOf(refundPreview))))
	var execJob batchv1.Job
	g.Expect(w.K8s.Get(context.Background(), client.ObjectKey{Namespace: w.NS, Name: running.Status.JobName}, &execJob)).To(Succeed())
	g.Expect(execJob.Spec.Template.Spec.Volumes).To(HaveLen(1), "the execution Job keeps the Tool's Secrets")

	// The tool finds the world changed since its preview and refuses: the call fails in its words.
	const refusal = "refused: the payment changed since the preview the approver saw"
	w.FinishJob(running.Status.JobName, false, refusal)
	failed := w.WaitPhase("refund", tg.PhaseFailed)
	g.Expect(failed.Status.Result).To(Equal(refusal))
	g.Expect(w.P.List()).To(HaveLen(1))

	// The call's receipt names the preview the approver saw, by its digest.
	key := &corev1.Secret{}
	g.Eventually(func() error {
		return w.K8s.Get(context.Background(), client.ObjectKey{Namespace: w.NS, Name: toolcalls.ReceiptKeySecret}, key)
	}).Should(Succeed())
	pub, err := receipt.ParseKey(key.Data[toolcalls.ReceiptPublicKeyField])
	g.Expect(err).NotTo(HaveOccurred())
	var ended *tg.ToolCall
	g.Eventually(func() *tg.Receipt { ended = w.Get("refund"); return ended.Status.Receipt }).WithTimeout(30 * time.Second).ShouldNot(BeNil())
	v, err := receipt.Verify(context.Background(), []byte(ended.Status.Receipt.Envelope), pub)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.Predicate.Preview).To(Equal(&receipt.Preview{JobName: pj.Name, Format: "json", Digest: digestOf(refundPreview), Image: "busybox:1.36"}))
}

// A manager killed after the preview, with every answer to its submissions lost, is followed by one
// that submits the very same body: the strict provider answers a changed replay 409 (expectNoRefusals
// fails the test on one), and the preview does not run again.
func TestPreviewReplayAfterAManagerKillSendsTheSameBody(t *testing.T) {
	w := newWorld(t, nil)
	g := w.G
	w.Tool("refund-previewed", "refund_previewed", th.RefundSchema, withPreview(tg.PreviewFailureDeny))
	w.P.DropNextResponse(1 << 30)
	tc := w.ToolCall("refund", "refund_previewed", th.RefundArgs, 5*time.Minute, ptr.To(time.Minute))
	w.FinishJob(w.previewJob("refund").Name, true, refundPreview)
	g.Eventually(func() int { return len(methods(w.exchanges(string(tc.UID), ""), http.MethodPost)) }).
		WithTimeout(20 * time.Second).Should(BeNumerically(">=", 2))
	w.StopManager()
	g.Expect(w.Get("refund").Status.RequestID).To(BeEmpty(), "the first manager never learnt the request")
	// The preview's Pod is gone: only the manager's record can give the same body again.
	g.Expect(w.K8s.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(w.NS))).To(Succeed())
	w.P.DropNextResponse(0)
	before := len(w.P.Log())
	w.Start()
	req := w.pending("refund")
	for _, ex := range w.P.Log()[before:] {
		if ex.Method == http.MethodPost {
			g.Expect(ex.Status).To(Equal(http.StatusOK), "a replay of the same body: %s", describe(ex))
		}
	}
	g.Expect(w.P.List()).To(HaveLen(1))
	g.Expect(contextPreview(g, req.Context)).To(HaveKeyWithValue("digest", digestOf(refundPreview)))
	previews := 0
	for _, j := range w.Jobs() {
		if j.Labels[tg.LabelPreview] == "true" {
			previews++
		}
	}
	g.Expect(previews).To(Equal(1), "the preview ran once")
}

func TestRulesReadThePreview(t *testing.T) {
	w := newWorld(t, nil)
	g := w.G
	w.Tool("refund-previewed", "refund_previewed", th.RefundSchema, withPreview(tg.PreviewFailureDeny,
		tg.ApprovalRule{Name: "no-eur", Expression: `arguments.currency == "EUR"`, Action: tg.ActionDeny},
		tg.ApprovalRule{Name: "never-large", Expression: `preview.format == "json" && preview.json.amount > 100000`, Action: tg.ActionDeny},
		tg.ApprovalRule{Name: "small-refunds", Expression: `preview.format == "json" && preview.json.amount < 5000`, Action: tg.ActionApprove},
	))
	small := w.ToolCall("small", "refund_previewed", th.RefundArgs, 5*time.Minute, ptr.To(time.Minute))
	large := w.ToolCall("large", "refund_previewed", th.RefundArgs, 5*time.Minute, ptr.To(time.Minute))
	w.FinishJob(w.previewJob("small").Name, true, refundPreview)
	w.FinishJob(w.previewJob("large").Name, true, strings.Replace(refundPreview, `"amount":4900`, `"amount":250000`, 1))

	running := w.WaitPhase("small", tg.PhaseRunning)
	g.Expect(running.Status.Decision.Source).To(Equal(tg.DecisionSourcePolicy))
	g.Expect(running.Status.Decision.Rule).To(Equal("small-refunds"))
	g.Expect(jobEnv(w, running.Status.JobName)).To(HaveKeyWithValue(tg.PreviewDigestEnv, digestOf(refundPreview)))

	denied := w.WaitPhase("large", tg.PhaseRejected)
	g.Expect(denied.Status.Reason).To(Equal(tg.ReasonPolicyDenied))
	g.Expect(denied.Status.Decision.Rule).To(Equal("never-large"))
	g.Expect(denied.Status.JobName).To(BeEmpty())
	for _, uid := range []string{string(small.UID), string(large.UID)} {
		_, asked := w.P.ByKey(uid)
		g.Expect(asked).To(BeFalse(), "no human was asked")
	}
	for _, j := range w.Jobs() {
		g.Expect(j.Name).NotTo(Equal(toolcalls.JobName(large)), "the denied call did not run")
	}

	// A Deny rule over the arguments alone, before any rule that reads the preview, rejects the call
	// without running the preview.
	eur := w.ToolCall("eur", "refund_previewed", strings.Replace(th.RefundArgs, "GBP", "EUR", 1), 5*time.Minute, ptr.To(time.Minute))
	rejected := w.WaitPhase("eur", tg.PhaseRejected)
	g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonPolicyDenied))
	g.Expect(rejected.Status.Decision.Rule).To(Equal("no-eur"))
	g.Expect(rejected.Status.Preview).To(BeNil())
	for _, j := range w.Jobs() {
		g.Expect(j.Name).NotTo(Equal(toolcalls.PreviewJobName(eur)), "no preview ran for a call denied on its arguments")
	}
}

func TestPreviewFailureFollowsTheToolsChoice(t *testing.T) {
	t.Run("deny", func(t *testing.T) {
		w, tc := previewCall(t, tg.PreviewFailureDeny)
		g := w.G
		w.FinishJob(w.previewJob("refund").Name, false, "cannot reach the ledger")
		rejected := w.WaitPhase("refund", tg.PhaseRejected)
		g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonPreviewFailed))
		g.Expect(rejected.Status.Message).To(ContainSubstring("cannot reach the ledger"))
		g.Expect(rejected.Status.Preview.Error).To(ContainSubstring("the preview Job failed"))
		_, asked := w.P.ByKey(string(tc.UID))
		g.Expect(asked).To(BeFalse())
	})
	t.Run("ask", func(t *testing.T) {
		w, _ := previewCall(t, tg.PreviewFailureAsk)
		g := w.G
		w.FinishJob(w.previewJob("refund").Name, false, "cannot reach the ledger")
		req := w.pending("refund")
		p := contextPreview(g, req.Context)
		g.Expect(p).To(HaveKeyWithValue("failed", true))
		g.Expect(p["error"]).To(ContainSubstring("cannot reach the ledger"))
		g.Expect(p).NotTo(HaveKey("output"))
		w.approve(req.ID, 5*time.Minute)
		running := w.WaitPhase("refund", tg.PhaseRunning)
		g.Expect(jobEnv(w, running.Status.JobName)).To(HaveKeyWithValue(tg.PreviewDigestEnv, ""))
	})
	t.Run("timeout", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		w, _ := previewCall(t, tg.PreviewFailureAsk, th.WithClock(clk))
		g := w.G
		pj := w.previewJob("refund")
		g.Consistently(func() tg.ToolCallPhase { return w.Get("refund").Status.Phase.OrPending() }).WithTimeout(2*time.Second).
			Should(Equal(tg.PhasePending), "the preview has 20s and 10s of grace")
		// The preview Job never ends (its Pod cannot start, say): past its timeout and grace on the
		// manager's clock, the preview counts as failed, and onFailure Ask puts the call to a human.
		clk.SetTime(pj.CreationTimestamp.Add(31 * time.Second))
		tc := w.Get("refund")
		base := tc.DeepCopy()
		tc.Annotations["example.com/poke"] = "1"
		g.Expect(w.K8s.Patch(context.Background(), tc, client.MergeFrom(base))).To(Succeed())
		req := w.pending("refund")
		p := contextPreview(g, req.Context)
		g.Expect(p).To(HaveKeyWithValue("failed", true))
		g.Expect(p["error"]).To(Equal("the preview did not finish within spec.preview.timeout 20s"))
	})
	t.Run("too-large", func(t *testing.T) {
		w, _ := previewCall(t, tg.PreviewFailureDeny)
		g := w.G
		w.FinishJob(w.previewJob("refund").Name, true, strings.Repeat("x", 1001))
		rejected := w.WaitPhase("refund", tg.PhaseRejected)
		g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonPreviewFailed))
		g.Expect(rejected.Status.Message).To(ContainSubstring("over spec.preview.maxBytes 1000"))
	})
}

// Who may create Jobs, or write ToolCall status, cannot make the approver see a preview the tool did
// not give: a preview Job made in advance, and a status.preview written by someone else, end the call
// without running it.
func TestPreviewForgeriesEndTheCallWithoutRunning(t *testing.T) {
	t.Run("job-made-in-advance", func(t *testing.T) {
		w := newWorld(t, nil)
		g := w.G
		w.Tool("refund-previewed", "refund_previewed", th.RefundSchema, withPreview(tg.PreviewFailureAsk))
		tc := w.NewToolCall("refund", "refund_previewed", th.RefundArgs, 5*time.Minute, ptr.To(time.Minute))
		g.Expect(w.K8s.Create(context.Background(), tc)).To(Succeed())
		forged := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: toolcalls.PreviewJobName(tc), Namespace: w.NS,
			Labels: map[string]string{tg.LabelToolCallUID: string(tc.UID)}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "tool", Image: "busybox:1.36"}}}}}}
		g.Expect(w.K8s.Create(context.Background(), forged)).To(Succeed())
		w.FinishJob(forged.Name, true, `{"amount":1}`)
		ended := w.WaitPhase("refund", tg.PhaseApprovalUnavailable)
		g.Expect(ended.Status.Reason).To(Equal(tg.ReasonPreviewNotVerified))
		_, asked := w.P.ByKey(string(tc.UID))
		g.Expect(asked).To(BeFalse())
	})
	t.Run("status-written-by-someone-else", func(t *testing.T) {
		w, _ := previewCall(t, tg.PreviewFailureDeny)
		g := w.G
		w.FinishJob(w.previewJob("refund").Name, true, refundPreview)
		req := w.pending("refund")
		tc := w.Get("refund")
		base := tc.DeepCopy()
		tc.Status.Preview.Output = strings.Replace(refundPreview, "4900", "49", 1)
		g.Expect(w.K8s.Status().Patch(context.Background(), tc, client.MergeFrom(base))).To(Succeed())
		ended := w.WaitPhase("refund", tg.PhaseApprovalUnavailable)
		g.Expect(ended.Status.Reason).To(Equal(tg.ReasonPreviewNotVerified))
		g.Eventually(func() string { r, _ := w.P.Get(req.ID); return r.Status }).Should(Equal(provider.StatusCancelled),
			"the request is withdrawn: nobody reviews a call that will not run")
		g.Expect(ended.Status.JobName).To(BeEmpty())
	})
}
