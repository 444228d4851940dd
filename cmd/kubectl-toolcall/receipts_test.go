package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/receipt"
	th "toolgate.dev/toolgate/test/testharness"
)

// verifyAsAdmin runs the plugin as the control plane's admin: verify reads Jobs, Pods and Tools, which
// the agent's role does not grant.
func verifyAsAdmin(g *WithT, args ...string) (code int, stdout, stderr string) {
	var out, errOut syncBuffer
	code = run(context.Background(), append([]string{"verify"}, args...), &out, &errOut, env.Config)
	return code, out.String(), errOut.String()
}

// waitForReceipt waits until the manager wrote the ToolCall's receipt.
func waitForReceipt(h *th.Harness, name string) *tg.ToolCall {
	h.T.Helper()
	var tc *tg.ToolCall
	h.G.Eventually(func() *tg.Receipt { tc = h.Get(name); return tc.Status.Receipt }).WithTimeout(30 * time.Second).ShouldNot(BeNil())
	return tc
}

// A real manager signs the receipts of an approved call that ran and of two denied calls; the plugin
// exports one as cosign reads it, and verifies them with the public key from the manager's Secret:
// not with another key, not once the Job was replaced; their chain, until one receipt's ToolCall is
// deleted, and again with that receipt's line of the manager's log.
func TestVerifyReceiptsTheManagerSigned(t *testing.T) {
	var log syncBuffer
	h := newHarness(t, th.WithLogger(zap.New(zap.WriteTo(&log))))
	g := h.G
	dir := t.TempDir()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	running := h.ApproveAndFinish("refund", true, `{"refund_id":"re_1"}`)
	h.WaitPhase("refund", tg.PhaseSucceeded)
	refund := waitForReceipt(h, "refund")
	for _, name := range []string{"denied", "denied-again"} {
		h.ToolCall(name, "issue_refund", th.RefundArgs, 2*time.Minute, nil)
		_, err := h.Provider.Decide(h.PendingRequest(name).ID, provider.StatusDenied, "Not a duplicate.", nil)
		g.Expect(err).NotTo(HaveOccurred())
		h.WaitPhase(name, tg.PhaseDenied)
		waitForReceipt(h, name)
	}
	g.Expect(h.Get("denied-again").Status.Receipt.Sequence).To(BeEquivalentTo(3))

	secret := &corev1.Secret{}
	g.Expect(h.K8s.Get(t.Context(), types.NamespacedName{Namespace: h.NS, Name: toolcalls.ReceiptKeySecret}, secret)).To(Succeed())
	pubFile := filepath.Join(dir, "key.pub")
	g.Expect(os.WriteFile(pubFile, secret.Data[toolcalls.ReceiptPublicKeyField], 0o600)).To(Succeed())
	otherPriv, err := receipt.GenerateECDSA()
	g.Expect(err).NotTo(HaveOccurred())
	otherKey, err := receipt.ParseKey(otherPriv)
	g.Expect(err).NotTo(HaveOccurred())
	otherPub, err := receipt.PublicPEM(otherKey)
	g.Expect(err).NotTo(HaveOccurred())
	otherFile := filepath.Join(dir, "other.pub")
	g.Expect(os.WriteFile(otherFile, otherPub, 0o600)).To(Succeed())

	// receipt, as the agent: the envelope as stored, and the two blobs it binds.
	argsFile, resultFile := filepath.Join(dir, "args.json"), filepath.Join(dir, "result.json")
	code, stdout, stderr := plugin(g, "receipt", "refund", "-n", h.NS, "--arguments", argsFile, "--result", resultFile)
	g.Expect(code).To(Equal(exitSucceeded), stderr)
	g.Expect(stdout).To(Equal(refund.Status.Receipt.Envelope))
	g.Expect(os.ReadFile(argsFile)).To(BeEquivalentTo(`{"amount":4900,"currency":"GBP","payment_id":"payment_123"}`))
	g.Expect(os.ReadFile(resultFile)).To(BeEquivalentTo(`{"refund_id":"re_1"}`))
	code, _, stderr = plugin(g, "receipt", "denied", "-n", h.NS, "--result", resultFile)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stderr).To(ContainSubstring("error: toolcall denied did not run (Denied): its receipt binds no result; leave out --result"))
	h.ToolCall("pending", "issue_refund", th.RefundArgs, time.Hour, nil)
	h.PendingRequest("pending")
	code, _, stderr = plugin(g, "receipt", "pending", "-n", h.NS)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stderr).To(ContainSubstring("error: toolcall pending has not ended (phase AwaitingApproval)"))

	// verify, with the manager's key.
	for _, name := range []string{"refund", "denied"} {
		code, stdout, stderr = verifyAsAdmin(g, name, "-n", h.NS, "--key", pubFile)
		g.Expect(code).To(Equal(exitSucceeded), "%s\n%s", stdout, stderr)
		g.Expect(stdout).To(ContainSubstring("OK      signature: verified with key " + refund.Status.Receipt.KeyID + " (" + pubFile + ")"))
		g.Expect(stdout).To(ContainSubstring("OK      arguments: the subject is the digest of the ToolCall's canonical arguments"))
		g.Expect(stdout).To(ContainSubstring("OK      tool: issue-refund exists with uid"))
		g.Expect(stdout).NotTo(ContainSubstring("FAILED"))
		g.Expect(stdout).To(MatchRegexp(`\nVerified: \d+ checks passed, \d+ notes\n$`))
	}
	g.Expect(stdout).To(ContainSubstring("OK      job: none exists, as the tool did not run"))
	code, stdout, _ = verifyAsAdmin(g, "refund", "-n", h.NS, "--key", pubFile)
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(ContainSubstring("OK      result: the subject is the digest of status.result"))
	g.Expect(stdout).To(ContainSubstring("OK      job: " + running.Status.JobName + " exists with uid " + string(running.Status.JobUID)))
	g.Expect(stdout).To(ContainSubstring("OK      pod: " + running.Status.JobName + "-pod exists with uid"))

	// Another key: the signature fails; across a rotation either key may verify it.
	code, stdout, stderr = verifyAsAdmin(g, "refund", "-n", h.NS, "--key", otherFile)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stdout).To(ContainSubstring("FAILED  signature: no key verifies the receipt's signature"))
	g.Expect(stderr).To(MatchRegexp(`^error: verification failed: 1 of \d+ checks failed`))
	code, stdout, _ = verifyAsAdmin(g, "refund", "-n", h.NS, "--key", otherFile, "--key", pubFile)
	g.Expect(code).To(Equal(exitSucceeded), stdout)

	// The chain: three receipts, unbroken.
	code, stdout, _ = verifyAsAdmin(g, "denied-again", "-n", h.NS, "--key", pubFile, "--chain")
	g.Expect(code).To(Equal(exitSucceeded), stdout)
	g.Expect(stdout).To(ContainSubstring("OK      chain: 3 receipts of namespace " + h.NS + " checked, 1 to 3, without a gap, a fork or a broken link"))

	// Receipt 2's ToolCall is deleted: a gap, until its log line is given.
	denied := h.Get("denied")
	if len(denied.Finalizers) > 0 {
		g.Expect(h.K8s.Patch(t.Context(), denied, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
	}
	g.Expect(h.K8s.Delete(t.Context(), denied)).To(Succeed())
	h.WaitGone("denied", 30*time.Second)
	code, stdout, _ = verifyAsAdmin(g, "denied-again", "-n", h.NS, "--key", pubFile, "--chain")
	g.Expect(code).To(Equal(exitError))
	g.Expect(stdout).To(ContainSubstring("FAILED  chain: namespace " + h.NS + ", receipt 3: receipt 2 is missing"))
	g.Expect(stdout).To(ContainSubstring("FAILED  chain: 2 receipts of namespace " + h.NS + " checked, the last is 3"))

	var lines []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, `"msg":"Receipt signed"`) && strings.Contains(l, `"receiptToolCall":"denied"`) {
			lines = append(lines, l)
		}
	}
	g.Expect(lines).To(HaveLen(1), "the manager logs each receipt once")
	logFile := filepath.Join(dir, "receipts.log")
	g.Expect(os.WriteFile(logFile, []byte(lines[0]+"\n"), 0o600)).To(Succeed())
	code, stdout, _ = verifyAsAdmin(g, "denied-again", "-n", h.NS, "--key", pubFile, "--chain", "--receipts", logFile)
	g.Expect(code).To(Equal(exitSucceeded), stdout)
	g.Expect(stdout).To(ContainSubstring("OK      chain: 3 receipts of namespace " + h.NS + " checked, 1 to 3"))
	// The whole log does as well: its other lines are skipped.
	g.Expect(os.WriteFile(logFile, []byte(log.String()), 0o600)).To(Succeed())
	code, stdout, _ = verifyAsAdmin(g, "denied-again", "-n", h.NS, "--key", pubFile, "--chain", "--receipts", logFile)
	g.Expect(code).To(Equal(exitSucceeded), stdout)

	// The Job is replaced by another of the same name: verify fails on its uid.
	job := &batchv1.Job{}
	g.Expect(h.K8s.Get(t.Context(), types.NamespacedName{Namespace: h.NS, Name: running.Status.JobName}, job)).To(Succeed())
	g.Expect(h.K8s.Delete(t.Context(), job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(h.K8s.Get(t.Context(), client.ObjectKeyFromObject(job), &batchv1.Job{}))
	}).Should(BeTrue())
	impostor := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: running.Status.JobName},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "tool", Image: "example.com/other:1"}}}}},
	}
	g.Expect(h.K8s.Create(t.Context(), impostor)).To(Succeed())
	code, stdout, _ = verifyAsAdmin(g, "refund", "-n", h.NS, "--key", pubFile)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stdout).To(ContainSubstring("FAILED  job: " + running.Status.JobName + " exists with uid " + string(impostor.UID) + ", but the receipt names uid " + string(running.Status.JobUID)))
	g.Expect(stdout).To(MatchRegexp(`OK      pod: %s-pod exists with uid \S+, controlled by the receipt's Job \(uid %s\)`, running.Status.JobName, running.Status.JobUID))
	g.Expect(strings.Count(stdout, "FAILED  ")).To(Equal(1), "the Pod the old Job left is still the receipt's")
}
