package receipt

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// typical is the predicate of an approved refund that ran: a ServiceAccount requester, a provider
// object, one container.
func typical() *Predicate {
	at := "2026-12-07T10:00:00Z"
	return &Predicate{
		ToolCall: ToolCall{Namespace: "payments", Name: "refund-7f3a9", UID: "0b6f3c1e-5d0a-4b8e-9a57-3f1f0c2d9e41", CreatedAt: at,
			Requester: &Requester{Username: "system:serviceaccount:payments:refund-agent", UID: "5f0d0f0e-8c1a-4f5b-b7a2-1d2e3f4a5b6c",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:payments", "system:authenticated"}}},
		Tool: Tool{ToolName: "issue_refund", Name: "issue-refund", UID: "9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d", Generation: 3,
			SpecDigest: "sha256:" + Sha256([]byte("spec"))},
		Outcome: Outcome{Phase: "Succeeded", Reason: "JobSucceeded", Message: "The tool ran and succeeded.", Ran: true},
		Decision: &Decision{By: "human", Status: "approved", RequestID: "req_01JEXAMPLE7Z8Y9X0W1V2U3T4S",
			IdempotencyKey: "0b6f3c1e-5d0a-4b8e-9a57-3f1f0c2d9e41", DecidedAt: at, ExpiresAt: at, ResponseDigest: "sha256:" + Sha256([]byte("r")),
			Provider: &Provider{Kind: "ApprovalProvider", Namespace: "payments", Name: "default", URL: "https://approvals.example.com/api/aap"}},
		Execution: &Execution{JobName: "refund-7f3a9-4c1d2e3f4a", JobUID: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", PodName: "refund-7f3a9-4c1d2e3f4a-x7k2p",
			PodUID: "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e", NodeName: "node-a",
			Containers: []Container{{Name: "tool", Image: "registry.example.com/payments/issue-refund:1.4.2",
				ImageID:     "registry.example.com/payments/issue-refund@sha256:" + Sha256([]byte("i")),
				ImageDigest: "sha256:" + Sha256([]byte("i")), StartedAt: at, FinishedAt: at, ExitCode: ptr.To[int32](0)}}},
		Signer: Signer{ManagerVersion: "0.1.0", SignedAt: at},
		Chain:  Chain{Namespace: "payments", Sequence: 1042, Previous: "sha256:" + Sha256([]byte("p"))},
	}
}

var benchArgs = []byte(`{"charge_id":"ch_3PqZx2LkdIwHu7ix0b8w1ZyA","amount":4999,"currency":"usd","reason":"duplicate"}`)

// BenchmarkReceipt is the manager's cost of one receipt: building the canonical Statement and signing
// it. It reports the envelope's size and the bytes the receipt and the execution record add to the
// ToolCall's status (as JSON, as the apiserver stores it).
func BenchmarkReceipt(b *testing.B) {
	for name, gen := range map[string]func() ([]byte, error){"ecdsa-p256": GenerateECDSA, "ed25519": GenerateEd25519} {
		b.Run(name, func(b *testing.B) {
			priv, err := gen()
			if err != nil {
				b.Fatal(err)
			}
			k, err := ParseKey(priv)
			if err != nil {
				b.Fatal(err)
			}
			p := typical()
			p.Signer.KeyID = KeyID(k)
			var env []byte
			b.ReportAllocs()
			for b.Loop() {
				st, err := Statement(benchArgs, []byte(`{"refund_id":"re_3PqZx2LkdIwHu7ix1c9v"}`), p)
				if err != nil {
					b.Fatal(err)
				}
				if env, err = Sign(context.Background(), k, st); err != nil {
					b.Fatal(err)
				}
			}
			now := metav1.NewTime(time.Now())
			added, _ := json.Marshal(struct {
				Receipt   tg.Receipt   `json:"receipt"`
				Execution tg.Execution `json:"execution"`
				Digest    string       `json:"responseDigest"`
			}{
				Receipt: tg.Receipt{Envelope: string(env), Digest: "sha256:" + Sha256(env), Sequence: 1042, Previous: p.Chain.Previous, KeyID: p.Signer.KeyID},
				Execution: tg.Execution{PodName: p.Execution.PodName, PodUID: "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e", NodeName: "node-a",
					Containers: []tg.ExecutedContainer{{Name: "tool", Image: p.Execution.Containers[0].Image, ImageID: p.Execution.Containers[0].ImageID,
						StartedAt: &now, FinishedAt: &now, ExitCode: ptr.To[int32](0)}}},
				Digest: p.Decision.ResponseDigest,
			})
			b.ReportMetric(float64(len(env)), "envelope-bytes")
			b.ReportMetric(float64(len(added)), "status-bytes-added")
		})
	}
}
