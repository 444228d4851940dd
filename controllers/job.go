package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// startJob starts the approved call: the Job's existence is the record that the tool ran, so an
// existing Job is never re-created and its call is never reported as not run, and a new one is created
// only if the approval is still valid at that instant. The create itself finds an existing Job
// (AlreadyExists); the Job is looked up only before saying that the call did not run.
func (r *ToolCallReconciler) startJob(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	name := JobName(tc)
	job, stop, err := r.approvedJob(ctx, tc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stop != nil {
		if started, err := r.markRunningIfStarted(ctx, tc); err != nil || started {
			return ctrl.Result{}, err
		}
		setPhase(tc, stop.phase, stop.reason, stop.message)
		return ctrl.Result{}, nil
	}
	switch err := r.Create(ctx, job); {
	case err == nil, apierrors.IsAlreadyExists(err):
		return r.markRunning(tc, name)
	case apierrors.IsInvalid(err):
		setPhase(tc, tg.PhaseFailed, tg.ReasonJobRefused, fmt.Sprintf("The call was approved but the Job was refused by the cluster (%v). The call did not run.", apierrors.ReasonForError(err)))
		return ctrl.Result{}, nil
	default:
		// Not created (or unknown): the next attempt checks again, and creating finds a Job that exists.
		return ctrl.Result{}, fmt.Errorf("creating Job %s: %w", name, err)
	}
}

// notStarted is the outcome of an approved call that must not start, unless its Job already exists.
type notStarted struct {
	phase           tg.ToolCallPhase
	reason, message string
}

// approvedJob builds the Job for an approved call, or says why the call cannot start now: the Tool is
// gone, invalid or no longer the version the call was accepted against, the approval is no longer
// valid at this instant, or no time is left to run it.
func (r *ToolCallReconciler) approvedJob(ctx context.Context, tc *tg.ToolCall) (*batchv1.Job, *notStarted, error) {
	tool, rej, err := r.findTool(ctx, tc)
	if err != nil {
		return nil, nil, err
	}
	if rej != nil {
		return nil, &notStarted{tg.PhaseFailed, tg.ReasonInvalidTool, "The call was approved but could not start: " + rej.message + " The call did not run."}, nil
	}
	// The Job is built from the Tool as the apiserver has it now, not as the cache last saw it: an
	// edit the cache has not delivered yet must stop the call, not run the version before it.
	live := &tg.Tool{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(tool), live); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading Tool %s before creating the Job: %w", tool.Name, err)
		}
		return nil, &notStarted{tg.PhaseFailed, tg.ReasonInvalidTool, fmt.Sprintf("The call was approved but could not start: Tool %s was deleted. The call did not run.", tool.Name)}, nil
	}
	tool = live
	w, _, err := r.submission(tc)
	if err != nil {
		return nil, nil, err
	}
	// The Tool's limit holds whatever the ToolCall's metadata says.
	w.ExecutionTimeout = min(w.ExecutionTimeout, executionTimeout(tool))
	now := r.Clock.Now()
	if stop := runGate(tc, tool, w, r.Timing, now); stop != nil {
		return nil, stop, nil
	}
	return buildJob(tc, tool, r.Timing.ActiveDeadline(w, now)), nil, nil
}

// runGate is the run/don't-run decision immediately before the Job is created, nil when the call may
// start now: the Tool is the version the call was accepted against, the recorded decision (a human's
// or a rule's) is an approval still valid at now by its expiry less the skew margin, the approval
// limit has not passed, and at least one second is left to run the tool.
func runGate(tc *tg.ToolCall, tool *tg.Tool, w Window, t Timing, now time.Time) *notStarted {
	// The approval covers the version of the Tool the call was accepted against, and no other.
	if problem := toolVersionProblem(tc, tool); problem != "" {
		return toolChanged(problem)
	}
	d := tc.Status.Decision
	if d == nil || d.Status != provider.StatusApproved {
		// Never reached: the Job is only ever started for an approval. Fail closed all the same.
		return &notStarted{tg.PhaseApprovalUnavailable, tg.ReasonUntrustedResponse, "Approval could not be obtained: the recorded decision is not an approval. The call did not run."}
	}
	expires := timeOf(d.ExpiresAt)
	if !t.ApprovalUsable(now, expires) {
		return &notStarted{tg.PhaseExpired, tg.ReasonApprovalExpired, fmt.Sprintf("The approval expired at %s, before the call could start. The call did not run.", expires.UTC().Format(time.RFC3339))}
	}
	if !now.Before(t.ApprovalLimit(w)) || t.ActiveDeadline(w, now) < 1 {
		return &notStarted{tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained in time: the approval arrived after the waiting limit left room to run the tool. The call did not run."}
	}
	return nil
}

// jobExists says whether the ToolCall's Job was created: from the cache if it holds the Job, else
// from the apiserver (a cache that has not seen it yet proves nothing).
func (r *ToolCallReconciler) jobExists(ctx context.Context, namespace, name string) (bool, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if err := r.Get(ctx, key, &batchv1.Job{}); err == nil {
		return true, nil
	}
	err := r.APIReader.Get(ctx, key, &batchv1.Job{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("reading Job %s: %w", name, err)
	}
}

// markRunningIfStarted looks for the call's Job before the call is reported as not run: an existing
// Job is the record that the tool ran, so the call is marked Running and true is returned.
func (r *ToolCallReconciler) markRunningIfStarted(ctx context.Context, tc *tg.ToolCall) (bool, error) {
	started, err := r.jobExists(ctx, tc.Namespace, JobName(tc))
	if err != nil || !started {
		return false, err
	}
	r.markRunning(tc, JobName(tc))
	return true, nil
}

func (r *ToolCallReconciler) markRunning(tc *tg.ToolCall, jobName string) (ctrl.Result, error) {
	tc.Status.JobName = jobName
	setPhase(tc, tg.PhaseRunning, tg.ReasonJobCreated, fmt.Sprintf("Approved; the tool is running as Job %s.", jobName))
	return ctrl.Result{}, nil
}

// observeJob records the Job's outcome and its termination message.
func (r *ToolCallReconciler) observeJob(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Status.JobName}
	job := &batchv1.Job{}
	if err := r.Get(ctx, key, job); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading Job %s from the cache: %w", key.Name, err)
		}
		if err := r.APIReader.Get(ctx, key, job); err != nil {
			if apierrors.IsNotFound(err) {
				setPhase(tc, tg.PhaseFailed, tg.ReasonJobMissing, fmt.Sprintf("Job %s was deleted before it finished; its outcome is unknown.", key.Name))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("reading Job %s: %w", key.Name, err)
		}
	}
	finished, succeeded := jobFinished(job)
	if !finished {
		return ctrl.Result{}, r.observePods(ctx, tc, job)
	}
	if !succeeded && tc.Status.Reason == tg.ReasonImageUnavailable {
		imageUnavailableFailed(tc, job)
		return ctrl.Result{}, nil
	}
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(tc.Namespace), client.MatchingLabels{tg.LabelToolCallUID: string(tc.UID)}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the Pods of Job %s: %w", key.Name, err)
	}
	tc.Status.Result = terminationMessage(pods.Items)
	if succeeded {
		setPhase(tc, tg.PhaseSucceeded, tg.ReasonJobSucceeded, "The tool ran and succeeded; status.result holds its output.")
	} else {
		setPhase(tc, tg.PhaseFailed, tg.ReasonJobFailed, jobFailedMessage(job))
	}
	return ctrl.Result{}, nil
}

// observePods says in the status when the tool's container cannot start for want of its image, and
// when that ends. The Pods are read from the cache, which holds only the Pods of Toolgate's Jobs.
func (r *ToolCallReconciler) observePods(ctx context.Context, tc *tg.ToolCall, job *batchv1.Job) error {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(tc.Namespace), client.MatchingLabels{tg.LabelToolCallUID: string(tc.UID)}); err != nil {
		return fmt.Errorf("listing the Pods of Job %s: %w", job.Name, err)
	}
	switch w := waitingForImage(job, pods.Items); {
	case w != nil:
		imageUnavailable(tc, w)
	case tc.Status.Reason == tg.ReasonImageUnavailable && containerStarted(pods.Items):
		// The image arrived and the tool started. Until a container is seen started the wait is
		// still the last word: the Job's deadline kills a waiting container without starting it.
		r.markRunning(tc, job.Name)
	}
	return nil
}

// JobName derives the Job's name from the ToolCall: its name (shortened) and a hash of its UID, so a
// ToolCall has exactly one possible Job and a re-created ToolCall of the same name gets another.
func JobName(tc *tg.ToolCall) string {
	sum := sha256.Sum256([]byte(tc.UID))
	suffix := hex.EncodeToString(sum[:])[:10]
	name := tc.Name
	// Job names become a Pod label value (at most 63 characters).
	if max := 63 - len(suffix) - 1; len(name) > max {
		name = strings.TrimRight(name[:max], "-.")
	}
	return name + "-" + suffix
}

// buildJob makes the Job that executes tool for tc.
func buildJob(tc *tg.ToolCall, tool *tg.Tool, activeDeadlineSeconds int64) *batchv1.Job {
	tmpl := tool.Spec.JobTemplate.DeepCopy()
	ours := labels.Set{
		tg.LabelToolCallUID:  string(tc.UID),
		tg.LabelToolCallName: truncateLabel(tc.Name),
		tg.LabelToolName:     truncateLabel(tool.Spec.ToolName),
	}
	// The version of the Tool the Job was built from: the one the call was accepted against.
	annotations := make(map[string]string, len(tmpl.Annotations)+2)
	maps.Copy(annotations, tmpl.Annotations)
	annotations[tg.AnnotationToolUID] = string(tool.UID)
	annotations[tg.AnnotationToolGeneration] = strconv.FormatInt(tool.Generation, 10)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        JobName(tc),
			Namespace:   tc.Namespace,
			Labels:      labels.Merge(tmpl.Labels, ours),
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: tg.GroupVersion.String(), Kind: "ToolCall", Name: tc.Name, UID: tc.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: tmpl.Spec,
	}
	job.Spec.ActiveDeadlineSeconds = ptr.To(activeDeadlineSeconds)
	if job.Spec.BackoffLimit == nil {
		// A refund must not be retried by Kubernetes unless the Tool says so.
		job.Spec.BackoffLimit = ptr.To[int32](0)
	}
	pod := &job.Spec.Template
	pod.Labels = labels.Merge(pod.Labels, ours)
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	env := []corev1.EnvVar{
		{Name: "TOOL_NAME", Value: tool.Spec.ToolName},
		{Name: "TOOL_ARGUMENTS", Value: string(tc.Spec.Arguments.Raw)},
		{Name: "TOOLCALL_NAME", Value: tc.Name},
		{Name: "TOOLCALL_UID", Value: string(tc.UID)},
	}
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Env = append(pod.Spec.InitContainers[i].Env, env...)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, env...)
	}
	return job
}

func truncateLabel(v string) string {
	if len(v) > 63 {
		v = strings.TrimRight(v[:63], "-_.")
	}
	return v
}

// jobFinished reports whether the Job completed or failed, and which.
func jobFinished(job *batchv1.Job) (finished, succeeded bool) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true
		case batchv1.JobFailed:
			return true, false
		}
	}
	return false, false
}

// jobFailedMessage says why the Job failed, in the Job controller's words (BackoffLimitExceeded,
// DeadlineExceeded).
func jobFailedMessage(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue && c.Reason != "" {
			return fmt.Sprintf("The tool's Job failed (%s: %s); status.result holds the tool's last message, if it wrote one.", c.Reason, c.Message)
		}
	}
	return "The tool's Job failed; status.result holds the tool's last message, if it wrote one."
}

// terminationMessage returns the first non-empty termination message of the Job's Pods, newest Pod
// first, truncated to MaxResultBytes.
func terminationMessage(pods []corev1.Pod) string {
	var newest *corev1.Pod
	msg := ""
	for i := range pods {
		p := &pods[i]
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.Message != "" {
				if newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
					newest, msg = p, t.Message
				}
				break
			}
		}
	}
	if len(msg) > tg.MaxResultBytes {
		msg = msg[:tg.MaxResultBytes]
	}
	return msg
}
