package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/receipt"
)

const (
	testDigest    = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testArguments = `{"payment_id":"payment_123","currency":"GBP","amount":4900}`
	testResult    = `{"refund_id":"re_1"}`
)

// testKey is a receipt signing key made for the test, and its public half as verify reads it.
func testKey(t *testing.T, file string) (receipt.Key, verifyKey) {
	t.Helper()
	g := NewWithT(t)
	priv, err := receipt.GenerateECDSA()
	g.Expect(err).NotTo(HaveOccurred())
	k, err := receipt.ParseKey(priv)
	g.Expect(err).NotTo(HaveOccurred())
	pubPEM, err := receipt.PublicPEM(k)
	g.Expect(err).NotTo(HaveOccurred())
	pub, err := receipt.ParseKey(pubPEM)
	g.Expect(err).NotTo(HaveOccurred())
	return k, verifyKey{file: file, key: pub, id: receipt.KeyID(pub)}
}

// ranCall is a Succeeded ToolCall as the manager leaves it, and the predicate of its receipt.
func ranCall() (*tg.ToolCall, *receipt.Predicate) {
	tc := &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "refund", UID: "tc-uid"},
		Spec:       tg.ToolCallSpec{Tool: "issue_refund", Arguments: runtime.RawExtension{Raw: []byte(testArguments)}},
		Status:     tg.ToolCallStatus{Phase: tg.PhaseSucceeded, Reason: tg.ReasonJobSucceeded, JobName: "refund-0a1b2c3d4e", JobUID: "job-uid", Result: testResult},
	}
	p := &receipt.Predicate{
		ToolCall: receipt.ToolCall{Namespace: "payments", Name: "refund", UID: "tc-uid"},
		Tool:     receipt.Tool{ToolName: "issue_refund", Name: "issue-refund", UID: "tool-uid", Generation: 1},
		Outcome:  receipt.Outcome{Phase: "Succeeded", Reason: tg.ReasonJobSucceeded, Ran: true},
		Execution: &receipt.Execution{JobName: "refund-0a1b2c3d4e", JobUID: "job-uid", PodName: "refund-0a1b2c3d4e-pod", PodUID: "pod-uid", NodeName: "node-1",
			Containers: []receipt.Container{{Name: "tool", Image: "example.com/refund:1", ImageID: "example.com/refund@" + testDigest, ImageDigest: testDigest, ExitCode: ptr.To[int32](0)}}},
		Chain: receipt.Chain{Namespace: "payments", Sequence: 1},
	}
	return tc, p
}

// deniedCall is a Denied ToolCall and the predicate of its receipt.
func deniedCall() (*tg.ToolCall, *receipt.Predicate) {
	tc, p := ranCall()
	tc.Status = tg.ToolCallStatus{Phase: tg.PhaseDenied, Reason: tg.ReasonDenied}
	p.Outcome = receipt.Outcome{Phase: "Denied", Reason: tg.ReasonDenied, NotRun: receipt.NotRunDenied}
	p.Execution = nil
	return tc, p
}

// sign signs p over tc's arguments (and result, for a call that ran) and puts the receipt in tc's status.
func sign(t *testing.T, k receipt.Key, tc *tg.ToolCall, p *receipt.Predicate) *receipt.Verified {
	t.Helper()
	g := NewWithT(t)
	p.Signer.KeyID = receipt.KeyID(k)
	var result []byte
	if p.Outcome.Ran {
		result = []byte(tc.Status.Result)
	}
	st, err := receipt.Statement(tc.Spec.Arguments.Raw, result, p)
	g.Expect(err).NotTo(HaveOccurred())
	env, err := receipt.Sign(context.Background(), k, st)
	g.Expect(err).NotTo(HaveOccurred())
	tc.Status.Receipt = &tg.Receipt{Envelope: string(env), Digest: receipt.Digest(st), Sequence: p.Chain.Sequence, Previous: p.Chain.Previous, KeyID: p.Signer.KeyID}
	v, err := receipt.Verify(context.Background(), env, k)
	g.Expect(err).NotTo(HaveOccurred())
	return v
}

// failures are the FAILED lines of a report.
func failures(r *report) []string {
	var out []string
	for _, c := range r.checks {
		if c.verdict == verdictFailed {
			out = append(out, c.msg)
		}
	}
	return out
}

func notes(r *report) []string {
	var out []string
	for _, c := range r.checks {
		if c.verdict == verdictNote {
			out = append(out, c.msg)
		}
	}
	return out
}

func TestCheckReceiptBindsTheToolCall(t *testing.T) {
	key, pub := testKey(t, "key.pub")
	_, otherPub := testKey(t, "old.pub")
	cases := []struct {
		name string
		keys []verifyKey
		// call returns the ToolCall, signed, then changed as the case needs.
		call func(*testing.T) *tg.ToolCall
		want string // the FAILED line; "" for none
	}{
		{"as signed", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall { tc, p := ranCall(); sign(t, key, tc, p); return tc }, ""},
		{"denied, no result", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall { tc, p := deniedCall(); sign(t, key, tc, p); return tc }, ""},
		{"another key", []verifyKey{otherPub}, func(t *testing.T) *tg.ToolCall { tc, p := ranCall(); sign(t, key, tc, p); return tc }, "signature: no key verifies"},
		{"arguments changed", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall {
			tc, p := ranCall()
			sign(t, key, tc, p)
			tc.Spec.Arguments.Raw = []byte(`{"payment_id":"payment_123","currency":"GBP","amount":49000}`)
			return tc
		}, "arguments: the subject is sha256:"},
		{"result changed", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall {
			tc, p := ranCall()
			sign(t, key, tc, p)
			tc.Status.Result = `{"refund_id":"re_2"}`
			return tc
		}, "result: the subject is sha256:"},
		{"another ToolCall's receipt", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall {
			tc, p := ranCall()
			sign(t, key, tc, p)
			tc.UID = "other-uid"
			return tc
		}, "toolCall: the receipt names payments/refund (uid tc-uid), not this ToolCall payments/refund (uid other-uid)"},
		{"another outcome", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall {
			tc, p := ranCall()
			sign(t, key, tc, p)
			tc.Status.Phase = tg.PhaseFailed
			return tc
		}, "outcome: the receipt says Succeeded, the ToolCall is Failed"},
		{"a receipt that says it ran, of a call with no Job", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall {
			tc, p := ranCall()
			sign(t, key, tc, p)
			tc.Status.JobName, tc.Status.JobUID = "", ""
			return tc
		}, "outcome: the receipt says the tool ran, but the ToolCall's status names no Job"},
		{"status.receipt not the envelope's", []verifyKey{pub}, func(t *testing.T) *tg.ToolCall {
			tc, p := ranCall()
			sign(t, key, tc, p)
			tc.Status.Receipt.Digest = testDigest
			return tc
		}, "status.receipt: its digest, sequence, previous or keyID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			rep := &report{}
			v := checkReceipt(context.Background(), c.call(t), c.keys, rep)
			if c.want == "" {
				g.Expect(failures(rep)).To(BeEmpty())
				g.Expect(v).NotTo(BeNil())
				return
			}
			g.Expect(failures(rep)).To(ContainElement(HavePrefix(c.want)))
		})
	}
}

// Across a rotation verify takes both keys and says which one verified the receipt.
func TestCheckReceiptNamesTheKeyThatVerified(t *testing.T) {
	g := NewWithT(t)
	_, oldPub := testKey(t, "old.pub")
	key, pub := testKey(t, "new.pub")
	tc, p := ranCall()
	sign(t, key, tc, p)
	rep := &report{}
	g.Expect(checkReceipt(context.Background(), tc, []verifyKey{oldPub, pub}, rep)).NotTo(BeNil())
	g.Expect(failures(rep)).To(BeEmpty())
	var out bytes.Buffer
	rep.write(&out)
	g.Expect(out.String()).To(ContainSubstring("OK      signature: verified with key " + pub.id + " (new.pub)\n"))
	g.Expect(out.String()).To(ContainSubstring("OK      result: the subject is the digest of status.result"))
}

// The live objects of a call that ran, as the receipt of ranCall names them.
func liveObjects() (*batchv1.Job, *corev1.Pod, *tg.Tool) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "refund-0a1b2c3d4e", UID: "job-uid",
		Labels: map[string]string{tg.LabelToolCallUID: "tc-uid"}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "refund-0a1b2c3d4e-pod", UID: "pod-uid",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "tool", Image: "example.com/refund:1", ImageID: "example.com/refund@" + testDigest}}},
	}
	tool := &tg.Tool{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "issue-refund", UID: "tool-uid", Generation: 1}}
	return job, pod, tool
}

func TestCheckLiveComparesTheJobPodAndTool(t *testing.T) {
	cases := []struct {
		name    string
		denied  bool
		objects func(*batchv1.Job, *corev1.Pod, *tg.Tool) []client.Object
		fail    string
		note    string
	}{
		{"all as the receipt says", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object { return []client.Object{j, p, tl} }, "", ""},
		{"Job and Pod deleted by a TTL", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object { return []client.Object{tl} },
			"", "job: refund-0a1b2c3d4e " + gone},
		{"Job replaced", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object {
			j.UID = "new-uid"
			return []client.Object{j, p, tl}
		},
			"job: refund-0a1b2c3d4e exists with uid new-uid, but the receipt names uid job-uid", ""},
		{"Pod replaced", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object {
			p.UID = "new-uid"
			return []client.Object{j, p, tl}
		},
			"pod: refund-0a1b2c3d4e-pod exists with uid new-uid", ""},
		{"another node", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object {
			p.Spec.NodeName = "node-2"
			return []client.Object{j, p, tl}
		},
			`pod: the receipt says node "node-1", the Pod ran on "node-2"`, ""},
		{"another image", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object {
			p.Status.ContainerStatuses[0].ImageID = "example.com/refund@sha256:" + strings.Repeat("2", 64)
			return []client.Object{j, p, tl}
		}, "container tool: the receipt names image example.com/refund@" + testDigest, ""},
		{"Tool changed", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object {
			tl.Generation = 3
			return []client.Object{j, p, tl}
		},
			"", "tool: issue-refund changed since the call: now generation 3, the call was accepted at generation 1"},
		{"Tool replaced", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object {
			tl.UID = "new-uid"
			return []client.Object{j, p, tl}
		},
			"", "tool: issue-refund exists with uid new-uid, but the receipt names uid tool-uid"},
		{"Tool deleted", false, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object { return []client.Object{j, p} },
			"", "tool: issue-refund " + gone},
		{"denied, no Job", true, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object { return []client.Object{tl} }, "", ""},
		{"denied, yet a Job of the call exists", true, func(j *batchv1.Job, p *corev1.Pod, tl *tg.Tool) []client.Object { return []client.Object{j, tl} },
			"job: the receipt says the tool did not run, but Job refund-0a1b2c3d4e exists for the ToolCall", ""},
	}
	key, pub := testKey(t, "key.pub")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			tc, p := ranCall()
			if c.denied {
				tc, p = deniedCall()
			}
			v := sign(t, key, tc, p)
			cl := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(c.objects(liveObjects())...).Build()
			rep := &report{}
			g.Expect(checkReceipt(context.Background(), tc, []verifyKey{pub}, rep)).NotTo(BeNil())
			checkLive(context.Background(), cl, tc, v, rep)
			if c.fail == "" {
				g.Expect(failures(rep)).To(BeEmpty())
			} else {
				g.Expect(failures(rep)).To(ContainElement(HavePrefix(c.fail)))
			}
			if c.note != "" {
				g.Expect(notes(rep)).To(ContainElement(HavePrefix(c.note)))
			}
		})
	}
}

// A denied call's receipt that names a Job is a failure, whatever the cluster holds.
func TestCheckLiveRefusesAJobInTheReceiptOfACallThatDidNotRun(t *testing.T) {
	g := NewWithT(t)
	key, _ := testKey(t, "key.pub")
	tc, p := deniedCall()
	p.Execution = &receipt.Execution{JobName: "refund-0a1b2c3d4e", JobUID: "job-uid"}
	v := sign(t, key, tc, p)
	rep := &report{}
	checkLive(context.Background(), fake.NewClientBuilder().WithScheme(scheme()).Build(), tc, v, rep)
	g.Expect(failures(rep)).To(ConsistOf("job: the receipt says the tool did not run, but names Job refund-0a1b2c3d4e (uid job-uid)"))
}

// chainOf signs n chained receipts of namespace payments, one per ToolCall.
func chainOf(t *testing.T, k receipt.Key, n int) []tg.ToolCall {
	var tcs []tg.ToolCall
	prev := ""
	for i := 1; i <= n; i++ {
		tc, p := deniedCall()
		tc.Name = "call-" + string(rune('0'+i))
		tc.UID = types.UID(tc.Name)
		p.ToolCall.Name, p.ToolCall.UID = tc.Name, string(tc.UID)
		p.Chain = receipt.Chain{Namespace: "payments", Sequence: int64(i), Previous: prev}
		v := sign(t, k, tc, p)
		prev = v.Digest
		tcs = append(tcs, *tc)
	}
	return tcs
}

func TestCheckChainNamesTheGapAndTakesExportedReceipts(t *testing.T) {
	g := NewWithT(t)
	key, pub := testKey(t, "key.pub")
	tcs := chainOf(t, key, 4)

	rep := &report{}
	checkChain(context.Background(), "payments", tcs, nil, []verifyKey{pub}, rep)
	g.Expect(failures(rep)).To(BeEmpty())
	g.Expect(rep.checks).To(ContainElement(check{verdictOK, "chain: 4 receipts of namespace payments checked, 1 to 4, without a gap, a fork or a broken link"}))

	// Receipt 2's ToolCall is gone.
	kept := []tg.ToolCall{tcs[0], tcs[2], tcs[3]}
	rep = &report{}
	checkChain(context.Background(), "payments", kept, nil, []verifyKey{pub}, rep)
	g.Expect(failures(rep)).To(ContainElement("chain: namespace payments, receipt 3: receipt 2 is missing"))
	g.Expect(failures(rep)).To(ContainElement(HavePrefix("chain: 3 receipts of namespace payments checked, the last is 4")))

	// Its log line brings it back; other log lines and other namespaces' receipts are left out.
	line, err := json.Marshal(map[string]any{"level": "info", "msg": logMsgReceiptSigned, "receiptToolCall": tcs[1].Name, "receipt": tcs[1].Status.Receipt.Envelope})
	g.Expect(err).NotTo(HaveOccurred())
	other, op := deniedCall()
	op.Chain = receipt.Chain{Namespace: "billing", Sequence: 7}
	sign(t, key, other, op)
	file := `{"level":"info","msg":"Starting workers"}` + "\n\n" + string(line) + "\n" + other.Status.Receipt.Envelope + "\n"
	exported, err := parseReceipts(strings.NewReader(file), "log.json")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exported).To(HaveLen(2))
	g.Expect(exported[0].where).To(Equal("log.json:3"))
	rep = &report{}
	checkChain(context.Background(), "payments", kept, exported, []verifyKey{pub}, rep)
	g.Expect(failures(rep)).To(BeEmpty())
	g.Expect(notes(rep)).To(ContainElement("chain: 1 exported receipts of other namespaces left out"))

	// Two receipts with one sequence number: a fork.
	tc, p := deniedCall()
	p.Chain = receipt.Chain{Namespace: "payments", Sequence: 2, Previous: tcs[0].Status.Receipt.Digest}
	sign(t, key, tc, p)
	rep = &report{}
	checkChain(context.Background(), "payments", append(tcs, *tc), nil, []verifyKey{pub}, rep)
	g.Expect(failures(rep)).To(ContainElement(ContainSubstring("receipt 2: 2 different receipts carry this sequence number")))
}

func TestParseReceiptsNamesTheBadLine(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]string{
		"{\"payloadType\":\"x\"}\nnot json\n":          "line 2 is not a JSON object",
		`{"level":"info"}`:                             "line 1 is neither a receipt envelope",
		`{"msg":"Receipt signed","receipt":{"a":1}}`:   `line 1 is a "Receipt signed" log line without its receipt field`,
		`{"msg":"Receipt signed","receiptToolCall":1}`: `line 1 is a "Receipt signed" log line without its receipt field`,
	} {
		_, err := parseReceipts(strings.NewReader(in), "f")
		g.Expect(err).To(MatchError(HavePrefix(want)), in)
	}
}

// A key file that is not a key is an error naming the file, before anything is read from the cluster.
func TestVerifyNamesTheUnreadableKeyFile(t *testing.T) {
	g := NewWithT(t)
	bad := t.TempDir() + "/bad.pub"
	g.Expect(os.WriteFile(bad, []byte("not a key\n"), 0o600)).To(Succeed())
	code, stdout, stderr := plugin(g, "verify", "refund", "--key", bad)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stdout).To(BeEmpty())
	g.Expect(stderr).To(HavePrefix("error: --key " + bad + ": no PEM block found"))
	code, _, stderr = plugin(g, "verify", "refund", "--key", pubFileOf(t), "--chain", "--receipts", bad)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stderr).To(HavePrefix("error: --receipts: line 1 is not a JSON object"))
}

// pubFileOf writes a new public key to a file.
func pubFileOf(t *testing.T) string {
	k, _ := testKey(t, "")
	pub, err := receipt.PublicPEM(k)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	f := t.TempDir() + "/key.pub"
	NewWithT(t).Expect(os.WriteFile(f, pub, 0o600)).To(Succeed())
	return f
}
