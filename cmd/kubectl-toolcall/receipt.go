package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/receipt"
)

const receiptSynopsis = "kubectl toolcall receipt NAME [--arguments FILE] [--result FILE]"

// receipt writes a ToolCall's receipt envelope to stdout, exactly as status.receipt.envelope holds it:
// the file cosign verify-blob-attestation reads as --signature.
func (c *cli) receipt(ctx context.Context, args []string) error {
	fs := c.flags("receipt")
	argsFile := fs.String("arguments", "", "Also write the call's arguments in canonical form (RFC 8785) to FILE: the blob cosign checks the receipt's arguments subject against.")
	resultFile := fs.String("result", "", "Also write status.result, byte for byte, to FILE: the blob cosign checks the receipt's result subject against (a call that ran only).")
	help, err := c.parse("receipt", fs, args, receiptSynopsis)
	if help || err != nil {
		return err
	}
	if len(fs.Args()) != 1 {
		return usagef("receipt", "receipt takes exactly one NAME, got %d arguments", len(fs.Args()))
	}
	name := fs.Args()[0]
	_, _, tc, err := c.connectToReceipt(ctx, name)
	if err != nil {
		return err
	}
	if *resultFile != "" && !ran(tc) {
		return fmt.Errorf("toolcall %s did not run (%s): its receipt binds no result; leave out --result", name, tc.Status.Phase)
	}
	if *argsFile != "" {
		canon, err := receipt.CanonicalArguments(tc.Spec.Arguments.Raw)
		if err != nil {
			return fmt.Errorf("toolcall %s: %w", name, err)
		}
		if err := os.WriteFile(*argsFile, canon, 0o644); err != nil {
			return fmt.Errorf("--arguments: %w", err)
		}
	}
	if *resultFile != "" {
		if err := os.WriteFile(*resultFile, []byte(tc.Status.Result), 0o644); err != nil {
			return fmt.Errorf("--result: %w", err)
		}
	}
	_, err = fmt.Fprint(c.stdout, tc.Status.Receipt.Envelope)
	return err
}

// connectToReceipt connects to the cluster and reads the ToolCall name of the current namespace,
// which must have ended and hold its receipt.
func (c *cli) connectToReceipt(ctx context.Context, name string) (client.WithWatch, string, *tg.ToolCall, error) {
	cl, ns, err := c.connect()
	if err != nil {
		return nil, "", nil, err
	}
	tc, err := receiptOf(ctx, cl, ns, name)
	return cl, ns, tc, err
}

// receiptOf reads the ToolCall name, which must have ended and hold its receipt.
func receiptOf(ctx context.Context, cl client.Reader, ns, name string) (*tg.ToolCall, error) {
	tc := &tg.ToolCall{}
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, tc); err != nil {
		return nil, notFound(err, name, ns)
	}
	if !tc.Status.Phase.IsTerminal() {
		return nil, fmt.Errorf("toolcall %s has not ended (phase %s): its receipt is signed when it ends; wait for it with 'kubectl toolcall wait %s'", name, tc.Status.Phase.OrPending(), name)
	}
	if tc.Status.Receipt == nil || tc.Status.Receipt.Envelope == "" {
		return nil, fmt.Errorf("toolcall %s ended (%s) but holds no receipt yet: the manager signs it right after the end; try again in a moment, and if it stays without one read the manager's log (docs/receipts.md)", name, tc.Status.Phase)
	}
	return tc, nil
}

// ran reports whether the call's Job was created, as the manager decides it for the receipt's
// outcome.ran: only then does the receipt bind a result.
func ran(tc *tg.ToolCall) bool { return tc.Status.JobName != "" && tc.Status.JobUID != "" }
