package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
