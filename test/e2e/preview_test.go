//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// ledgerConfigMap is the refund demo's fake payments ledger (config/samples' Tool mounts it).
func ledgerConfigMap(ns, customer string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "issue-refund-demo-ledger", Namespace: ns},
		Data: map[string]string{"ledger.json": `{"payment_123": {"charge": "ch_1001", "customer": "` + customer + `"}}`}}
}

// The sample refund Tool's preview runs in a real Pod before anyone is asked; the approver's request
// carries what it said (to whom, from which charge) with its digest; and when the world changed
// between the preview and the approval, the tool refuses to act on the stale preview, and the call
// fails in the tool's words.
func TestRefundPreviewReachesTheApproverAndAStalePreviewIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	ledger := ledgerConfigMap(ns, "cus_ada")
	g.Expect(k8s.Create(ctx, ledger)).To(Succeed())
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)

	previews, pods := previewJobs(g, tc)
	g.Expect(previews).To(HaveLen(1))
	g.Expect(pods).NotTo(BeEmpty(), "the preview ran in a real Pod")
	jobs, _ := jobsAndPods(g, tc)
	g.Expect(jobs).To(BeEmpty(), "nothing ran the tool before a human approved")

	rec := tc.Status.Preview
	g.Expect(rec).NotTo(BeNil())
	g.Expect(rec.Format).To(Equal(tg.PreviewFormatJSON))
	sum := sha256.Sum256([]byte(rec.Output))
	g.Expect(rec.Digest).To(Equal("sha256:" + hex.EncodeToString(sum[:])))
	g.Expect(rec.ImageID).NotTo(BeEmpty(), "the kubelet's image of the preview is recorded")
	var said map[string]any
	g.Expect(json.Unmarshal([]byte(rec.Output), &said)).To(Succeed())
	g.Expect(said).To(And(HaveKeyWithValue("customer", "cus_ada"), HaveKeyWithValue("charge", "ch_1001"),
		HaveKeyWithValue("amount", BeNumerically("==", 4900))))

	req := providerRequest(g, tc.Status.RequestID)
	rc, ok := req["context"].(map[string]any)
	g.Expect(ok).To(BeTrue(), "the request carries a context: %v", req)
	p, ok := rc["preview"].(map[string]any)
	g.Expect(ok).To(BeTrue(), "the context carries the preview: %v", rc)
	g.Expect(p).To(And(HaveKeyWithValue("source", "tool"), HaveKeyWithValue("format", "json"), HaveKeyWithValue("digest", rec.Digest)))
	g.Expect(p["output"]).To(HaveKeyWithValue("customer", "cus_ada"))

	// The payment moves to another customer after the approver saw the preview.
	ledger.Data["ledger.json"] = `{"payment_123": {"charge": "ch_1001", "customer": "cus_bob"}}`
	g.Expect(k8s.Update(ctx, ledger)).To(Succeed())
	decide(g, tc, true, "5m")
	waitPhase(g, tc, tg.PhaseFailed, stepTimeout)
	g.Expect(tc.Status.Result).To(ContainSubstring("refused: the payment changed since the preview the approver saw"))
	jobs, _ = jobsAndPods(g, tc)
	g.Expect(jobs).To(HaveLen(1))
	env := map[string]string{}
	for _, e := range jobs[0].Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	g.Expect(env).To(HaveKeyWithValue(tg.PreviewDigestEnv, rec.Digest))
}
