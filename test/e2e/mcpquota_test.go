//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/mcpeverything"
)

// An MCP call in a namespace whose ResourceQuota asks every Pod for cpu and memory requests and
// limits, with no LimitRange to give them: a Pod without them is refused there, and the call's Pod
// is not, since the executor's container has default requests and limits. The MCPServer names no
// image: the manager's default (the chart's mcpServers.executorImage, here the mcp-call image of this
// checkout) runs the call, to Succeeded with the tool's own answer.
func TestMCPServerToolRunsInANamespaceWithAResourceQuota(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourceRequestsCPU: resource.MustParse("1"), corev1.ResourceRequestsMemory: resource.MustParse("1Gi"),
			corev1.ResourceLimitsCPU: resource.MustParse("2"), corev1.ResourceLimitsMemory: resource.MustParse("2Gi"),
		}},
	}
	g.Expect(k8s.Create(ctx, quota)).To(Succeed())
	// The quota is enforced once the quota controller has recorded what it allows.
	g.Eventually(func(g Gomega) corev1.ResourceList {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(quota), quota)).To(Succeed())
		return quota.Status.Hard
	}).WithTimeout(stepTimeout).Should(HaveLen(4))
	limitRanges := &corev1.LimitRangeList{}
	g.Expect(k8s.List(ctx, limitRanges, client.InNamespace(ns))).To(Succeed())
	g.Expect(limitRanges.Items).To(BeEmpty())
	bare := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-resources"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "localhost/toolgate/mcp-call:dev"}}},
	}
	err := k8s.Create(ctx, bare)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the quota refuses a Pod without requests and limits: %v", err)

	everything := mcpeverything.Start(t)
	calls := startCallRecorder(t, g, everything.URL, nodeAddress(g), false)
	toolName := exposeEcho(t, g, ns, "everything", calls.url, func(s *tg.MCPServer) { s.Spec.Executor.Image = "" })

	tc := &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "within-quota"},
		Spec: tg.ToolCallSpec{Tool: toolName, Arguments: mustRaw(g, map[string]string{"message": "within the quota"}),
			WaitingLimit: metav1.Duration{Duration: 10 * time.Minute}},
	}
	g.Expect(k8s.Create(ctx, tc)).To(Succeed())
	waitPhase(g, tc, tg.PhaseAwaitingApproval, stepTimeout)
	decide(g, tc, true, "10m")
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	g.Expect(tc.Status.Result).To(Equal("Echo: within the quota"))
	g.Expect(calls.count()).To(Equal(1))
	_, pods := jobsAndPods(g, tc)
	g.Expect(pods).To(HaveLen(1))
	c := pods[0].Spec.Containers[0]
	g.Expect(c.Image).To(Equal("localhost/toolgate/mcp-call:dev"), "the chart's default executor image")
	g.Expect(c.Resources.Requests.Cpu().String()).To(Equal(tg.DefaultExecutorCPURequest))
	g.Expect(c.Resources.Requests.Memory().String()).To(Equal(tg.DefaultExecutorMemoryRequest))
	g.Expect(c.Resources.Limits.Cpu().String()).To(Equal(tg.DefaultExecutorCPULimit))
	g.Expect(c.Resources.Limits.Memory().String()).To(Equal(tg.DefaultExecutorMemoryLimit))
}
