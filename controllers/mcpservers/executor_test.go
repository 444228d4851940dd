package mcpservers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/test/mcpeverything"
	th "toolgate.dev/toolgate/test/testharness"
)

// failMCPJob ends the Job of an MCPServer's Tool as the kubelet and the Job controller would once its
// mcp-call container, started, terminated in state.
func failMCPJob(h *th.Harness, jobName string, state corev1.ContainerStateTerminated, jobReason string) {
	h.T.Helper()
	now := metav1.Now()
	state.StartedAt, state.FinishedAt = now, now
	endMCPJob(h, jobName, state, jobReason)
}

// endMCPJob fails the Job of an MCPServer's Tool with jobReason, its Pod's mcp-call container
// terminated in state as given.
func endMCPJob(h *th.Harness, jobName string, state corev1.ContainerStateTerminated, jobReason string) {
	h.T.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	h.G.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: jobName}, job)).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: jobName + "-pod", Namespace: h.NS, Labels: job.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	h.G.Expect(h.K8s.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: mcpcall.Container, Image: "mcp-call:test",
		State: corev1.ContainerState{Terminated: &state}}}
	h.G.Expect(h.K8s.Status().Update(ctx, pod)).To(Succeed())
	now := metav1.Now()
	job.Status.StartTime, job.Status.Failed = &now, 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: jobReason},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: jobReason},
	}
	h.G.Expect(h.K8s.Status().Update(ctx, job)).To(Succeed())
}

// An mcp-call that died after it may have sent the call leaves no message of its own: killed for
// memory, stopped by the Job's deadline, lost with its node. Each ends ToolMayHaveRun, never as a
// plain failure that invites a retry; only mcp-call's own "not called" ends the call as not run.
func TestMCPExecutorKilledAfterSendingMayHaveRun(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	everything := mcpeverything.Start(t)
	mcpServer(h, everything.URL, []string{"echo"})
	waitToolReady(h, "everything--echo")

	notCalled := "The call to echo could not be sent to the MCP server: connection refused. " + mcpcall.NotCalled
	for _, c := range []struct {
		name      string
		state     corev1.ContainerStateTerminated
		jobReason string
		reason    string
	}{
		{"oom", corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}, "BackoffLimitExceeded", tg.ReasonToolMayHaveRun},
		{"deadline", corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}, "DeadlineExceeded", tg.ReasonToolMayHaveRun},
		{"node-lost", corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown"}, "BackoffLimitExceeded", tg.ReasonToolMayHaveRun},
		{"runtime-crash", corev1.ContainerStateTerminated{ExitCode: mcpcall.ExitNotRun, Reason: "Error"}, "BackoffLimitExceeded", tg.ReasonToolMayHaveRun},
		{"not-called", corev1.ContainerStateTerminated{ExitCode: mcpcall.ExitNotRun, Reason: "Error", Message: notCalled}, "BackoffLimitExceeded", tg.ReasonJobFailed},
	} {
		h.ToolCall(c.name, "everything__echo", `{"message":"x"}`, 2*time.Minute, nil)
		h.Approve(h.PendingRequest(c.name).ID, 5*time.Minute)
		running := h.WaitPhase(c.name, tg.PhaseRunning)
		failMCPJob(h, running.Status.JobName, c.state, c.jobReason)
		done := h.WaitPhase(c.name, tg.PhaseFailed)
		g.Expect(done.Status.Reason).To(Equal(c.reason), c.name)
		g.Expect(done.Status.Result).To(Equal(c.state.Message), c.name)
	}
}

// How the calls' Pods run is the MCPServer author's: an MCPServer that names no image gets the
// manager's --mcp-executor-image, the deprecated spec.executorImage still wins over it, and the
// executor's container gets default requests and limits (a ResourceQuota namespace accepts its Pods
// without a LimitRange). spec.executor's image, resources, pull secrets and scheduling reach the
// generated Tools and the approved call's Job, each Tool alike: nothing the server lists changes
// them. Without any image, the MCPServer is Stalled and says what to set.
func TestMCPExecutorSettingsReachTheJob(t *testing.T) {
	const managerDefault = "registry.example.com/toolgate/mcp-call:v9.9.9"
	h := th.New(t, env, func(h *th.Harness) { h.Opts.MCP.ExecutorImage = managerDefault })
	g := h.G
	everything := mcpeverything.Start(t)
	srv := mcpServer(h, everything.URL, []string{"echo", "get-sum"}, func(s *tg.MCPServer) { s.Spec.ExecutorImage = "" })
	waitToolReady(h, "everything--echo")
	podOf := func(g Gomega, tool string) corev1.PodSpec {
		return getTool(g, h, tool).Spec.JobTemplate.Spec.Template.Spec
	}
	pod := podOf(g, "everything--echo")
	g.Expect(pod.Containers[0].Image).To(Equal(managerDefault), "the manager's default image")
	g.Expect(quantities(pod.Containers[0].Resources.Requests)).To(Equal(map[string]string{"cpu": "10m", "memory": "32Mi"}), "the default requests")
	g.Expect(quantities(pod.Containers[0].Resources.Limits)).To(Equal(map[string]string{"cpu": "500m", "memory": "128Mi"}), "the default limits")
	g.Expect(pod.ImagePullSecrets).To(BeEmpty())
	g.Expect(pod.NodeSelector).To(BeEmpty())
	g.Expect(pod.Tolerations).To(BeEmpty())
	g.Expect(pod.Affinity).To(BeNil())
	g.Expect(pod.PriorityClassName).To(BeEmpty())

	// The deprecated field names the image when spec.executor.image does not.
	editServer(h, srv, func(s *tg.MCPServer) { s.Spec.ExecutorImage = "mcp-call:deprecated-field" })
	g.Eventually(func(g Gomega) string { return podOf(g, "everything--echo").Containers[0].Image }).Should(Equal("mcp-call:deprecated-field"))

	executor := tg.MCPExecutor{
		Image: "registry.example.com/team/mcp-call@sha256:" + strings.Repeat("a", 64),
		Resources: &tg.MCPExecutorResources{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "team-registry"}},
		NodeSelector:      map[string]string{"pool": "egress"},
		Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "egress", Effect: corev1.TaintEffectNoSchedule}},
		PriorityClassName: "agents-low",
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}}}}}}}},
	}
	editServer(h, srv, func(s *tg.MCPServer) { s.Spec.ExecutorImage, s.Spec.Executor = "", executor })
	expectExecutor := func(g Gomega, pod corev1.PodSpec) {
		g.Expect(pod.Containers).To(HaveLen(1))
		g.Expect(pod.Containers[0].Image).To(Equal(executor.Image))
		g.Expect(quantities(pod.Containers[0].Resources.Requests)).To(Equal(map[string]string{"cpu": "50m", "memory": "64Mi"}))
		g.Expect(quantities(pod.Containers[0].Resources.Limits)).To(Equal(map[string]string{"cpu": "1", "memory": "256Mi"}))
		g.Expect(pod.ImagePullSecrets).To(Equal(executor.ImagePullSecrets))
		g.Expect(pod.NodeSelector).To(Equal(executor.NodeSelector))
		g.Expect(pod.Tolerations).To(Equal(executor.Tolerations))
		g.Expect(pod.Affinity).To(Equal(executor.Affinity))
		g.Expect(pod.PriorityClassName).To(Equal(executor.PriorityClassName))
		// What keeps the executor contained is not the author's to change.
		g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
		g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
		g.Expect(*pod.Containers[0].SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	}
	for _, tool := range []string{"everything--echo", "everything--get-sum"} {
		g.Eventually(func(g Gomega) { expectExecutor(g, podOf(g, tool)) }).Should(Succeed(), tool)
	}
	waitToolReady(h, "everything--echo")

	h.ToolCall("echo", "everything__echo", `{"message":"x"}`, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("echo").ID, 5*time.Minute)
	h.WaitPhase("echo", tg.PhaseRunning)
	jobs := h.Jobs()
	g.Expect(jobs).To(HaveLen(1))
	expectExecutor(g, jobs[0].Spec.Template.Spec)
}

// Without an image of its own or the manager's, an MCPServer generates no Tool and says what to set;
// spec.executor.image set, it does. An image that is not a reference is refused by name.
func TestMCPExecutorWithoutAnImageStalls(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	everything := mcpeverything.Start(t)
	srv := mcpServer(h, everything.URL, []string{"echo"}, func(s *tg.MCPServer) { s.Spec.ExecutorImage = "" })
	message := func(g Gomega) string {
		got := &tg.MCPServer{}
		g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, tg.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(c.Reason).To(Equal(tg.ReasonInvalidMCPServerSpec))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, tg.ConditionStalled)).To(BeTrue())
		return c.Message
	}
	g.Eventually(message).Should(And(ContainSubstring("spec.executor.image is not set"), ContainSubstring("--mcp-executor-image")))
	g.Expect(generatedTools(g, h, "everything")).To(BeEmpty())

	editServer(h, srv, func(s *tg.MCPServer) { s.Spec.Executor.Image = "Not An Image" })
	g.Eventually(message).Should(ContainSubstring(`spec.executor.image "Not An Image" is not an image reference`))

	editServer(h, srv, func(s *tg.MCPServer) { s.Spec.Executor.Image = "mcp-call:own" })
	waitToolReady(h, "everything--echo")
	g.Expect(getTool(g, h, "everything--echo").Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image).To(Equal("mcp-call:own"))
}

// quantities is l as its canonical strings, by resource name.
func quantities(l corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for name, q := range l {
		out[string(name)] = q.String()
	}
	return out
}

// editServer changes the MCPServer's spec with a merge patch, which the manager's status writes do
// not conflict with.
func editServer(h *th.Harness, srv *tg.MCPServer, edit func(*tg.MCPServer)) {
	h.T.Helper()
	ctx := context.Background()
	h.G.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(srv), srv)).To(Succeed())
	base := srv.DeepCopy()
	edit(srv)
	h.G.Expect(h.K8s.Patch(ctx, srv, client.MergeFrom(base))).To(Succeed())
}
