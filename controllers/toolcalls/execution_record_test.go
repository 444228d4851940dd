package toolcalls_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	th "toolgate.dev/toolgate/test/testharness"
)

// The execution record (docs/security.md): a Job under a call's Job name, or a Pod its Job counts,
// that someone other than the manager and the Job controller made never speaks for the call. The
// manager defends itself here without the admission policies (test/admission tests those), as a user
// with only `create jobs` and `create pods` in the namespace would attack it.

// forgedJob is the Job an attacker who read the ToolCall creates under its Job name, with its labels,
// an owner reference to it, and a Pod template that runs something else.
func forgedJob(h *th.Harness, tc *tg.ToolCall, annotations map[string]string) *batchv1.Job {
	h.T.Helper()
	// The forger acts while the manager runs, after it made its key when it started
	// (TestExecutionKeyIsMadeWhenTheManagerStarts).
	h.G.Eventually(func() error {
		return h.K8s.Get(context.Background(), client.ObjectKey{Namespace: h.NS, Name: toolcalls.ExecutionKeySecret}, &corev1.Secret{})
	}).Should(Succeed())
	labels := map[string]string{tg.LabelToolCallUID: string(tc.UID), tg.LabelToolCallName: tc.Name, tg.LabelToolName: tc.Spec.Tool}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: toolcalls.JobName(tc), Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: tg.GroupVersion.String(), Kind: "ToolCall", Name: tc.Name, UID: tc.UID}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "tool", Image: "example.com/forged:1", Command: []string{"/forged"}}}},
		}},
	}
	h.G.Expect(h.K8s.Create(context.Background(), job)).To(Succeed())
	return job
}

// finishWithResult plays the Job controller and the kubelet for pod, owned by job: the Pod succeeded
// with result as its termination message, and the Job is Complete.
func finishWithResult(h *th.Harness, job *batchv1.Job, pod *corev1.Pod, result string) {
	h.T.Helper()
	ctx := context.Background()
	g := h.G
	pod.Namespace = h.NS
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
	g.Expect(h.K8s.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: result}}}}
	g.Expect(h.K8s.Status().Update(ctx, pod)).To(Succeed())
	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
	now := metav1.Now()
	job.Status.StartTime, job.Status.CompletionTime, job.Status.Succeeded = &now, &now, 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	g.Expect(h.K8s.Status().Update(ctx, job)).To(Succeed())
}

// warningsAbout returns the events of the ToolCall with reason whose related object is named related.
func warningsAbout(h *th.Harness, tcName, reason, related string) func() []eventsv1.Event {
	return func() []eventsv1.Event {
		list := &eventsv1.EventList{}
		h.G.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.Name == tcName && e.Reason == reason && e.Type == corev1.EventTypeWarning && e.Related != nil && e.Related.Name == related {
				out = append(out, e)
			}
		}
		return out
	}
}

// A Job created before the approval, under the call's Job name and with its labels, is not the call's
// run: the approved call ends Failed (ForeignJob) without running, says so, and an event names the
// Job; the result the forged Job's Pod reports never reaches the ToolCall.
func TestJobCreatedInAdvanceIsNotTheCallsRecord(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	tc := h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	job := forgedJob(h, tc, nil)
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged-pod", Labels: job.Spec.Template.Labels}, Spec: *job.Spec.Template.Spec.DeepCopy()}
	finishWithResult(h, job, forged, `{"refund":"forged"}`)

	h.Approve(req.ID, 5*time.Minute)
	failed := h.WaitPhase("refund", tg.PhaseFailed)
	g.Expect(failed.Status.Reason).To(Equal(tg.ReasonForeignJob))
	g.Expect(failed.Status.Message).To(And(ContainSubstring("Job "+job.Name), ContainSubstring("created by someone other than Toolgate"),
		ContainSubstring("The call did not run.")))
	g.Expect(failed.Status.Result).To(BeEmpty())
	g.Expect(failed.Status.JobName).To(BeEmpty())
	executed := meta.FindStatusCondition(failed.Status.Conditions, tg.ConditionExecuted)
	g.Expect(executed).NotTo(BeNil())
	g.Expect(executed.Status).To(Equal(metav1.ConditionFalse))
	g.Eventually(warningsAbout(h, "refund", tg.ReasonForeignJob, job.Name)).ShouldNot(BeEmpty())
	g.Expect(h.Jobs()).To(HaveLen(1), "the manager made no Job of its own under another name")
}

// A forged Job cannot borrow a proof: one copied from the call's own Job under another name, or made
// for another call, does not verify.
func TestJobWithACopiedProofIsNotTheCallsRecord(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	first := h.ToolCall("first", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.ApproveAndFinish("first", true, `{"refund":"r-1"}`)
	h.WaitPhase("first", tg.PhaseSucceeded)
	own := &batchv1.Job{}
	g.Expect(h.K8s.Get(context.Background(), client.ObjectKey{Namespace: h.NS, Name: toolcalls.JobName(first)}, own)).To(Succeed())
	g.Expect(own.Annotations).To(HaveKey(tg.AnnotationExecutionProof))

	second := h.ToolCall("second", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("second")
	forgedJob(h, second, map[string]string{tg.AnnotationExecutionProof: own.Annotations[tg.AnnotationExecutionProof]})
	h.Approve(req.ID, 5*time.Minute)
	failed := h.WaitPhase("second", tg.PhaseFailed)
	g.Expect(failed.Status.Reason).To(Equal(tg.ReasonForeignJob))
}

// The call's own Job deleted while it runs and replaced by another under its name, even one that
// carries the copied proof: the recorded UID differs, so the call ends Failed (ForeignJob), saying
// the tool may have run, and the replacement's result is not taken.
func TestReplacedJobIsNotTheCallsRecord(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	tc := h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	own := &batchv1.Job{}
	g.Expect(h.K8s.Get(ctx, client.ObjectKey{Namespace: h.NS, Name: running.Status.JobName}, own)).To(Succeed())
	g.Eventually(func() string { return string(h.Get("refund").Status.JobUID) }).Should(Equal(string(own.UID)))

	// Swapped while no manager watches (a manager that sees the deletion first reports JobMissing).
	h.StopManager()
	g.Expect(h.K8s.Delete(ctx, own, client.Preconditions{UID: &own.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func() error { return h.K8s.Get(ctx, client.ObjectKeyFromObject(own), &batchv1.Job{}) }).Should(Satisfy(func(err error) bool {
		return client.IgnoreNotFound(err) == nil && err != nil
	}))
	replacement := forgedJob(h, tc, map[string]string{tg.AnnotationExecutionProof: own.Annotations[tg.AnnotationExecutionProof]})
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged-pod", Labels: replacement.Spec.Template.Labels}, Spec: *replacement.Spec.Template.Spec.DeepCopy()}
	finishWithResult(h, replacement, forged, `{"refund":"forged"}`)
	h.Start()

	failed := h.WaitPhase("refund", tg.PhaseFailed)
	g.Expect(failed.Status.Reason).To(Equal(tg.ReasonForeignJob))
	g.Expect(failed.Status.Message).To(ContainSubstring("the tool may have run"))
	g.Expect(failed.Status.Result).To(BeEmpty())
	g.Eventually(warningsAbout(h, "refund", tg.ReasonForeignJob, replacement.Name)).ShouldNot(BeEmpty())
}

// A Pod that the call's own Job counts but that was not made from its template (created with the
// Job's selector labels and an owner reference to it, as whoever can read the Job's UID could) does
// not supply the outcome: the Job's success is not the tool's, the call ends Failed (ForeignPod) and
// an event names the Pod. A Pod made from the template supplies the result as before.
func TestPodNotMadeFromTheTemplateIsNotTheCallsOutcome(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	job := &batchv1.Job{}
	g.Expect(h.K8s.Get(ctx, client.ObjectKey{Namespace: h.NS, Name: running.Status.JobName}, job)).To(Succeed())

	spec := job.Spec.Template.Spec.DeepCopy()
	spec.Containers[0].Image = "example.com/forged:1"
	spec.Containers[0].Command = []string{"/forged"}
	// Only the Job controller's selector label: not even Toolgate's label, which the manager lists by.
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged-pod", Labels: map[string]string{batchv1.ControllerUidLabel: string(job.UID)}}, Spec: *spec}
	finishWithResult(h, job, forged, `{"refund":"forged"}`)

	failed := h.WaitPhase("refund", tg.PhaseFailed)
	g.Expect(failed.Status.Reason).To(Equal(tg.ReasonForeignPod))
	g.Expect(failed.Status.Message).To(And(ContainSubstring("Pod forged-pod"), ContainSubstring("may have run")))
	g.Expect(failed.Status.Result).To(BeEmpty())
	g.Eventually(warningsAbout(h, "refund", tg.ReasonForeignPod, "forged-pod")).ShouldNot(BeEmpty())

	// The same Tool, a Pod made from the template: its result is the call's.
	h.ToolCall("genuine", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	done := h.ApproveAndFinish("genuine", true, `{"refund":"r-2"}`)
	g.Expect(done.Status.JobUID).NotTo(BeEmpty())
	g.Expect(h.WaitPhase("genuine", tg.PhaseSucceeded).Status.Result).To(Equal(`{"refund":"r-2"}`))
}

// The manager makes its key when it starts leading, before any call is approved: a Job made in
// advance while it runs is never older than the key, so it needs a proof like any other. (A key made
// at the first approval would be younger than a Job made before it, which would then pass for one
// an older manager made.)
func TestExecutionKeyIsMadeWhenTheManagerStarts(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	key := &corev1.Secret{}
	g.Eventually(func() error {
		return h.K8s.Get(ctx, client.ObjectKey{Namespace: h.NS, Name: toolcalls.ExecutionKeySecret}, key)
	}).Should(Succeed(), "made with no ToolCall in sight")
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	tc := h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	job := forgedJob(h, tc, nil)
	g.Expect(job.CreationTimestamp.Before(&key.CreationTimestamp)).To(BeFalse())
	h.Approve(req.ID, 5*time.Minute)
	g.Expect(h.WaitPhase("refund", tg.PhaseFailed).Status.Reason).To(Equal(tg.ReasonForeignJob))
}

// The key of execution proofs is made by the manager, at random, in its own namespace.
func TestExecutionKeyIsKeptInTheManagersNamespace(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.ApproveAndFinish("refund", true, `{"refund":"r-1"}`)
	s := &corev1.Secret{}
	g.Expect(h.K8s.Get(context.Background(), client.ObjectKey{Namespace: h.NS, Name: toolcalls.ExecutionKeySecret}, s)).To(Succeed())
	g.Expect(len(s.Data["key"])).To(BeNumerically(">=", 32))
}

// A call that was Running when the manager was upgraded to one that signs its Jobs keeps its Job: a
// Job without a proof that the apiserver created before the manager made its key is taken as the
// call's (nobody can create a Job in the past), and its result is the call's.
func TestJobOfAManagerBeforeProofsIsStillTheCallsRecord(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	ctx := context.Background()
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	tc := h.NewToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	g.Expect(h.K8s.Create(ctx, tc)).To(Succeed())
	// The Job as the manager before this one made it: labels, owner, no proof.
	labels := map[string]string{tg.LabelToolCallUID: string(tc.UID), tg.LabelToolCallName: tc.Name, tg.LabelToolName: tc.Spec.Tool}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: toolcalls.JobName(tc), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(tc, tg.GroupVersion.WithKind("ToolCall"))}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "tool", Image: "busybox:1.36"}}}}},
	}
	g.Expect(h.K8s.Create(ctx, job)).To(Succeed())
	tc.Status.Phase, tc.Status.Reason, tc.Status.JobName = tg.PhaseRunning, tg.ReasonJobCreated, job.Name
	g.Expect(h.K8s.Status().Update(ctx, tc)).To(Succeed())
	// The key is made after the Job: wait until the apiserver's clock (creation times are in seconds)
	// has passed the Job's second, as a dry-run create shows it.
	g.Eventually(func() bool {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, GenerateName: "clock-"}}
		g.Expect(h.K8s.Create(ctx, probe, client.DryRunAll)).To(Succeed())
		return job.CreationTimestamp.Before(&probe.CreationTimestamp)
	}).WithTimeout(5 * time.Second).WithPolling(100 * time.Millisecond).Should(BeTrue())
	h.Start()

	h.FinishJob(job.Name, true, `{"refund":"r-1"}`)
	done := h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(done.Status.Result).To(Equal(`{"refund":"r-1"}`))
	g.Expect(done.Status.JobUID).To(Equal(job.UID))
}

// A rule approved the call and its Job was created, then the manager died before the status said so,
// and the Tool was changed before the next manager came: the Job is the record that the call ran, and
// the decision that started it comes back from the Job (where the proof covers it), so the Running
// call says which rule approved it and until when.
func TestDecisionThatStartedTheJobIsKeptWithIt(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	ctx := context.Background()
	tool := h.Tool("issue-refund", "issue_refund", th.RefundSchema, refundRules)
	died := crashAt(h, afterJobCreate)
	h.Start()
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	g.Eventually(died).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(h.Get("refund").Status.Decision).To(BeNil(), "the status that says so was not written")

	g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(tool), tool)).To(Succeed())
	c := &tool.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "EDITED", Value: "after the Job"})
	g.Expect(h.K8s.Update(ctx, tool)).To(Succeed())
	h.Restart()

	running := h.WaitPhase("refund", tg.PhaseRunning)
	d := running.Status.Decision
	g.Expect(d).NotTo(BeNil())
	g.Expect(d.Status).To(Equal("approved"))
	g.Expect(d.Source).To(Equal(tg.DecisionSourcePolicy))
	g.Expect(d.Rule).To(Equal("small-gbp-refunds"))
	g.Expect(d.ExpiresAt).NotTo(BeNil())
	g.Expect(running.Status.JobUID).NotTo(BeEmpty())
	h.FinishJob(running.Status.JobName, true, `{"refund":"r-1"}`)
	g.Expect(h.WaitPhase("refund", tg.PhaseSucceeded).Status.Result).To(Equal(`{"refund":"r-1"}`))
}
