//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
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
	g.Expect(err).To(MatchError(ContainSubstring("may not write the status of ToolCalls: only the Toolgate manager (system:serviceaccount:toolgate-system:toolgate-controller-manager, with its Pod's token)")))
}

// As a user who may only create Jobs and Pods in the namespace, no approved call can be made to show
// a result it did not produce, and none is kept from running without its ToolCall saying so: the
// installed execution-records policy refuses a Job that claims the call and a Pod that claims a Job; a
// Job that claims nothing but takes the call's Job name first runs (a real Pod), yet the approved call
// ends Failed (ForeignJob) without its result, saying so; and a call whose Job name is free runs the
// tool and reports the tool's own result.
func TestOnlyTheManagerMakesExecutionRecords(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workloads-create"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}},
	}}
	g.Expect(k8s.Create(ctx, role)).To(Succeed())
	g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jane"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}}})).To(Succeed())
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "jane", Groups: []string{"system:authenticated"}}
	jane, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane", Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "batch", Resource: "jobs"}}}
		g.Expect(k8s.Create(ctx, sar)).To(Succeed())
		g.Expect(sar.Status.Allowed).To(BeTrue())
	}).WithTimeout(stepTimeout).Should(Succeed())

	tc := submit(t, g, ns)
	// The sample Tool's own Pod spec (it passes the namespace's Pod security), running the echo tool
	// with arguments of jane's choosing.
	spec := sampleTool(t, ns).Spec.JobTemplate.Spec.Template.Spec.DeepCopy()
	spec.Containers[0].Image, spec.Containers[0].ImagePullPolicy = "localhost/toolgate/echo-tool:dev", corev1.PullNever
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOOL_ARGUMENTS", Value: `{"refund":"forged"}`}}
	forged := func(labels map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: toolcalls.JobName(tc), Labels: labels},
			Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: *spec.DeepCopy()}}}
	}
	g.Expect(jane.Create(ctx, forged(map[string]string{tg.LabelToolCallUID: string(tc.UID)}))).To(MatchError(And(
		ContainSubstring("user jane may not create a Job that claims a ToolCall"), ContainSubstring("label "+tg.LabelToolCallUID+"="+string(tc.UID)))))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged", Labels: map[string]string{tg.LabelToolCallUID: string(tc.UID)}}, Spec: *spec.DeepCopy()}
	g.Expect(jane.Create(ctx, pod)).To(MatchError(ContainSubstring("user jane may not create a Pod that claims a Job")))

	// The name alone, without a claim, is jane's to take: the approved call does not run, and says so.
	g.Expect(jane.Create(ctx, forged(nil))).To(Succeed())
	decide(g, tc, true, "5m")
	waitPhase(g, tc, tg.PhaseFailed, stepTimeout)
	g.Expect(tc.Status.Reason).To(Equal(tg.ReasonForeignJob))
	g.Expect(tc.Status.Result).To(BeEmpty())
	g.Expect(tc.Status.Message).To(ContainSubstring("The call did not run."))

	// A call whose Job name is free runs the tool, with the tool's own result.
	next := sampleToolCall(t, ns)
	next.Name += "-again"
	g.Expect(k8s.Create(ctx, next)).To(Succeed())
	waitPhase(g, next, tg.PhaseAwaitingApproval, stepTimeout)
	decide(g, next, true, "5m")
	waitPhase(g, next, tg.PhaseSucceeded, stepTimeout)
	expectReceipt(g, next)
	g.Expect(next.Status.JobUID).NotTo(BeEmpty())
}
