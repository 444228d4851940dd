package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/receipt"
)

const verifySynopsis = "kubectl toolcall verify NAME --key FILE [--key FILE]... [--chain [--receipts FILE]]"

const verifyExitHelp = `Exit codes:
  0  every check passed (NOTE lines say what could not be checked, e.g. a Job deleted by its TTL)
  1  a check failed (its FAILED line says which), or an error: the ToolCall has no receipt, a key
     file is unreadable, the API server refused a request
  2  usage error
`

// verdicts of one check.
const (
	verdictOK     = "OK"
	verdictNote   = "NOTE"
	verdictFailed = "FAILED"
)

// check is one line of verify's report.
type check struct{ verdict, msg string }

// report is what verify found, check by check.
type report struct{ checks []check }

func (r *report) add(verdict, format string, a ...any) {
	r.checks = append(r.checks, check{verdict, fmt.Sprintf(format, a...)})
}
func (r *report) ok(format string, a ...any)   { r.add(verdictOK, format, a...) }
func (r *report) note(format string, a ...any) { r.add(verdictNote, format, a...) }
func (r *report) fail(format string, a ...any) { r.add(verdictFailed, format, a...) }

// count is the number of checks with verdict v.
func (r *report) count(v string) int {
	n := 0
	for _, c := range r.checks {
		if c.verdict == v {
			n++
		}
	}
	return n
}

func (r *report) write(w io.Writer) {
	for _, c := range r.checks {
		fmt.Fprintf(w, "%-6s  %s\n", c.verdict, c.msg)
	}
}

// verifyKey is a --key, with the file it came from.
type verifyKey struct {
	file string
	key  receipt.Key
	id   string
}

// errVerifyFailed is verify's error once the report is out: a check failed.
var errVerifyFailed = errors.New("verification failed")

func (c *cli) verify(ctx context.Context, args []string) error {
	fs := c.flags("verify")
	keyFiles := fs.StringArray("key", nil, "Public key (PEM) to verify receipts with, e.g. the key.pub field of the manager's Secret toolgate-receipt-key; repeat it across a key rotation: any of the keys may verify a receipt.")
	chain := fs.Bool("chain", false, "Also verify every receipt of the namespace, and that their chain runs from receipt 1 without a gap, a fork or a broken link.")
	receiptsFile := fs.String("receipts", "", "With --chain: a file of exported receipts to add to the ToolCalls' own (those of deleted ToolCalls): one envelope JSON per line, or the manager's JSON log, whose \"Receipt signed\" lines it reads.")
	help, err := c.parse("verify", fs, args, verifySynopsis)
	if help || err != nil {
		return err
	}
	if len(fs.Args()) != 1 {
		return usagef("verify", "verify takes exactly one NAME, got %d arguments", len(fs.Args()))
	}
	if len(*keyFiles) == 0 {
		return usagef("verify", "--key is required: the public key the receipts are signed with, e.g. kubectl -n toolgate-system get secret toolgate-receipt-key -o jsonpath='{.data.key\\.pub}' | base64 -d > key.pub")
	}
	if *receiptsFile != "" && !*chain {
		return usagef("verify", "--receipts adds receipts to the chain that --chain checks: pass --chain too")
	}
	keys, err := readKeys(*keyFiles)
	if err != nil {
		return err
	}
	var exported []exportedReceipt
	if *receiptsFile != "" {
		f, err := os.Open(*receiptsFile)
		if err != nil {
			return fmt.Errorf("--receipts: %w", err)
		}
		exported, err = parseReceipts(f, *receiptsFile)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("--receipts: %w", err)
		}
	}
	name := fs.Args()[0]
	cl, ns, tc, err := c.connectToReceipt(ctx, name)
	if err != nil {
		return err
	}

	rep := &report{}
	fmt.Fprintf(c.stdout, "toolcall %s/%s: receipt %d, %s\n", ns, name, tc.Status.Receipt.Sequence, tc.Status.Receipt.Digest)
	if v := checkReceipt(ctx, tc, keys, rep); v != nil {
		checkLive(ctx, cl, tc, v, rep)
	}
	if *chain {
		list := &tg.ToolCallList{}
		if err := cl.List(ctx, list, client.InNamespace(ns)); err != nil {
			rep.fail("chain: listing the ToolCalls of namespace %s: %v", ns, err)
		} else {
			checkChain(ctx, ns, list.Items, exported, keys, rep)
		}
	}
	rep.write(c.stdout)
	failed, notes := rep.count(verdictFailed), rep.count(verdictNote)
	if failed > 0 {
		fmt.Fprintf(c.stdout, "FAILED: %d of %d checks failed\n", failed, len(rep.checks))
		return fmt.Errorf("%w: %d of %d checks failed (the FAILED lines on stdout say which)", errVerifyFailed, failed, len(rep.checks))
	}
	fmt.Fprintf(c.stdout, "Verified: %d checks passed, %d notes\n", len(rep.checks)-notes, notes)
	return nil
}

// readKeys reads the --key files.
func readKeys(files []string) ([]verifyKey, error) {
	var keys []verifyKey
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		k, err := receipt.ParseKey(b)
		if err != nil {
			return nil, fmt.Errorf("--key %s: %w", f, err)
		}
		keys = append(keys, verifyKey{file: f, key: k, id: receipt.KeyID(k)})
	}
	return keys, nil
}

// verifyEnvelope verifies one receipt with keys.
func verifyEnvelope(ctx context.Context, envelope []byte, keys []verifyKey) (*receipt.Verified, error) {
	ks := make([]receipt.Key, len(keys))
	for i, k := range keys {
		ks[i] = k.key
	}
	return receipt.Verify(ctx, envelope, ks...)
}

// keyFile names the --key file whose key has id.
func keyFile(keys []verifyKey, id string) string {
	for _, k := range keys {
		if k.id == id {
			return k.file
		}
	}
	return "?"
}

// checkReceipt checks tc's receipt on its own and against tc: the signature and predicate type, the
// subjects against the arguments and the result, and the ToolCall and outcome it names. It returns
// the verified receipt, nil when its signature or format did not verify (nothing else can be checked).
func checkReceipt(ctx context.Context, tc *tg.ToolCall, keys []verifyKey, rep *report) *receipt.Verified {
	st := tc.Status.Receipt
	v, err := verifyEnvelope(ctx, []byte(st.Envelope), keys)
	if err != nil {
		rep.fail("signature: %v", err)
		return nil
	}
	rep.ok("signature: verified with key %s (%s)", v.KeyID, keyFile(keys, v.KeyID))
	rep.ok("predicate type: %s", receipt.PredicateType)
	if st.Digest != v.Digest || st.Sequence != v.Predicate.Chain.Sequence || st.Previous != v.Predicate.Chain.Previous || st.KeyID != v.KeyID {
		rep.fail("status.receipt: its digest, sequence, previous or keyID (%s, %d, %q, %s) are not the signed envelope's (%s, %d, %q, %s)",
			st.Digest, st.Sequence, st.Previous, st.KeyID, v.Digest, v.Predicate.Chain.Sequence, v.Predicate.Chain.Previous, v.KeyID)
	}

	if canon, err := receipt.CanonicalArguments(tc.Spec.Arguments.Raw); err != nil {
		rep.fail("arguments: %v", err)
	} else if v.Matches(receipt.SubjectArguments, canon) {
		rep.ok("arguments: the subject is the digest of the ToolCall's canonical arguments (sha256:%s)", receipt.Sha256(canon))
	} else {
		rep.fail("arguments: the subject is sha256:%s, but the ToolCall's canonical arguments are sha256:%s", v.Subjects[receipt.SubjectArguments], receipt.Sha256(canon))
	}
	p := &v.Predicate
	switch res, has := v.Subjects[receipt.SubjectResult]; {
	case p.Outcome.Ran && v.Matches(receipt.SubjectResult, []byte(tc.Status.Result)):
		rep.ok("result: the subject is the digest of status.result (sha256:%s)", res)
	case p.Outcome.Ran && !has:
		rep.fail("result: the receipt says the tool ran, but binds no result")
	case p.Outcome.Ran:
		rep.fail("result: the subject is sha256:%s, but status.result is sha256:%s", res, receipt.Sha256([]byte(tc.Status.Result)))
	case has:
		rep.fail("result: the receipt says the tool did not run (%s), but binds a result", p.Outcome.NotRun)
	default:
		rep.ok("result: none bound, as the tool did not run (%s)", p.Outcome.NotRun)
	}

	want := receipt.ToolCall{Namespace: tc.Namespace, Name: tc.Name, UID: string(tc.UID)}
	got := receipt.ToolCall{Namespace: p.ToolCall.Namespace, Name: p.ToolCall.Name, UID: p.ToolCall.UID}
	if got == want {
		rep.ok("toolCall: %s/%s, uid %s", got.Namespace, got.Name, got.UID)
	} else {
		rep.fail("toolCall: the receipt names %s/%s (uid %s), not this ToolCall %s/%s (uid %s)", got.Namespace, got.Name, got.UID, want.Namespace, want.Name, want.UID)
	}
	if p.Outcome.Phase == string(tc.Status.Phase) {
		rep.ok("outcome: %s (%s)", p.Outcome.Phase, p.Outcome.Reason)
	} else {
		rep.fail("outcome: the receipt says %s, the ToolCall is %s", p.Outcome.Phase, tc.Status.Phase)
	}
	switch {
	case p.Outcome.Ran && !ran(tc):
		rep.fail("outcome: the receipt says the tool ran, but the ToolCall's status names no Job")
	case !p.Outcome.Ran && ran(tc):
		rep.fail("outcome: the receipt says the tool did not run, but the ToolCall's status names Job %s", tc.Status.JobName)
	}
	return v
}
