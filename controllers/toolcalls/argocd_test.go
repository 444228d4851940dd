package toolcalls

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/test/argohealth"
)

// argoHealth runs the ToolCall health check of config/argocd as Argo CD does over tc.
func argoHealth(g Gomega, script string, tc *tg.ToolCall) argohealth.Status {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc)
	g.Expect(err).NotTo(HaveOccurred())
	st, err := argohealth.Run(script, raw)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

// The ToolCall health check of config/argocd, run by Argo CD's Lua interpreter over a ToolCall in
// every row of the outcome table: Progressing while the call is under way, Healthy once it
// succeeded, Degraded for every other outcome, with the phase, reason and message to say why.
func TestArgoCDHealthFollowsEveryOutcome(t *testing.T) {
	script, err := argohealth.Script("ToolCall")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, row := range lifecycle.Rows() {
		t.Run(string(row.Phase)+"/"+row.Reason, func(t *testing.T) {
			g := NewWithT(t)
			tc := &tg.ToolCall{}
			tc.Name, tc.Generation = "refund", 1
			setPhase(tc, row.Phase, row.Reason, "The message.")
			got := argoHealth(g, script, tc)
			switch {
			case !row.Phase.IsTerminal():
				g.Expect(got.Status).To(Equal("Progressing"))
			case row.Phase == tg.PhaseSucceeded:
				g.Expect(got.Status).To(Equal("Healthy"))
			default:
				g.Expect(got.Status).To(Equal("Degraded"))
			}
			g.Expect(got.Message).To(Equal(string(row.Phase) + " (" + row.Reason + "): The message."))
		})
	}
	g := NewWithT(t)
	g.Expect(argoHealth(g, script, &tg.ToolCall{}).Status).To(Equal("Progressing"), "a ToolCall the controller has not written yet")
}
