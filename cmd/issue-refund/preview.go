package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// The env Toolgate sets on the Jobs of a Tool with a preview (api/v1alpha1: PreviewModeEnv,
// PreviewMaxBytesEnv, PreviewDigestEnv; docs/previews.md). The demo reads them as any tool would,
// from its environment.
const (
	modeEnv     = "TOOLGATE_MODE"              // "preview" in the preview Job, "execute" in the execution Job
	maxBytesEnv = "TOOLGATE_PREVIEW_MAX_BYTES" // the Tool's spec.preview.maxBytes, in the preview Job
	digestEnv   = "TOOLGATE_PREVIEW_DIGEST"    // the digest of the preview the approver saw, in the execution Job
	// ledgerEnv names the demo's ledger file (see lookup). The sample Tool mounts the optional
	// ConfigMap issue-refund-demo-ledger there, so a test changes "the world" by editing it.
	ledgerEnv = "REFUND_DEMO_LEDGER"
	// defaultMaxBytes is what a preview may write when TOOLGATE_PREVIEW_MAX_BYTES is not set.
	defaultMaxBytes = 4000
)

// charge is what the demo's fake lookup says about a payment: the charge a refund would go back to
// and the customer who would receive it.
type charge struct {
	Charge   string `json:"charge"`
	Customer string `json:"customer"`
}

// preview is what the preview mode writes: what would be refunded, to whom and from which charge.
// Its fields are in a fixed order, so the same call and the same lookup give the same bytes.
type preview struct {
	Action    string `json:"action"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	PaymentID string `json:"payment_id"`
	Charge    string `json:"charge"`
	Customer  string `json:"customer"`
	Lookup    string `json:"lookup"` // "ledger" (read from REFUND_DEMO_LEDGER) or "derived" (from payment_id)
	Note      string `json:"note"`
}

const previewNote = "demo tool: the charge and customer come from a fake lookup, no payments API was asked; nothing was refunded"

// lookup is the demo's stand-in for asking a payments API which charge and customer a payment
// belongs to. It asks nobody: a payment listed in the JSON file named by REFUND_DEMO_LEDGER
// ({"<payment_id>": {"charge": "...", "customer": "..."}}) reads from there; any other payment, and
// every payment when the variable is unset or the file does not exist (an optional ConfigMap that
// was not created), gets a charge and a customer derived from its id, the same every time. It
// returns where the answer came from: "ledger" or "derived".
func lookup(getenv func(string) string, paymentID string) (charge, string, error) {
	if path := getenv(ledgerEnv); path != "" {
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return charge{}, "", fmt.Errorf("reading %s (%s): %w", ledgerEnv, path, err)
		default:
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			var ledger map[string]charge
			if err := dec.Decode(&ledger); err != nil {
				return charge{}, "", fmt.Errorf("%s (%s) is not a JSON object of payment ids to {\"charge\": string, \"customer\": string}: %w", ledgerEnv, path, err)
			}
			if c, ok := ledger[paymentID]; ok {
				if c.Charge == "" || c.Customer == "" {
					return charge{}, "", fmt.Errorf("%s (%s): the entry of %s needs both a charge and a customer", ledgerEnv, path, paymentID)
				}
				return c, "ledger", nil
			}
		}
	}
	ch := sha256.Sum256([]byte("charge/" + paymentID))
	cu := sha256.Sum256([]byte("customer/" + paymentID))
	return charge{Charge: "ch_" + hex.EncodeToString(ch[:6]), Customer: "cus_" + hex.EncodeToString(cu[:4])}, "derived", nil
}

// previewBytes returns the preview of the call, exactly as the preview mode writes it to the
// termination log; the execution mode computes it again to compare its digest.
func previewBytes(getenv func(string) string, a arguments) ([]byte, error) {
	c, source, err := lookup(getenv, a.PaymentID)
	if err != nil {
		return nil, err
	}
	return json.Marshal(preview{
		Action:    "refund",
		Amount:    a.Amount,
		Currency:  a.Currency,
		PaymentID: a.PaymentID,
		Charge:    c.Charge,
		Customer:  c.Customer,
		Lookup:    source,
		Note:      previewNote,
	})
}

// digest is how Toolgate names a preview's output: sha256:<hex of sha256(output)>.
func digest(output []byte) string {
	sum := sha256.Sum256(output)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// runPreview writes the call's preview to the termination log and returns the exit code. It moves
// no money, and it does not wait for ISSUE_REFUND_DELAY, which stands for a slow refund, not a
// slow lookup.
func runPreview(getenv func(string) string, say func(string), terminationPath string) int {
	maxBytes := defaultMaxBytes
	if s := getenv(maxBytesEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fail(say, terminationPath, 2, fmt.Sprintf("%s is %q: Toolgate sets it to the Tool's spec.preview.maxBytes, a number from 1 to 4000", maxBytesEnv, s))
		}
		maxBytes = n
	}
	a, err := parseArguments(getenv("TOOL_ARGUMENTS"))
	if err != nil {
		return fail(say, terminationPath, 2, err.Error())
	}
	out, err := previewBytes(getenv, a)
	if err != nil {
		return fail(say, terminationPath, 2, err.Error())
	}
	if len(out) > maxBytes {
		return fail(say, terminationPath, 2, fmt.Sprintf("the preview is %d bytes, more than %s=%d: raise the Tool's spec.preview.maxBytes (at most 4000) or use a shorter payment_id", len(out), maxBytesEnv, maxBytes))
	}
	var p preview
	_ = json.Unmarshal(out, &p)
	say(fmt.Sprintf("preview for ToolCall %s: would refund %d %s of payment %s to customer %s from charge %s (lookup: %s); nothing was refunded (preview %s)",
		getenv("TOOLCALL_NAME"), p.Amount, p.Currency, p.PaymentID, p.Customer, p.Charge, p.Lookup, digest(out)))
	if err := os.WriteFile(terminationPath, out, 0o644); err != nil {
		say("issue_refund: writing the preview: " + err.Error())
		return 1
	}
	return 0
}

// checkPreview computes the call's preview again and compares its digest with want, the digest of
// the preview the approver saw. A difference means the world changed since the approval: the
// refund is refused (exit code 1), with both digests in the termination log.
func checkPreview(getenv func(string) string, say func(string), terminationPath, want string) int {
	a, err := parseArguments(getenv("TOOL_ARGUMENTS"))
	if err != nil {
		return fail(say, terminationPath, 2, err.Error())
	}
	out, err := previewBytes(getenv, a)
	if err != nil {
		return fail(say, terminationPath, 2, "computing the preview again: "+err.Error())
	}
	if now := digest(out); now != want {
		msg := fmt.Sprintf("refused: the payment changed since the preview the approver saw (preview %s, now %s); nothing was refunded: create the ToolCall again to have the refund approved as it is now", want, now)
		say(msg)
		say("now: " + string(out))
		_ = os.WriteFile(terminationPath, []byte(msg), 0o644)
		return 1
	}
	say("the preview is unchanged since the approval (" + want + ")")
	return 0
}

// fail reports msg on stdout and in the termination log, prefixed with the tool's name, and returns code.
func fail(say func(string), terminationPath string, code int, msg string) int {
	msg = "issue_refund: " + msg
	say(msg)
	_ = os.WriteFile(terminationPath, []byte(msg), 0o644)
	return code
}
