// Command issue-refund is the demo tool of the sample Tool (config/samples): the container a
// ToolCall for issue_refund runs once a human approved it. It reads the call from the environment
// Toolgate sets on the Job (TOOL_NAME, TOOL_ARGUMENTS, TOOLCALL_NAME, TOOLCALL_UID), checks the
// arguments, prints a receipt, and writes the receipt as JSON to /dev/termination-log, which Toolgate
// copies into the ToolCall's status.result. It moves no money: it is a stand-in for a payments API.
//
// Bad arguments end it with exit code 2 and the reason in the termination log, so the ToolCall ends
// Failed with that reason. ISSUE_REFUND_DELAY (a Go duration, e.g. 20s) makes it wait that long
// before issuing, as a slow payments API would.
//
// The sample Tool has a preview (docs/previews.md), so the same program runs twice per call:
//
//   - TOOLGATE_MODE=preview, in the preview Job before anyone is asked: it looks the payment up
//     (a fake lookup, see lookup in preview.go) and writes, as one JSON object, what it would refund,
//     to whom and from which charge. That is what the approver sees. It refunds nothing.
//   - TOOLGATE_MODE=execute, in the execution Job once approved: when TOOLGATE_PREVIEW_DIGEST is set
//     it computes the preview again, and refuses (exit code 1) if its digest is not the one the
//     approver saw; otherwise it issues the refund as without a mode.
//
// Without TOOLGATE_MODE (a Tool without a preview) it issues the refund with no lookup.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// terminationLog is where Kubernetes reads a container's termination message (the Pod's
// terminationMessagePath); TERMINATION_LOG overrides it for running the program outside a Pod.
const terminationLog = "/dev/termination-log"

type arguments struct {
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
}

type receipt struct {
	RefundID  string `json:"refund_id"`
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Status    string `json:"status"`
}

func main() {
	path := os.Getenv("TERMINATION_LOG")
	if path == "" {
		path = terminationLog
	}
	os.Exit(run(os.Getenv, os.Stdout, path))
}

// run performs one call and returns the exit code.
func run(getenv func(string) string, stdout io.Writer, terminationPath string) int {
	say := func(line string) { fmt.Fprintln(stdout, line) }
	mode := getenv(modeEnv)
	switch mode {
	case "", "execute":
	case "preview":
		return runPreview(getenv, say, terminationPath)
	default:
		return fail(say, terminationPath, 2, fmt.Sprintf("%s is %q: Toolgate sets preview or execute, or nothing for a Tool without a preview", modeEnv, mode))
	}
	if d := getenv("ISSUE_REFUND_DELAY"); d != "" {
		delay, err := time.ParseDuration(d)
		if err != nil || delay < 0 {
			return fail(say, terminationPath, 2, fmt.Sprintf("ISSUE_REFUND_DELAY %q is not a duration such as 20s", d))
		}
		fmt.Fprintf(stdout, "waiting %s before issuing the refund (ISSUE_REFUND_DELAY)\n", delay)
		time.Sleep(delay)
	}
	if mode == "execute" {
		// Checked after the delay, as close as the demo gets to the refund itself.
		if want := getenv(digestEnv); want != "" {
			if code := checkPreview(getenv, say, terminationPath, want); code != 0 {
				return code
			}
		} else {
			say("no preview digest: the preview failed and the Tool asked a human anyway; issuing without comparing")
		}
	}
	r, err := refund(getenv("TOOL_ARGUMENTS"), getenv("TOOLCALL_UID"))
	if err != nil {
		return fail(say, terminationPath, 2, err.Error())
	}
	out, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(stdout, "issue_refund:", err)
		return 1
	}
	fmt.Fprintf(stdout, "refund %s issued for ToolCall %s: %d %s back to payment %s\n",
		r.RefundID, getenv("TOOLCALL_NAME"), r.Amount, r.Currency, r.PaymentID)
	if err := os.WriteFile(terminationPath, out, 0o644); err != nil {
		fmt.Fprintln(stdout, "issue_refund: writing the result:", err)
		return 1
	}
	return 0
}

// refund checks the arguments and returns the receipt. The refund id is derived from the ToolCall
// UID, so a second run of the same call would name the same refund.
func refund(rawArgs, toolCallUID string) (receipt, error) {
	a, err := parseArguments(rawArgs)
	if err != nil {
		return receipt{}, err
	}
	sum := sha256.Sum256([]byte(toolCallUID + "/" + a.PaymentID))
	return receipt{
		RefundID:  "rf_" + hex.EncodeToString(sum[:6]),
		PaymentID: a.PaymentID,
		Amount:    a.Amount,
		Currency:  a.Currency,
		Status:    "issued",
	}, nil
}

// parseArguments reads and checks TOOL_ARGUMENTS.
func parseArguments(rawArgs string) (arguments, error) {
	if rawArgs == "" {
		return arguments{}, errors.New("TOOL_ARGUMENTS is empty: run this program as a Toolgate Tool's container")
	}
	dec := json.NewDecoder(strings.NewReader(rawArgs))
	dec.DisallowUnknownFields()
	var a arguments
	if err := dec.Decode(&a); err != nil {
		return arguments{}, fmt.Errorf("TOOL_ARGUMENTS is not {\"payment_id\": string, \"amount\": integer, \"currency\": string}: %w", err)
	}
	switch {
	case a.PaymentID == "":
		return arguments{}, errors.New("arguments.payment_id is empty: name the payment to refund")
	case a.Amount <= 0:
		return arguments{}, fmt.Errorf("arguments.amount is %d: give the amount in minor units, greater than 0", a.Amount)
	case a.Currency != "GBP" && a.Currency != "EUR" && a.Currency != "USD":
		return arguments{}, fmt.Errorf("arguments.currency is %q: use GBP, EUR or USD", a.Currency)
	}
	return a, nil
}
