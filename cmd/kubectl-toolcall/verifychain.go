package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/receipt"
)

// logMsgReceiptSigned is the message of the manager's log line that carries a receipt it wrote.
const logMsgReceiptSigned = "Receipt signed"

// exportedReceipt is a receipt read from --receipts, with where it was read.
type exportedReceipt struct {
	where    string
	envelope []byte
}

// parseReceipts reads a --receipts file: one JSON object per line, each a DSSE envelope or a line of
// the manager's JSON log. Of the log, only "Receipt signed" lines count; their receipt field is the
// envelope. Blank lines are skipped.
func parseReceipts(r io.Reader, name string) ([]exportedReceipt, error) {
	var out []exportedReceipt
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*receipt.MaxEnvelopeBytes)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, n)
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(line, &fields); err != nil {
			return nil, fmt.Errorf("line %d is not a JSON object (want a receipt envelope or a line of the manager's JSON log): %v", n, err)
		}
		if _, ok := fields["payloadType"]; ok {
			out = append(out, exportedReceipt{where, append([]byte(nil), line...)})
			continue
		}
		var msg string
		if raw, ok := fields["msg"]; !ok || json.Unmarshal(raw, &msg) != nil {
			return nil, fmt.Errorf("line %d is neither a receipt envelope (no payloadType) nor a line of the manager's JSON log (no msg)", n)
		}
		if msg != logMsgReceiptSigned {
			continue
		}
		var env string
		if err := json.Unmarshal(fields["receipt"], &env); err != nil || env == "" {
			return nil, fmt.Errorf("line %d is a %q log line without its receipt field (a string holding the envelope)", n, logMsgReceiptSigned)
		}
		out = append(out, exportedReceipt{where, []byte(env)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// checkChain verifies every receipt of namespace ns, those of its ToolCalls and the exported ones
// (receipts of other namespaces are left out), and checks that their chain runs from receipt 1 without
// a gap, a fork or a broken link.
func checkChain(ctx context.Context, ns string, tcs []tg.ToolCall, exported []exportedReceipt, keys []verifyKey, rep *report) {
	var all []*receipt.Verified
	bad, otherNS := 0, 0
	add := func(where string, envelope []byte) {
		v, err := verifyEnvelope(ctx, envelope, keys)
		if err != nil {
			rep.fail("chain: the receipt of %s: %v", where, err)
			bad++
			return
		}
		if v.Predicate.Chain.Namespace != ns {
			otherNS++
			return
		}
		all = append(all, v)
	}
	for i := range tcs {
		if r := tcs[i].Status.Receipt; r != nil {
			add("toolcall "+tcs[i].Name, []byte(r.Envelope))
		}
	}
	for _, e := range exported {
		add(e.where, e.envelope)
	}
	if otherNS > 0 {
		rep.note("chain: %d exported receipts of other namespaces left out", otherNS)
	}
	if len(all) == 0 {
		rep.fail("chain: no receipt of namespace %s verifies", ns)
		return
	}
	seen := map[string]bool{}
	var last int64
	for _, v := range all {
		seen[v.Digest] = true
		last = max(last, v.Predicate.Chain.Sequence)
	}
	problems := receipt.CheckChain(all, 1)
	for _, p := range problems {
		rep.fail("chain: %s", p)
	}
	switch {
	case len(problems) == 0 && bad == 0:
		rep.ok("chain: %d receipts of namespace %s checked, 1 to %d, without a gap, a fork or a broken link", len(seen), ns, last)
	default:
		rep.fail("chain: %d receipts of namespace %s checked, the last is %d: the chain is broken (see above)", len(seen), ns, last)
	}
	rep.note("chain: receipts after %d are not seen here: the chain head, ConfigMap toolgate-receipts.%s in the manager's namespace, names the last one signed", last, ns)
}
