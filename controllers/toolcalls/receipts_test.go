package toolcalls_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/receipt"
	th "toolgate.dev/toolgate/test/testharness"
)

// receiptPublicKey reads the public half of the manager's receipt key from its Secret.
func receiptPublicKey(h *th.Harness) receipt.Key {
	h.T.Helper()
	s := &corev1.Secret{}
	h.G.Eventually(func() error {
		return h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: toolcalls.ReceiptKeySecret}, s)
	}).Should(Succeed())
	k, err := receipt.ParseKey(s.Data[toolcalls.ReceiptPublicKeyField])
	h.G.Expect(err).NotTo(HaveOccurred())
	return k
}

// waitReceipt waits for the ToolCall's receipt and verifies it with keys.
func waitReceipt(h *th.Harness, name string, keys ...receipt.Key) (*tg.ToolCall, *receipt.Verified) {
	h.T.Helper()
	var tc *tg.ToolCall
	h.G.Eventually(func() *tg.Receipt { tc = h.Get(name); return tc.Status.Receipt }).WithTimeout(30 * time.Second).ShouldNot(BeNil())
	v, err := receipt.Verify(context.Background(), []byte(tc.Status.Receipt.Envelope), keys...)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(v.Digest).To(Equal(tc.Status.Receipt.Digest))
	h.G.Expect(v.Predicate.Chain.Sequence).To(Equal(tc.Status.Receipt.Sequence))
	h.G.Expect(v.Predicate.ToolCall.UID).To(Equal(string(tc.UID)))
	canon, err := receipt.CanonicalArguments(tc.Spec.Arguments.Raw)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(v.Matches(receipt.SubjectArguments, canon)).To(BeTrue(), "the receipt binds the canonical arguments")
	return tc, v
}

// An approved, a denied and an expired call each end with one receipt that the manager's public key
// verifies, that binds the arguments (and the result of the one that ran), says why the others did not
// run, and links to the receipt before it in the namespace.
func TestEveryEndedCallHasAChainedReceipt(t *testing.T) {
	h, clk := th.NewClocked(t, env)
	g := h.G

	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	running := h.ApproveAndFinish("refund", true, `{"refund_id":"re_1"}`)
	h.WaitPhase("refund", tg.PhaseSucceeded)
	pub := receiptPublicKey(h)
	done, ran := waitReceipt(h, "refund", pub)
	g.Expect(ran.Matches(receipt.SubjectResult, []byte(`{"refund_id":"re_1"}`))).To(BeTrue(), "the receipt binds the result")
	g.Expect(ran.Matches(receipt.SubjectResult, []byte(`{"refund_id":"re_2"}`))).To(BeFalse())
	g.Expect(ran.Predicate.Outcome).To(Equal(receipt.Outcome{Phase: "Succeeded", Reason: tg.ReasonJobSucceeded, Message: done.Status.Message, Ran: true}))
	job := &batchv1.Job{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: running.Status.JobName}, job)).To(Succeed())
	g.Expect(ran.Predicate.Execution).NotTo(BeNil())
	g.Expect(ran.Predicate.Execution.JobUID).To(Equal(string(job.UID)))
	g.Expect(ran.Predicate.Execution.PodName).To(Equal(job.Name + "-pod"))
	g.Expect(ran.Predicate.Execution.Containers).To(HaveLen(1))
	g.Expect(ran.Predicate.Execution.Containers[0].ExitCode).To(Equal(ptr.To[int32](0)))
	d := ran.Predicate.Decision
	g.Expect(d).NotTo(BeNil())
	g.Expect(d.By).To(Equal("human"))
	g.Expect(d.Status).To(Equal(provider.StatusApproved))
	g.Expect(d.RequestID).To(Equal(done.Status.RequestID))
	g.Expect(d.IdempotencyKey).To(Equal(string(done.UID)))
	g.Expect(d.ResponseDigest).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
	g.Expect(d.Provider).NotTo(BeNil())
	g.Expect(d.Provider.URL).To(Equal(h.URL))
	g.Expect(ran.Predicate.Tool.ToolName).To(Equal("issue_refund"))
	g.Expect(ran.Predicate.Tool.Generation).To(BeEquivalentTo(1))
	g.Expect(ran.Predicate.Tool.SpecDigest).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
	g.Expect(ran.Predicate.Chain).To(Equal(receipt.Chain{Namespace: h.NS, Sequence: 1}))

	h.ToolCall("denied", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err := h.Provider.Decide(h.PendingRequest("denied").ID, provider.StatusDenied, "Not a duplicate.", nil)
	g.Expect(err).NotTo(HaveOccurred())
	h.WaitPhase("denied", tg.PhaseDenied)
	deniedTC, denied := waitReceipt(h, "denied", pub)
	g.Expect(denied.Predicate.Outcome.Ran).To(BeFalse())
	g.Expect(denied.Predicate.Outcome.NotRun).To(Equal(receipt.NotRunDenied))
	g.Expect(denied.Predicate.Execution).To(BeNil(), "a receipt for a denied call names no Job")
	g.Expect(denied.Subjects).NotTo(HaveKey(receipt.SubjectResult))
	g.Expect(denied.Predicate.Decision.By).To(Equal("human"))
	g.Expect(denied.Predicate.Chain).To(Equal(receipt.Chain{Namespace: h.NS, Sequence: 2, Previous: ran.Digest}))
	// The finalizer stays until the receipt is written, then goes.
	g.Eventually(func() []string { return h.Get("denied").Finalizers }).Should(BeEmpty())
	g.Expect(deniedTC.Status.Receipt.Previous).To(Equal(ran.Digest))

	h.ToolCall("expired", "issue_refund", th.RefundArgs, time.Hour, ptr.To(10*time.Minute))
	h.Approve(h.PendingRequest("expired").ID, 5*time.Minute)
	clk.SetTime(clk.Now().Add(6 * time.Minute))
	h.WaitPhase("expired", tg.PhaseExpired)
	_, expired := waitReceipt(h, "expired", pub)
	g.Expect(expired.Predicate.Outcome.NotRun).To(Equal(receipt.NotRunExpired))
	g.Expect(expired.Predicate.Decision.Status).To(Equal(provider.StatusApproved))
	g.Expect(expired.Predicate.Execution).To(BeNil())
	g.Expect(receipt.CheckChain([]*receipt.Verified{expired, ran, denied}, 1)).To(BeEmpty())
	g.Expect(h.Jobs()).To(HaveLen(1))

	// The chain head names the last receipt.
	head := &coordinationv1.Lease{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "toolgate-receipts." + h.NS}, head)).To(Succeed())
	g.Expect(head.Annotations).To(HaveKeyWithValue("toolgate.dev/receipt-sequence", "3"))
	g.Expect(head.Annotations).To(HaveKeyWithValue("toolgate.dev/receipt-digest", expired.Digest))
}

// A manager that dies after it moved the chain head and before the receipt reached the ToolCall
// leaves no gap: the next manager gives that number to the receipt it writes. One that dies after the
// receipt was written (its answer lost) leaves no fork: the next receipt comes after it.
func TestReceiptSurvivesAKillAroundItsWrite(t *testing.T) {
	for _, landed := range []bool{false, true} {
		name := "before the write"
		if landed {
			name = "after the write"
		}
		t.Run(name, func(t *testing.T) {
			h := th.New(t, env)
			g := h.G
			var died atomic.Bool
			interceptWithLive(h, func(client.Client) interceptor.Funcs {
				return interceptor.Funcs{
					SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
						data, _ := patch.Data(obj)
						if died.Load() {
							return errors.New("the manager is dead")
						}
						if sub == "status" && strings.Contains(string(data), `"receipt"`) {
							died.Store(true)
							if landed {
								_ = c.SubResource(sub).Patch(ctx, obj, patch, opts...)
							}
							return errors.New("the manager died")
						}
						return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
					},
				}
			})
			h.StopManager()
			h.Start()
			h.Tool("issue-refund", "issue_refund", "")
			h.ToolCall("first", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			_, err := h.Provider.Decide(h.PendingRequest("first").ID, provider.StatusDenied, "no", nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Eventually(died.Load).WithTimeout(20 * time.Second).Should(BeTrue())
			h.Restart()

			pub := receiptPublicKey(h)
			_, first := waitReceipt(h, "first", pub)
			h.ToolCall("second", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			_, err = h.Provider.Decide(h.PendingRequest("second").ID, provider.StatusDenied, "no", nil)
			g.Expect(err).NotTo(HaveOccurred())
			_, second := waitReceipt(h, "second", pub)
			g.Expect(first.Predicate.Chain.Sequence).To(BeEquivalentTo(1))
			g.Expect(second.Predicate.Chain.Sequence).To(BeEquivalentTo(2))
			g.Expect(receipt.CheckChain([]*receipt.Verified{first, second}, 1)).To(BeEmpty())
			g.Expect(h.Get("first").Status.Receipt.Digest).To(Equal(first.Digest), "exactly one receipt")
		})
	}
}

// A rotated key signs the receipts from the next manager start (or within a minute) on; the receipts
// signed before still verify against the old key, and the chain runs on across the rotation.
func TestRotatedKeySignsOnAndOldReceiptsStillVerify(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("before", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err := h.Provider.Decide(h.PendingRequest("before").ID, provider.StatusDenied, "no", nil)
	g.Expect(err).NotTo(HaveOccurred())
	oldPub := receiptPublicKey(h)
	_, before := waitReceipt(h, "before", oldPub)

	priv, err := receipt.GenerateEd25519()
	g.Expect(err).NotTo(HaveOccurred())
	newKey, err := receipt.ParseKey(priv)
	g.Expect(err).NotTo(HaveOccurred())
	s := &corev1.Secret{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: toolcalls.ReceiptKeySecret}, s)).To(Succeed())
	s.Data = map[string][]byte{toolcalls.ReceiptKeyField: priv}
	g.Expect(h.K8s.Update(context.Background(), s)).To(Succeed())
	h.Restart()

	h.ToolCall("after", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err = h.Provider.Decide(h.PendingRequest("after").ID, provider.StatusDenied, "no", nil)
	g.Expect(err).NotTo(HaveOccurred())
	_, after := waitReceipt(h, "after", newKey)
	g.Expect(after.KeyID).To(Equal(receipt.KeyID(newKey)))
	g.Expect(after.Predicate.Signer.KeyID).To(Equal(receipt.KeyID(newKey)))
	_, err = receipt.Verify(context.Background(), []byte(h.Get("after").Status.Receipt.Envelope), oldPub)
	g.Expect(err).To(MatchError(receipt.ErrBadSignature), "the old key does not verify a new receipt")
	_, err = receipt.Verify(context.Background(), []byte(h.Get("before").Status.Receipt.Envelope), newKey, oldPub)
	g.Expect(err).NotTo(HaveOccurred(), "the old receipt verifies against the old key")
	g.Expect(receipt.CheckChain([]*receipt.Verified{before, after}, 1)).To(BeEmpty())
}

// A receipt key that cannot sign (a public key where the private key belongs) holds an ended call,
// finalizer and all, until the key is fixed: no call is let go without its receipt.
func TestReceiptKeyThatCannotSignHoldsTheCallUntilFixed(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	// A public key where the private key belongs.
	priv, err := receipt.GenerateECDSA()
	g.Expect(err).NotTo(HaveOccurred())
	k, _ := receipt.ParseKey(priv)
	pubPEM, _ := receipt.PublicPEM(k)
	h.StopManager()
	g.Expect(h.K8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: toolcalls.ReceiptKeySecret},
		Data:       map[string][]byte{toolcalls.ReceiptKeyField: pubPEM},
	})).To(Succeed())
	h.Start()
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("held", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err = h.Provider.Decide(h.PendingRequest("held").ID, provider.StatusDenied, "no", nil)
	g.Expect(err).NotTo(HaveOccurred())
	h.WaitPhase("held", tg.PhaseDenied)
	g.Consistently(func() *tg.Receipt { return h.Get("held").Status.Receipt }).WithTimeout(2 * time.Second).Should(BeNil())
	g.Expect(h.Get("held").Finalizers).To(ContainElement(tg.Finalizer), "the call is kept until it holds its receipt")
	unsigned := map[string]string{"namespace": h.NS}
	g.Expect(th.MetricValue("toolgate_ended_toolcalls_without_receipt", unsigned)).To(BeEquivalentTo(1), "the gauge behind ToolgateReceiptsNotSigned")

	s := &corev1.Secret{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: toolcalls.ReceiptKeySecret}, s)).To(Succeed())
	s.Data = map[string][]byte{toolcalls.ReceiptKeyField: priv}
	g.Expect(h.K8s.Update(context.Background(), s)).To(Succeed())
	h.Restart()
	_, v := waitReceipt(h, "held", k)
	g.Expect(v.Predicate.Outcome.NotRun).To(Equal(receipt.NotRunDenied))
	g.Eventually(func() []string { return h.Get("held").Finalizers }).Should(BeEmpty())
	g.Eventually(func() float64 { return th.MetricValue("toolgate_ended_toolcalls_without_receipt", unsigned) }).Should(BeZero())
}

// Whoever may write Leases in the manager's namespace may rewrite a chain head, but not hide it:
// the receipts signed after it chain from what it says, and the chain check reports the break.
func TestForgedChainHeadShowsInTheChain(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("first", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err := h.Provider.Decide(h.PendingRequest("first").ID, provider.StatusDenied, "no", nil)
	g.Expect(err).NotTo(HaveOccurred())
	pub := receiptPublicKey(h)
	_, first := waitReceipt(h, "first", pub)

	head := &coordinationv1.Lease{}
	g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "toolgate-receipts." + h.NS}, head)).To(Succeed())
	head.Annotations["toolgate.dev/receipt-sequence"], head.Annotations["toolgate.dev/receipt-digest"] = "7", "sha256:"+strings.Repeat("0", 64)
	g.Expect(h.K8s.Update(context.Background(), head)).To(Succeed())
	// The manager reads the head again when it starts.
	h.Restart()

	h.ToolCall("second", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err = h.Provider.Decide(h.PendingRequest("second").ID, provider.StatusDenied, "no", nil)
	g.Expect(err).NotTo(HaveOccurred())
	_, second := waitReceipt(h, "second", pub)
	problems := receipt.CheckChain([]*receipt.Verified{first, second}, 1)
	g.Expect(problems).To(HaveLen(1))
	// The forged head names a receipt its ToolCall does not hold: its number (7) goes to the next one.
	g.Expect(second.Predicate.Chain.Sequence).To(BeEquivalentTo(7))
	g.Expect(problems[0].Problem).To(Equal("receipts 2 to 6 are missing"))
}

// A ToolCall deleted once it held its receipt (by the agent, or by retention) takes its status with
// it, but not its place in the chain: the next manager, whose chain head names the deleted call's
// receipt, numbers the next receipt after it rather than giving its number again (a fork); so too when
// another ToolCall of the same name was created since.
func TestReceiptAfterTheHeadsToolCallWasDeletedContinuesTheChain(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		name := "deleted"
		if replaced {
			name = "replaced by one of the same name"
		}
		t.Run(name, func(t *testing.T) {
			h := th.New(t, env)
			g := h.G
			h.Tool("issue-refund", "issue_refund", "")
			first := h.ToolCall("first", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			_, err := h.Provider.Decide(h.PendingRequest("first").ID, provider.StatusDenied, "no", nil)
			g.Expect(err).NotTo(HaveOccurred())
			pub := receiptPublicKey(h)
			_, firstReceipt := waitReceipt(h, "first", pub)
			g.Eventually(func() []string { return h.Get("first").Finalizers }).Should(BeEmpty())
			g.Expect(h.K8s.Delete(context.Background(), h.Get("first"))).To(Succeed())
			g.Eventually(func() types.UID {
				tc := &tg.ToolCall{}
				if err := h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "first"}, tc); err != nil {
					return ""
				}
				return tc.UID
			}).ShouldNot(Equal(first.UID))
			if replaced {
				h.ToolCall("first", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			}
			h.Restart()

			h.ToolCall("second", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
			_, err = h.Provider.Decide(h.PendingRequest("second").ID, provider.StatusDenied, "no", nil)
			g.Expect(err).NotTo(HaveOccurred())
			_, second := waitReceipt(h, "second", pub)
			g.Expect(second.Predicate.Chain).To(Equal(receipt.Chain{Namespace: h.NS, Sequence: 2, Previous: firstReceipt.Digest}))
			g.Expect(receipt.CheckChain([]*receipt.Verified{firstReceipt, second}, 1)).To(BeEmpty())
		})
	}
}
