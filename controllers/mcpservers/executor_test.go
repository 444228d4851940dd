package mcpservers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
