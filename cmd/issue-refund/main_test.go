package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestRefundWritesReceipt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	var out bytes.Buffer
	code := run(env(map[string]string{
		"TOOL_ARGUMENTS": `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`,
		"TOOLCALL_NAME":  "refund-payment-123",
		"TOOLCALL_UID":   "0b6f4f2e-1111-2222-3333-444455556666",
	}), &out, path)
	if code != 0 {
		t.Fatalf("exit code %d, output %q", code, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r receipt
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("termination log %q: %v", data, err)
	}
	if r.PaymentID != "payment_123" || r.Amount != 4900 || r.Currency != "GBP" || r.Status != "issued" || len(r.RefundID) != len("rf_")+12 {
		t.Fatalf("receipt %+v", r)
	}
	if !bytes.Contains(out.Bytes(), []byte("refund "+r.RefundID+" issued for ToolCall refund-payment-123")) {
		t.Fatalf("output %q does not print the receipt", out.String())
	}
}

func TestRefundRejectsBadArguments(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"", "TOOL_ARGUMENTS is empty"},
		{`{"payment_id":"p","amount":0,"currency":"GBP"}`, "arguments.amount is 0"},
		{`{"payment_id":"p","amount":1,"currency":"JPY"}`, `arguments.currency is "JPY"`},
		{`{"payment_id":"","amount":1,"currency":"GBP"}`, "arguments.payment_id is empty"},
		{`{"payment_id":"p","amount":1,"currency":"GBP","extra":1}`, "unknown field"},
	} {
		path := filepath.Join(t.TempDir(), "termination-log")
		var out bytes.Buffer
		if code := run(env(map[string]string{"TOOL_ARGUMENTS": tc.args}), &out, path); code != 2 {
			t.Errorf("%s: exit code %d, want 2", tc.args, code)
		}
		data, _ := os.ReadFile(path)
		if !bytes.Contains(data, []byte(tc.want)) {
			t.Errorf("%s: termination log %q does not say %q", tc.args, data, tc.want)
		}
	}
}

const refundArgs = `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`

// The preview of refundArgs with the derived lookup, byte for byte, and with the ledger of
// ledgerAlice. Its digest is what Toolgate records and gives the execution Job.
const (
	derivedPreview = `{"action":"refund","amount":4900,"currency":"GBP","payment_id":"payment_123","charge":"ch_ec44e2b22ba8","customer":"cus_5c59574f","lookup":"derived","note":"demo tool: the charge and customer come from a fake lookup, no payments API was asked; nothing was refunded"}`
	ledgerPreview  = `{"action":"refund","amount":4900,"currency":"GBP","payment_id":"payment_123","charge":"ch_alice1","customer":"cus_alice","lookup":"ledger","note":"demo tool: the charge and customer come from a fake lookup, no payments API was asked; nothing was refunded"}`
	ledgerAlice    = `{"payment_123":{"charge":"ch_alice1","customer":"cus_alice"},"payment_999":{"charge":"ch_x","customer":"cus_x"}}`
	ledgerMallory  = `{"payment_123":{"charge":"ch_alice1","customer":"cus_mallory"}}`
	derivedDigest  = "sha256:151c158e44faf66c9746db3c9db1de53fc180865fe3360b4f419b4315a574d8b"
)

// The modes of a Tool with a preview: the preview says what would be refunded, the execution
// refunds only while the preview is still what the approver saw, and without a mode the tool
// behaves as it does for a Tool without a preview.
func TestPreviewAndExecuteModes(t *testing.T) {
	isReceipt := func(t *testing.T, log string) {
		var r receipt
		if err := json.Unmarshal([]byte(log), &r); err != nil || r.Status != "issued" || r.PaymentID != "payment_123" {
			t.Errorf("termination log %q is not the receipt of payment_123 (%v)", log, err)
		}
	}
	is := func(want string) func(*testing.T, string) {
		return func(t *testing.T, log string) {
			if log != want {
				t.Errorf("termination log\n%s\nwant\n%s", log, want)
			}
		}
	}
	says := func(want ...string) func(*testing.T, string) {
		return func(t *testing.T, log string) {
			for _, w := range want {
				if !strings.Contains(log, w) {
					t.Errorf("termination log %q does not say %q", log, w)
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		// ledger is the content of the REFUND_DEMO_LEDGER file ("": no such file); previewLedger,
		// when set, is its content when the preview ran, whose digest the execution Job receives.
		ledger, previewLedger string
		wantCode              int
		check                 func(*testing.T, string)
	}{
		{name: "preview, derived lookup", env: map[string]string{"TOOLGATE_MODE": "preview", "TOOLGATE_PREVIEW_MAX_BYTES": "4000"},
			check: is(derivedPreview)},
		{name: "preview, ledger file absent (optional ConfigMap not created): derived", env: map[string]string{"TOOLGATE_MODE": "preview"},
			check: is(derivedPreview)},
		{name: "preview, from the ledger", env: map[string]string{"TOOLGATE_MODE": "preview"}, ledger: ledgerAlice,
			check: is(ledgerPreview)},
		{name: "preview, payment not in the ledger: derived", env: map[string]string{"TOOLGATE_MODE": "preview"}, ledger: `{"payment_999":{"charge":"ch_x","customer":"cus_x"}}`,
			check: is(derivedPreview)},
		{name: "preview exactly maxBytes", env: map[string]string{"TOOLGATE_MODE": "preview", "TOOLGATE_PREVIEW_MAX_BYTES": strconv.Itoa(len(derivedPreview))},
			check: is(derivedPreview)},
		{name: "preview ignores ISSUE_REFUND_DELAY", env: map[string]string{"TOOLGATE_MODE": "preview", "ISSUE_REFUND_DELAY": "soon"},
			check: is(derivedPreview)},
		{name: "preview over maxBytes", env: map[string]string{"TOOLGATE_MODE": "preview", "TOOLGATE_PREVIEW_MAX_BYTES": strconv.Itoa(len(derivedPreview) - 1)},
			wantCode: 2, check: says("the preview is 266 bytes, more than TOOLGATE_PREVIEW_MAX_BYTES=265")},
		{name: "preview, maxBytes not a number", env: map[string]string{"TOOLGATE_MODE": "preview", "TOOLGATE_PREVIEW_MAX_BYTES": "4k"},
			wantCode: 2, check: says(`TOOLGATE_PREVIEW_MAX_BYTES is "4k"`)},
		{name: "preview, ledger not JSON", env: map[string]string{"TOOLGATE_MODE": "preview"}, ledger: `payment_123: ch_1`,
			wantCode: 2, check: says("REFUND_DEMO_LEDGER (", "is not a JSON object of payment ids")},
		{name: "preview, ledger entry without a customer", env: map[string]string{"TOOLGATE_MODE": "preview"}, ledger: `{"payment_123":{"charge":"ch_1"}}`,
			wantCode: 2, check: says("the entry of payment_123 needs both a charge and a customer")},
		{name: "preview, bad arguments", env: map[string]string{"TOOLGATE_MODE": "preview", "TOOL_ARGUMENTS": `{"payment_id":"payment_123","amount":0,"currency":"GBP"}`},
			wantCode: 2, check: says("issue_refund: arguments.amount is 0")},
		{name: "execute, digest matches (derived)", env: map[string]string{"TOOLGATE_MODE": "execute", "TOOLGATE_PREVIEW_DIGEST": derivedDigest},
			check: isReceipt},
		{name: "execute, digest matches (ledger unchanged)", env: map[string]string{"TOOLGATE_MODE": "execute"}, previewLedger: ledgerAlice, ledger: ledgerAlice,
			check: isReceipt},
		{name: "execute, the ledger changed since the preview", env: map[string]string{"TOOLGATE_MODE": "execute"}, previewLedger: ledgerAlice, ledger: ledgerMallory,
			wantCode: 1, check: says("refused: the payment changed since the preview the approver saw (preview "+digest([]byte(ledgerPreview))+", now sha256:", "nothing was refunded")},
		{name: "execute, the ledger appeared since the preview", env: map[string]string{"TOOLGATE_MODE": "execute", "TOOLGATE_PREVIEW_DIGEST": derivedDigest}, ledger: ledgerAlice,
			wantCode: 1, check: says("refused: the payment changed since the preview the approver saw (preview " + derivedDigest + ", now " + digest([]byte(ledgerPreview)) + ")")},
		{name: "execute, digest of another preview", env: map[string]string{"TOOLGATE_MODE": "execute", "TOOLGATE_PREVIEW_DIGEST": digest([]byte(derivedPreview + " "))},
			wantCode: 1, check: says("refused: the payment changed", "now "+derivedDigest)},
		{name: "execute, ledger unreadable now", env: map[string]string{"TOOLGATE_MODE": "execute", "TOOLGATE_PREVIEW_DIGEST": derivedDigest}, ledger: `[]`,
			wantCode: 2, check: says("computing the preview again: REFUND_DEMO_LEDGER")},
		{name: "execute without a digest (preview failed, asked anyway)", env: map[string]string{"TOOLGATE_MODE": "execute"}, ledger: `not read`,
			check: isReceipt},
		{name: "no mode: as without a preview, no lookup, digest ignored", env: map[string]string{"TOOLGATE_PREVIEW_DIGEST": "sha256:00"}, ledger: `not read`,
			check: isReceipt},
		{name: "unknown mode", env: map[string]string{"TOOLGATE_MODE": "dry-run"},
			wantCode: 2, check: says(`TOOLGATE_MODE is "dry-run": Toolgate sets preview or execute`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vars := map[string]string{
				"TOOL_ARGUMENTS":     refundArgs,
				"TOOLCALL_NAME":      "refund-payment-123",
				"TOOLCALL_UID":       "0b6f4f2e-1111-2222-3333-444455556666",
				"REFUND_DEMO_LEDGER": filepath.Join(dir, "ledger.json"),
			}
			for k, v := range tc.env {
				vars[k] = v
			}
			writeLedger := func(content string) {
				t.Helper()
				_ = os.Remove(vars["REFUND_DEMO_LEDGER"])
				if content != "" {
					if err := os.WriteFile(vars["REFUND_DEMO_LEDGER"], []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.previewLedger != "" {
				writeLedger(tc.previewLedger)
				vars["TOOLGATE_PREVIEW_DIGEST"] = digest(runMode(t, vars, "preview", 0))
			}
			writeLedger(tc.ledger)
			tc.check(t, string(runMode(t, vars, vars["TOOLGATE_MODE"], tc.wantCode)))
		})
	}
}

// runMode runs the tool with vars and TOOLGATE_MODE=mode, expects its exit code and returns its
// termination log.
func runMode(t *testing.T, vars map[string]string, mode string, wantCode int) []byte {
	t.Helper()
	m := map[string]string{"TOOLGATE_MODE": mode}
	for k, v := range vars {
		if k != "TOOLGATE_MODE" {
			m[k] = v
		}
	}
	path := filepath.Join(t.TempDir(), "termination-log")
	var out bytes.Buffer
	if code := run(env(m), &out, path); code != wantCode {
		t.Fatalf("TOOLGATE_MODE=%q: exit code %d, want %d; output %q", mode, code, wantCode, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
