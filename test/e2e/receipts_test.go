//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/internal/receipt"
	"toolgate.dev/toolgate/test/testenv"
)

// In one namespace, a call that ran, a denied call and a call whose approval arrived already expired
// each end with a signed receipt in status.receipt. cosign, as a user runs it with the manager's public
// key alone, accepts the ran call's receipt for its canonical arguments and for its result, and
// refuses it for either with one byte changed, and with another key. The receipts say what ran (the
// live Job's UID, the live Pod's UID, node and image digests) and why the others did not; they chain
// with every other receipt of the namespace. The manager's log holds each receipt once, the same
// envelope as the status, and still holds the denied call's after that ToolCall is deleted.
func TestReceiptsVerifyWithCosign(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cosign := cosignCLI{bin: cosignBinary(t, g), home: t.TempDir()}
	dir := t.TempDir()
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))

	ran := submitNamed(t, g, ns, "approved")
	decide(g, ran, true, "5m")
	waitPhase(g, ran, tg.PhaseSucceeded, stepTimeout)
	denied := submitNamed(t, g, ns, "denied")
	decide(g, denied, false, "")
	waitPhase(g, denied, tg.PhaseDenied, stepTimeout)
	expired := submitNamed(t, g, ns, "expired")
	decideExpired(g, expired)
	waitPhase(g, expired, tg.PhaseExpired, stepTimeout)
	for _, tc := range []*tg.ToolCall{ran, denied, expired} {
		waitStatusReceipt(g, tc)
	}

	// docs/receipts-cosign.md, run as written on the call that ran: kubectl writes the manager's public
	// key, the receipt, the arguments and the result, and cosign verifies the receipt for both and
	// refuses it for arguments changed by one byte.
	runReceiptsPage(t, g, cosign, dir, ns, ran.Name)
	pubPEM := readFile(g, dir, "key.pub")
	pub, err := receipt.ParseKey(pubPEM)
	g.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: toolcalls.ReceiptKeySecret}, secret)).To(Succeed())
	g.Expect(pubPEM).To(Equal(secret.Data[toolcalls.ReceiptPublicKeyField]))
	g.Expect(string(readFile(g, dir, "receipt.json"))).To(Equal(ran.Status.Receipt.Envelope))
	args := canonicalArguments(g, ran)
	g.Expect(readFile(g, dir, "arguments.json")).To(Equal(args), "kubectl wrote the arguments in their canonical form")
	g.Expect(string(readFile(g, dir, "result.json"))).To(Equal(ran.Status.Result))

	// cosign refuses any one byte changed, of the result too, and the receipt with another key.
	keyFile, envelope := filepath.Join(dir, "key.pub"), filepath.Join(dir, "receipt.json")
	const noSubject = "no matching subject digest found"
	cosign.expectRefused(g, keyFile, envelope, writeFile(g, dir, "arguments.changed.json", oneByteChanged(args)), noSubject)
	cosign.expectRefused(g, keyFile, envelope, writeFile(g, dir, "result.changed.json", oneByteChanged([]byte(ran.Status.Result))), noSubject)
	otherPriv, err := receipt.GenerateECDSA()
	g.Expect(err).NotTo(HaveOccurred())
	other, err := receipt.ParseKey(otherPriv)
	g.Expect(err).NotTo(HaveOccurred())
	otherPEM, err := receipt.PublicPEM(other)
	g.Expect(err).NotTo(HaveOccurred())
	cosign.expectRefused(g, writeFile(g, dir, "other.pub", otherPEM), envelope, filepath.Join(dir, "arguments.json"),
		"accepted signatures do not match threshold")
	// The calls that did not run: their receipts bind their arguments, and have no result to bind.
	for _, tc := range []*tg.ToolCall{denied, expired} {
		env := writeFile(g, dir, tc.Name+".receipt.json", []byte(tc.Status.Receipt.Envelope))
		cosign.expectVerified(g, keyFile, env, writeFile(g, dir, tc.Name+".arguments.json", canonicalArguments(g, tc)))
		g.Expect(tc.Status.Result).To(BeEmpty())
	}

	// What the receipts say, against the live objects.
	vRan := verifyStatusReceipt(g, ran, pub)
	g.Expect(vRan.Predicate.Outcome.Ran).To(BeTrue())
	g.Expect(vRan.Matches(receipt.SubjectResult, []byte(ran.Status.Result))).To(BeTrue(), "the receipt binds status.result")
	ex := vRan.Predicate.Execution
	g.Expect(ex).NotTo(BeNil(), "the receipt of a call that ran names its Job")
	job := &batchv1.Job{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ran.Status.JobName}, job)).To(Succeed())
	g.Expect(ex.JobName).To(Equal(job.Name))
	g.Expect(ex.JobUID).To(Equal(string(job.UID)))
	_, pods := jobsAndPods(g, ran)
	g.Expect(pods).To(HaveLen(1))
	pod := pods[0]
	g.Expect(ex.PodName).To(Equal(pod.Name))
	g.Expect(ex.PodUID).To(Equal(string(pod.UID)))
	g.Expect(ex.NodeName).To(Equal(pod.Spec.NodeName))
	g.Expect(ex.Containers).To(HaveLen(len(pod.Status.ContainerStatuses)))
	for _, cs := range pod.Status.ContainerStatuses {
		digest := digestOf(cs.ImageID)
		g.Expect(digest).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`), "container %s: imageID %q names no digest", cs.Name, cs.ImageID)
		g.Expect(ex.Containers).To(ContainElement(And(
			HaveField("Name", cs.Name), HaveField("ImageID", cs.ImageID), HaveField("ImageDigest", digest))), "container %s", cs.Name)
	}

	vDenied := verifyStatusReceipt(g, denied, pub)
	g.Expect(vDenied.Predicate.Outcome.Ran).To(BeFalse())
	g.Expect(vDenied.Predicate.Outcome.NotRun).To(Equal(receipt.NotRunDenied))
	g.Expect(vDenied.Predicate.Execution).To(BeNil(), "a denied call's receipt names no Job")
	g.Expect(vDenied.Subjects).NotTo(HaveKey(receipt.SubjectResult))
	vExpired := verifyStatusReceipt(g, expired, pub)
	g.Expect(vExpired.Predicate.Outcome.Ran).To(BeFalse())
	g.Expect(vExpired.Predicate.Outcome.NotRun).To(Equal(receipt.NotRunExpired))
	g.Expect(vExpired.Predicate.Execution).To(BeNil())
	g.Expect(vExpired.Subjects).NotTo(HaveKey(receipt.SubjectResult))

	// The log: one line per receipt of the namespace, each the envelope the status holds, and every
	// receipt of the namespace (createTool's probes' too, deleted since) in one unbroken chain.
	statusReceipts := map[string]*tg.ToolCall{ran.Name: ran, denied.Name: denied, expired.Name: expired}
	expectLoggedChain(g, ns, pub, statusReceipts)

	// The sink that outlives the ToolCall: the denied call deleted, its receipt is still in the log.
	g.Expect(k8s.Delete(ctx, denied)).To(Succeed())
	g.Eventually(func() error {
		return k8s.Get(ctx, client.ObjectKeyFromObject(denied), &tg.ToolCall{})
	}).WithTimeout(stepTimeout).Should(MatchError(ContainSubstring("not found")))
	expectLoggedChain(g, ns, pub, statusReceipts)
}

// runReceiptsPage runs the sh blocks of docs/receipts-cosign.md in dir, as written, for ToolCall call of
// namespace ns (the page's NS and CALL), with cosign on the PATH; blocks marked "receipts test: fails
// with" must fail saying so, and each cosign verification of the others must print Verified OK.
func runReceiptsPage(t *testing.T, g Gomega, cosign cosignCLI, dir, ns, call string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	page, err := os.ReadFile(filepath.Join(root, "docs", "receipts-cosign.md"))
	g.Expect(err).NotTo(HaveOccurred())
	blocks := quickStartBlocks(string(page))
	verifications := 0
	for i, b := range blocks {
		if b.skip != "" {
			t.Logf("docs/receipts-cosign.md block %d skipped: %s", i+1, b.skip)
			continue
		}
		cmd := exec.Command("bash", "-c", "set -eo pipefail\n"+b.text)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NS="+ns, "CALL="+call, "HOME="+cosign.home,
			"PATH="+filepath.Dir(cosign.bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		t.Logf("$ %s%s", b.text, out)
		if b.failsWith != "" {
			g.Expect(err).To(HaveOccurred(), "docs/receipts-cosign.md block %d must fail:\n%s", i+1, b.text)
			g.Expect(string(out)).To(ContainSubstring(b.failsWith), "docs/receipts-cosign.md block %d", i+1)
			g.Expect(string(out)).NotTo(ContainSubstring("Verified OK"))
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), "docs/receipts-cosign.md block %d failed:\n%s\n--- output:\n%s", i+1, b.text, out)
		if n := strings.Count(b.text, "cosign verify-blob-attestation"); n > 0 {
			g.Expect(strings.Count(string(out), "Verified OK")).To(Equal(n), "docs/receipts-cosign.md block %d", i+1)
			verifications += n
		}
	}
	g.Expect(verifications).To(Equal(2), "the page verifies the arguments and the result")
}

// submitNamed creates the sample ToolCall under name and waits until a human is asked.
func submitNamed(t *testing.T, g Gomega, ns, name string) *tg.ToolCall {
	t.Helper()
	tc := sampleToolCall(t, ns)
	tc.Name = name
	g.Expect(k8s.Create(context.Background(), tc)).To(Succeed())
	waitPhase(g, tc, tg.PhaseAwaitingApproval, stepTimeout)
	g.Expect(tc.Status.RequestID).NotTo(BeEmpty())
	return tc
}

// decideExpired approves the call's request through the provider's admin API with an expires_at
// already past (a millisecond after the request was made), so the approval arrives expired.
func decideExpired(g Gomega, tc *tg.ToolCall) {
	created, err := time.Parse(time.RFC3339Nano, providerRequest(g, tc.Status.RequestID)["created_at"].(string))
	g.Expect(err).NotTo(HaveOccurred())
	expiresAt := created.Add(time.Millisecond)
	g.Expect(time.Now().After(expiresAt)).To(BeTrue())
	providerCall(g, http.MethodPost, "/admin/v1/requests/"+tc.Status.RequestID+"/decide", map[string]any{
		"status": "approved", "note": "e2e: approved too late", "expires_at": expiresAt.Format(time.RFC3339Nano)})
}

// waitStatusReceipt waits until the ended call holds its receipt.
func waitStatusReceipt(g Gomega, tc *tg.ToolCall) {
	g.Eventually(func(g Gomega) *tg.Receipt { return get(g, tc).Status.Receipt }).
		WithTimeout(stepTimeout).WithPolling(250*time.Millisecond).ShouldNot(BeNil(), "ToolCall %s has no receipt", tc.Name)
}

// verifyStatusReceipt verifies the call's receipt with key and checks it is this call's.
func verifyStatusReceipt(g Gomega, tc *tg.ToolCall, key receipt.Key) *receipt.Verified {
	v, err := receipt.Verify(context.Background(), []byte(tc.Status.Receipt.Envelope), key)
	g.Expect(err).NotTo(HaveOccurred(), "ToolCall %s", tc.Name)
	g.Expect(v.Digest).To(Equal(tc.Status.Receipt.Digest))
	g.Expect(v.Predicate.Chain.Sequence).To(Equal(tc.Status.Receipt.Sequence))
	g.Expect(v.Predicate.ToolCall.UID).To(Equal(string(tc.UID)))
	g.Expect(v.Predicate.Outcome.Phase).To(Equal(string(tc.Status.Phase)))
	g.Expect(v.Matches(receipt.SubjectArguments, canonicalArguments(g, tc))).To(BeTrue(), "the receipt binds the canonical arguments")
	return v
}

// receiptLogLine is a "Receipt signed" line of the manager's log (JSON, controller-runtime's zap).
type receiptLogLine struct {
	Msg       string `json:"msg"`
	Namespace string `json:"receiptNamespace"`
	ToolCall  string `json:"receiptToolCall"`
	UID       string `json:"toolCallUID"`
	Sequence  int64  `json:"sequence"`
	Digest    string `json:"digest"`
	Receipt   string `json:"receipt"`
}

// loggedReceipts reads the "Receipt signed" lines for namespace ns from the logs of every manager Pod.
func loggedReceipts(g Gomega, ns string) []receiptLogLine {
	cs, err := kubernetes.NewForConfig(restConfig)
	g.Expect(err).NotTo(HaveOccurred())
	var lines []receiptLogLine
	for _, p := range managerPods(g) {
		logs, err := cs.CoreV1().Pods(systemNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "manager"}).DoRaw(context.Background())
		g.Expect(err).NotTo(HaveOccurred(), "logs of manager Pod %s", p.Name)
		sc := bufio.NewScanner(bytes.NewReader(logs))
		sc.Buffer(nil, 4*receipt.MaxEnvelopeBytes)
		for sc.Scan() {
			var l receiptLogLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "Receipt signed" && l.Namespace == ns {
				lines = append(lines, l)
			}
		}
		g.Expect(sc.Err()).NotTo(HaveOccurred())
	}
	return lines
}

// expectLoggedChain checks the manager's log for namespace ns: each receipt logged once and verified
// by key, the calls of statusReceipts' each with the envelope its status held, and all of them one
// chain from sequence 1 with nothing missing.
func expectLoggedChain(g Gomega, ns string, key receipt.Key, statusReceipts map[string]*tg.ToolCall) {
	g.Eventually(func(g Gomega) {
		lines := loggedReceipts(g, ns)
		var verified []*receipt.Verified
		byDigest := map[string]int{}
		for _, l := range lines {
			v, err := receipt.Verify(context.Background(), []byte(l.Receipt), key)
			g.Expect(err).NotTo(HaveOccurred(), "the logged receipt of %s", l.ToolCall)
			g.Expect(v.Digest).To(Equal(l.Digest))
			g.Expect(v.Predicate.Chain.Sequence).To(Equal(l.Sequence))
			g.Expect(v.Predicate.ToolCall.Name).To(Equal(l.ToolCall))
			byDigest[v.Digest]++
			verified = append(verified, v)
		}
		for d, n := range byDigest {
			g.Expect(n).To(Equal(1), "receipt %s is logged %d times", d, n)
		}
		for name, tc := range statusReceipts {
			var found []receiptLogLine
			for _, l := range lines {
				if l.ToolCall == name && l.UID == string(tc.UID) {
					found = append(found, l)
				}
			}
			g.Expect(found).To(HaveLen(1), "one logged receipt for ToolCall %s", name)
			g.Expect(found[0].Receipt).To(Equal(tc.Status.Receipt.Envelope), "the log holds the envelope of %s's status", name)
		}
		g.Expect(receipt.CheckChain(verified, 1)).To(BeEmpty())
	}).WithTimeout(stepTimeout).WithPolling(time.Second).Should(Succeed())
}

func canonicalArguments(g Gomega, tc *tg.ToolCall) []byte {
	c, err := receipt.CanonicalArguments(tc.Spec.Arguments.Raw)
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// oneByteChanged is b with its middle byte changed.
func oneByteChanged(b []byte) []byte {
	c := bytes.Clone(b)
	c[len(c)/2] ^= 0x01
	return c
}

// digestOf is the sha256:… digest at the end of a container's imageID (repo@sha256:…, or the digest alone).
func digestOf(imageID string) string {
	i := strings.LastIndex(imageID, "sha256:")
	if i < 0 {
		return ""
	}
	return imageID[i:]
}

func readFile(g Gomega, dir, name string) []byte {
	data, err := os.ReadFile(filepath.Join(dir, name))
	g.Expect(err).NotTo(HaveOccurred())
	return data
}

func writeFile(g Gomega, dir, name string, data []byte) string {
	path := filepath.Join(dir, name)
	g.Expect(os.WriteFile(path, data, 0o600)).To(Succeed())
	return path
}
