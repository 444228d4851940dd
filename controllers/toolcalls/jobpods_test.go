package toolcalls

import (
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpcall"
)

// toolPod is a Pod of the tool's Job with one init container and one container, in the given states.
func toolPod(initState, state corev1.ContainerState) corev1.Pod {
	return corev1.Pod{
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "fetch", Image: "localhost/fetch:1"}},
			Containers:     []corev1.Container{{Name: "tool", Image: "localhost/refund:1"}},
		},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "fetch", State: initState}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "tool", State: state}},
		},
	}
}

func waiting(reason string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "Back-off pulling image"}}
}

var (
	initialized = waiting("PodInitializing")
	ran         = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	running     = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
)

// The tool's container is reported as waiting for its image only while nothing of the tool can have
// run, and the reasons the kubelet alternates between while it retries are one problem.
func TestWaitingForImage(t *testing.T) {
	restarted := toolPod(ran, waiting("ImagePullBackOff"))
	restarted.Status.ContainerStatuses[0].RestartCount = 1
	earlier := toolPod(ran, waiting("ErrImagePull"))
	earlier.Status.InitContainerStatuses[0].State = waiting("ErrImagePull")
	earlier.Status.InitContainerStatuses[0].LastTerminationState = ran

	cases := []struct {
		name      string
		pods      []corev1.Pod
		jobFailed int32
		want      *imageWait
	}{
		{"no Pod yet", nil, 0, nil},
		{"an init container of the tool ran", []corev1.Pod{toolPod(ran, waiting("ErrImageNeverPull"))}, 0, nil},
		{"never pulled", []corev1.Pod{toolPod(corev1.ContainerState{}, waiting("ErrImageNeverPull"))}, 0,
			&imageWait{container: "tool", image: "localhost/refund:1", reason: "ErrImageNeverPull"}},
		{"the init container's image is missing", []corev1.Pod{toolPod(waiting("ErrImageNeverPull"), initialized)}, 0,
			&imageWait{container: "fetch", image: "localhost/fetch:1", reason: "ErrImageNeverPull"}},
		{"pull failed", []corev1.Pod{toolPod(waiting("ErrImagePull"), initialized)}, 0,
			&imageWait{container: "fetch", image: "localhost/fetch:1", reason: "ErrImagePull"}},
		{"backing off is the same problem", []corev1.Pod{toolPod(waiting("ImagePullBackOff"), initialized)}, 0,
			&imageWait{container: "fetch", image: "localhost/fetch:1", reason: "ErrImagePull"}},
		{"invalid name", []corev1.Pod{toolPod(waiting("InvalidImageName"), initialized)}, 0,
			&imageWait{container: "fetch", image: "localhost/fetch:1", reason: "InvalidImageName"}},
		{"creating, not an image problem", []corev1.Pod{toolPod(waiting("ContainerCreating"), initialized)}, 0, nil},
		{"a configuration error is not an image problem", []corev1.Pod{toolPod(waiting("CreateContainerConfigError"), initialized)}, 0, nil},
		{"running", []corev1.Pod{toolPod(ran, running)}, 0, nil},
		{"a restarted container may have run", []corev1.Pod{restarted}, 0, nil},
		{"a container that terminated before may have run", []corev1.Pod{earlier}, 0, nil},
		{"another Pod of the Job is running", []corev1.Pod{toolPod(waiting("ErrImageNeverPull"), initialized), toolPod(ran, running)}, 0, nil},
		{"an earlier Pod of the Job failed", []corev1.Pod{toolPod(waiting("ErrImageNeverPull"), initialized)}, 1, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			job := &batchv1.Job{Status: batchv1.JobStatus{Failed: c.jobFailed}}
			g.Expect(waitingForImage(job, c.pods)).To(Equal(c.want))
		})
	}
}

// The wait for an image keeps the call Running with an Executed condition that says neither that the
// tool ran nor that it did not; the outcome at the Job's deadline keeps the container and the image
// from that message.
func TestImageUnavailableStatus(t *testing.T) {
	g := NewWithT(t)
	tc := &tg.ToolCall{}
	tc.Generation = 1
	tc.Status.JobName = "refund-1-abc"
	w := &imageWait{container: "tool", image: "localhost/refund:1", reason: "ErrImageNeverPull"}

	imageUnavailable(tc, w)
	g.Expect(tc.Status).To(haveImageOutcome(tg.PhaseRunning, "Job refund-1-abc's container tool has not started: the node does not have image localhost/refund:1 "+
		"and the container's imagePullPolicy is Never (ErrImageNeverPull). The call was approved; the tool has not run, "+
		"and the Job's deadline ends the call unless the image becomes available."))
	executed := *meta.FindStatusCondition(tc.Status.Conditions, tg.ConditionExecuted)
	g.Expect(executed.Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(executed.Reason).To(Equal(tg.ReasonImageUnavailable))

	job := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{
		Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline",
	}}}}
	imageUnavailableFailed(tc, job)
	g.Expect(tc.Status).To(haveImageOutcome(tg.PhaseFailed, "The tool's Job failed (DeadlineExceeded: Job was active longer than specified deadline) before its "+
		"container started, so the tool did not run, as last reported by the kubelet. Job refund-1-abc's container tool has not "+
		"started: the node does not have image localhost/refund:1 and the container's imagePullPolicy is Never (ErrImageNeverPull)."))
	g.Expect(*meta.FindStatusCondition(tc.Status.Conditions, tg.ConditionExecuted)).To(Equal(executed), "the condition does not move, so the outcome does not rewrite it")
}

// Only a container seen running, or terminated after a start, ends a wait for an image: the Job's
// deadline kills a container that never started, and the kubelet reports it terminated without a
// start time.
func TestContainerStarted(t *testing.T) {
	startedAt := metav1.Now()
	killedWaiting := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown"}}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, StartedAt: startedAt}}
	restarted := toolPod(exited, waiting("ErrImagePull"))
	restarted.Status.ContainerStatuses[0].RestartCount = 2
	ranBefore := toolPod(initialized, waiting("ErrImagePull"))
	ranBefore.Status.InitContainerStatuses[0].LastTerminationState = exited

	cases := []struct {
		name string
		pods []corev1.Pod
		want bool
	}{
		{"no Pod", nil, false},
		{"waiting for the image", []corev1.Pod{toolPod(waiting("ErrImageNeverPull"), initialized)}, false},
		{"killed while waiting, never started", []corev1.Pod{toolPod(killedWaiting, killedWaiting)}, false},
		{"running", []corev1.Pod{toolPod(exited, running)}, true},
		{"the init container exited after a start", []corev1.Pod{toolPod(exited, initialized)}, true},
		{"restarted", []corev1.Pod{restarted}, true},
		{"terminated after a start before", []corev1.Pod{ranBefore}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(containerStarted(c.pods)).To(Equal(c.want))
		})
	}
}

// The cached Pod keeps what waitingForImage and containerStarted read, and nothing of the spec beyond
// the containers' names and images.
func TestSlimPodKeepsWhatThePodChecksRead(t *testing.T) {
	g := NewWithT(t)
	pod := toolPod(waiting("ErrImageNeverPull"), initialized)
	pod.Name, pod.Namespace, pod.Labels = "refund-1-abc-x", "demo", map[string]string{tg.LabelToolCallUID: "uid-1"}
	pod.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "refund-1-abc", Controller: ptr.To(true)}}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOOL_ARGUMENTS", Value: `{"amount":4900}`}}
	pod.Spec.NodeName = "node-1"

	got, err := SlimPod(&pod)
	g.Expect(err).NotTo(HaveOccurred())
	slim := got.(*corev1.Pod)
	job := &batchv1.Job{}
	g.Expect(waitingForImage(job, []corev1.Pod{*slim})).To(Equal(waitingForImage(job, []corev1.Pod{pod})))
	g.Expect(waitingForImage(job, []corev1.Pod{*slim})).NotTo(BeNil())
	g.Expect(containerStarted([]corev1.Pod{*slim})).To(BeFalse())
	g.Expect(metav1.GetControllerOf(slim).Name).To(Equal("refund-1-abc"))
	g.Expect(slim.Labels).To(Equal(pod.Labels))
	g.Expect(slim.ManagedFields).To(BeNil())
	g.Expect(slim.Spec.Containers[0].Env).To(BeNil(), "the tool's arguments are not kept")
	g.Expect(slim.Spec.NodeName).To(BeEmpty())
}

// haveImageOutcome matches a ToolCall status with phase, reason ImageUnavailable and message.
func haveImageOutcome(phase tg.ToolCallPhase, message string) OmegaMatcher {
	return And(
		HaveField("Phase", phase),
		HaveField("Reason", tg.ReasonImageUnavailable),
		HaveField("Message", message),
	)
}

// The Job of an MCPServer's Tool failed: mcpCallLost says the tool may have run unless mcp-call's own
// words settle it (the tool's error, "not called", "did not run"), or its container never started.
// It fails closed: a kill for memory, an eviction, a signal, a deadline that stopped a running
// container, a container the kubelet lost, a runtime crash (exit 2 without mcp-call's message) and
// an exit 3 all end ToolMayHaveRun.
func TestMCPCallLostFailsClosed(t *testing.T) {
	started := metav1.Now()
	term := func(exit int32, reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason, Message: msg, StartedAt: started}}
	}
	notCalled := "The call to echo could not be sent to the MCP server: dial tcp: connection refused. " + mcpcall.NotCalled
	refused := "The MCP server refused the call to echo (JSON-RPC error -32602): invalid params. " + mcpcall.DidNotRun
	for _, c := range []struct {
		name  string
		state corev1.ContainerState
		last  corev1.ContainerState
		other bool // the container is not mcp-call
		want  bool
	}{
		{"lost after sending (exit 3)", term(mcpcall.ExitMayHaveRun, "Error", "The connection ... the tool may have run."), corev1.ContainerState{}, false, true},
		{"not called (exit 2, its message)", term(mcpcall.ExitNotRun, "Error", notCalled), corev1.ContainerState{}, false, false},
		{"refused (exit 4, its message)", term(mcpcall.ExitRefused, "Error", refused), corev1.ContainerState{}, false, false},
		{"the tool's error (exit 1)", term(mcpcall.ExitToolError, "Error", "MCP error -32602: Input validation error"), corev1.ContainerState{}, false, false},
		{"killed for memory, no message", term(137, "OOMKilled", ""), corev1.ContainerState{}, false, true},
		{"killed for memory with exit 2", term(mcpcall.ExitNotRun, "OOMKilled", notCalled), corev1.ContainerState{}, false, true},
		{"Go runtime crash (exit 2, no message)", term(mcpcall.ExitNotRun, "Error", ""), corev1.ContainerState{}, false, true},
		{"exit 2 with another message", term(mcpcall.ExitNotRun, "Error", "fatal error: runtime: out of memory"), corev1.ContainerState{}, false, true},
		{"exit 4 without its message", term(mcpcall.ExitRefused, "Error", ""), corev1.ContainerState{}, false, true},
		{"signal (SIGTERM at eviction)", term(143, "Error", ""), corev1.ContainerState{}, false, true},
		{"exit 0 in a failed Job", term(0, "Completed", "Echo: hi"), corev1.ContainerState{}, false, true},
		{"running when the Job failed (deadline)", running, corev1.ContainerState{}, false, true},
		{"status unknown (node lost, Pod deleted)", corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: containerStatusUnknown}}, corev1.ContainerState{}, false, true},
		{"never started: still waiting", waiting("ContainerCreating"), corev1.ContainerState{}, false, false},
		{"never started: terminated without a start", corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}, corev1.ContainerState{}, false, false},
		{"restarted after a run that may have sent", term(mcpcall.ExitNotRun, "Error", notCalled), term(137, "OOMKilled", ""), false, true},
		{"another container killed for memory", term(137, "OOMKilled", ""), corev1.ContainerState{}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := mcpcall.Container
			if c.other {
				name = "tool"
			}
			pod := corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
				Name: name, State: c.state, LastTerminationState: c.last,
			}}}}
			if got := mcpCallLost([]corev1.Pod{pod}); got != c.want {
				t.Fatalf("mcpCallLost = %v, want %v", got, c.want)
			}
		})
	}
	// One Pod that may have sent is enough, whatever the others say.
	sent := corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: mcpcall.Container, State: term(137, "OOMKilled", "")}}}}
	said := corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: mcpcall.Container, State: term(mcpcall.ExitNotRun, "Error", notCalled)}}}}
	if !mcpCallLost([]corev1.Pod{said, sent}) {
		t.Fatal("a Pod killed for memory was outweighed by another that was not called")
	}
}

// A failed Job of an MCPServer's Tool whose Pods are gone (a lost node, a deletion) may have sent
// the call, once one of its Pods failed; a Job of another Tool, a Job with Pods to read, and a Job
// none of whose Pods failed say nothing so.
func TestMCPJobLostWithoutPods(t *testing.T) {
	mcpJob := func(failed int32) *batchv1.Job {
		j := &batchv1.Job{}
		j.Spec.Template.Spec.Containers = []corev1.Container{{Name: mcpcall.Container}}
		j.Status.Failed = failed
		return j
	}
	other := mcpJob(1)
	other.Spec.Template.Spec.Containers[0].Name = "tool"
	pod := corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: mcpcall.Container, State: waiting("ContainerCreating")}}}}
	for _, c := range []struct {
		name string
		job  *batchv1.Job
		pods []corev1.Pod
		want bool
	}{
		{"MCP Job, a Pod failed, Pods gone", mcpJob(1), nil, true},
		{"MCP Job, no Pod failed", mcpJob(0), nil, false},
		{"MCP Job with a Pod to read", mcpJob(1), []corev1.Pod{pod}, false},
		{"another Tool's Job", other, nil, false},
	} {
		if got := mcpJobLostWithoutPods(c.job, c.pods); got != c.want {
			t.Errorf("%s: mcpJobLostWithoutPods = %v, want %v", c.name, got, c.want)
		}
	}
}
