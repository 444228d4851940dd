//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// echoTool is the sample Tool running the suite's echo tool (test/e2e/echotool), with env of its own
// that a $(VAR) in the arguments would otherwise expand to.
func echoTool(t *testing.T, ns string) *tg.Tool {
	tool := sampleTool(t, ns, corev1.EnvVar{Name: "PAYMENTS_API_KEY", Value: "sk_live_s3cr3t"})
	tool.Name, tool.Spec.ToolName = "echo-arguments", "echo_arguments"
	tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(`{"type":"object","required":["text"]}`)}
	c := &tool.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	c.Name, c.Image = "echo", "localhost/toolgate/echo-tool:dev"
	return tool
}

// What a human approved is exactly what runs: the kubelet expands $(VAR) and turns $$ into $ in env
// values, yet the tool's container receives TOOL_ARGUMENTS byte for byte as the ToolCall holds them:
// references to the Tool's own env and Toolgate's, escapes, backslashes, Unicode and the largest
// integers a JSON number carries exactly.
func TestArgumentsReachTheToolByteForByte(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	createTool(t, g, echoTool(t, ns))
	args := map[string]any{
		"text":   "$(PAYMENTS_API_KEY) $$x $(TOOL_NAME) $$(TOOLCALL_UID) $ $$$ ${HOME} $(",
		"paths":  []any{`C:\Users\$(USER)`, `\$(TOOL_NAME)`, "\\\"quoted\\\""},
		"intl":   "refund für Zoë: 4900 ¥, 😀, \u2028 and \t tab",
		"big":    json.Number("9007199254740992"),
		"small":  json.Number("-9007199254740991"),
		"float":  json.Number("-1.5e-7"),
		"$(KEY)": map[string]any{"$$": "$(PAYMENTS_API_KEY)"},
	}
	raw, err := json.Marshal(args)
	g.Expect(err).NotTo(HaveOccurred())
	tc := sampleToolCall(t, ns)
	tc.Spec.Tool = "echo_arguments"
	tc.Spec.Arguments = runtime.RawExtension{Raw: raw}
	g.Expect(k8s.Create(context.Background(), tc)).To(Succeed())
	waitPhase(g, tc, tg.PhaseAwaitingApproval, stepTimeout)
	approved := providerRequest(g, tc.Status.RequestID)["arguments"]

	decide(g, tc, true, "5m")
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	g.Expect(tc.Status.Result).To(Equal(string(tc.Spec.Arguments.Raw)), "the container received the ToolCall's arguments byte for byte")
	g.Expect(tc.Status.Result).To(MatchJSON(raw))
	g.Expect(tc.Status.Result).NotTo(ContainSubstring("sk_live_s3cr3t"))
	shown, err := json.Marshal(approved)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tc.Status.Result).To(MatchJSON(shown), "what the approver was shown is what ran")
}

// The installed writers policy names the manager's ServiceAccount as config/default installs it: the
// manager writes status (every other test shows it), and a cluster admin's kubeconfig cannot.
func TestOnlyTheManagerWritesToolCallStatus(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	tc := submit(t, g, ns)
	tc.Status.Phase = tg.PhasePending
	tc.Status.Decision = &tg.Decision{Status: "approved", Source: tg.DecisionSourcePolicy, Rule: "anything"}
	err := k8s.Status().Update(context.Background(), tc)
	g.Expect(err).To(MatchError(ContainSubstring("may not write the status of ToolCalls: only the Toolgate manager (system:serviceaccount:toolgate-system:toolgate-controller-manager)")))
}
