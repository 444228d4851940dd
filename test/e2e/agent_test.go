//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// An agent Pod, running as a ServiceAccount bound to config/rbac's toolgate-toolcall-agent and
// toolgate-call-issue-refund ClusterRoles, requests a refund from inside the cluster with
// `kubectl toolcall run` (pkg/toolcall on in-cluster credentials): the ToolCall records the
// ServiceAccount as its requester, and once a human approved, the agent prints the tool's result.
func TestAgentPodRequestsACallWithItsServiceAccount(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createTool(t, g, sampleTool(t, ns))

	g.Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "refund-agent", Namespace: ns}})).To(Succeed())
	for _, role := range []string{"toolgate-toolcall-agent", "toolgate-call-issue-refund"} {
		g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "refund-agent-" + role, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "refund-agent", Namespace: ns}},
		})).To(Succeed())
	}
	agent := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "refund-agent", Namespace: ns},
		Spec: corev1.PodSpec{
			ServiceAccountName: "refund-agent",
			RestartPolicy:      corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "agent",
				Image:           "localhost/toolgate/kubectl-toolcall:dev",
				ImagePullPolicy: corev1.PullNever,
				Args: []string{"run", "issue_refund", "--args", `{"payment_id":"payment_456","amount":1200,"currency":"EUR"}`,
					"--waiting-limit", "10m", "--name", "agent-refund"},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	g.Expect(k8s.Create(ctx, agent)).To(Succeed())

	// The agent's ToolCall, submitted for approval.
	tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Name: "agent-refund", Namespace: ns}}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(tc), tc)).To(Succeed())
		g.Expect(tc.Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
	}).WithTimeout(stepTimeout).Should(Succeed())
	g.Expect(tc.Spec.Requester).NotTo(BeNil())
	g.Expect(tc.Spec.Requester.Username).To(Equal("system:serviceaccount:" + ns + ":refund-agent"))

	decide(g, tc, true, "5m")
	g.Eventually(func(g Gomega) corev1.PodPhase {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
		return agent.Status.Phase
	}).WithTimeout(stepTimeout).Should(Equal(corev1.PodSucceeded), "kubectl toolcall run exits 0 once the call Succeeded")
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)

	cs, err := kubernetes.NewForConfig(restConfig)
	g.Expect(err).NotTo(HaveOccurred())
	logs, err := cs.CoreV1().Pods(ns).GetLogs(agent.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(logs)).To(ContainSubstring(tc.Status.Result), "the agent printed the tool's result")
	var receipt map[string]any
	g.Expect(json.Unmarshal([]byte(tc.Status.Result), &receipt)).To(Succeed())
	g.Expect(receipt).To(HaveKeyWithValue("payment_id", "payment_456"))
	g.Expect(receipt).To(HaveKeyWithValue("currency", "EUR"))
}
