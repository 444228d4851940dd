package toolcall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"

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
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/providers"
)

// startJob starts the approved call: the Job's existence is the record that the tool ran, so an
// existing Job is never re-created and its call is never reported as not run, and a new one is created
// only if the approval is still valid at that instant. The create itself finds an existing Job
// (AlreadyExists); the Job is looked up only before saying that the call did not run.
func (r *Reconciler) startJob(ctx context.Context, sc *scope) (ctrl.Result, error) {
	tc := sc.tc
	name := JobName(tc)
	job, stop, err := r.approvedJob(ctx, sc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stop != nil {
		_, err := r.endWithoutRunning(ctx, sc, stop)
		return ctrl.Result{}, err
	}
	switch err := r.Create(ctx, job); {
	case err == nil, apierrors.IsAlreadyExists(err):
		markRunning(tc, name)
		return ctrl.Result{}, nil
	case apierrors.IsInvalid(err):
		setStatus(tc, lifecycle.JobRefused.Status(apierrors.ReasonForError(err)))
		return ctrl.Result{}, nil
	default:
		// Not created (or unknown): the next attempt checks again, and creating finds a Job that exists.
		return ctrl.Result{}, fmt.Errorf("creating Job %s: %w", name, err)
	}
}

// approvedJob builds the Job for an approved call, or returns the status of a call that cannot start
// now: the Tool is gone, invalid or no longer the version the call was accepted against, the approval
// is no longer valid at this instant, or no time is left to run it (lifecycle.RunGate).
func (r *Reconciler) approvedJob(ctx context.Context, sc *scope) (*batchv1.Job, *lifecycle.Status, error) {
	tc := sc.tc
	tool, rej, err := r.findTool(ctx, tc)
	if err != nil {
		return nil, nil, err
	}
	if rej != nil {
		return nil, lifecycle.ApprovedToolMissing.Status(rej.Message), nil
	}
	// The Job is built from the Tool as the apiserver has it now, not as the cache last saw it: an
	// edit the cache has not delivered yet must stop the call, not run the version before it.
	live := &tg.Tool{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(tool), live); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading Tool %s before creating the Job: %w", tool.Name, err)
		}
		return nil, lifecycle.ApprovedToolDeleted.Status(tool.Name), nil
	}
	tool = live
	acc, err := sc.accepted()
	if err != nil {
		return nil, nil, err
	}
	w := acc.Window
	// The Tool's limit holds whatever the ToolCall's metadata says.
	w.ExecutionTimeout = min(w.ExecutionTimeout, lifecycle.ExecutionTimeout(tool))
	now := r.Clock.Now()
	if stop := lifecycle.RunGate(tc, tool, w, r.Timing, now); stop != nil {
		return nil, stop, nil
	}
	if !decidedByPolicy(tc) {
		// A human's approval counts from the provider the Tool's calls go to: the record is
		// checked again, as the Tool's version is.
		k, err := providers.Accepted(tc)
		if err != nil {
			return nil, nil, err
		}
		serves, cur, err := r.Providers.StillServes(ctx, tool, k)
		if err != nil {
			return nil, nil, err
		}
		if !serves {
			return nil, lifecycle.ApprovedProviderChanged.Status(tool.Name, k, cur), nil
		}
	}
	return buildJob(tc, tool, r.Timing.ActiveDeadline(w, now)), nil, nil
}

// jobExists says whether the ToolCall's Job was created: from the cache if it holds the Job, else
// from the apiserver (a cache that has not seen it yet proves nothing).
func (r *Reconciler) jobExists(ctx context.Context, namespace, name string) (bool, error) {
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

// endWithoutRunning records st, the status of a call that did not run, unless the call's Job exists:
// the Job is the record that the tool ran (started by a reconcile whose status write was lost), so
// the call is marked Running instead. It reports whether st was recorded. The steps that end a call
// an earlier reconcile may have started go through it: the run gate, a rejected acceptance record,
// the give-up at the waiting limit and the withdrawal for a changed Tool.
func (r *Reconciler) endWithoutRunning(ctx context.Context, sc *scope, st *lifecycle.Status) (ended bool, err error) {
	name := JobName(sc.tc)
	started, err := r.jobExists(ctx, sc.tc.Namespace, name)
	switch {
	case err != nil:
		return false, err
	case started:
		markRunning(sc.tc, name)
		return false, nil
	}
	setStatus(sc.tc, st)
	return true, nil
}

// markRunning records that the call's Job exists.
func markRunning(tc *tg.ToolCall, jobName string) {
	tc.Status.JobName = jobName
	setStatus(tc, lifecycle.JobRunning.Status(jobName))
}

// observeJob records the Job's outcome and its termination message.
func (r *Reconciler) observeJob(ctx context.Context, sc *scope) (ctrl.Result, error) {
	tc := sc.tc
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Status.JobName}
	job := &batchv1.Job{}
	if err := r.Get(ctx, key, job); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading Job %s from the cache: %w", key.Name, err)
		}
		if err := r.APIReader.Get(ctx, key, job); err != nil {
			if apierrors.IsNotFound(err) {
				setStatus(tc, lifecycle.JobDeleted.Status(key.Name))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("reading Job %s: %w", key.Name, err)
		}
	}
	end := jobEndOf(job)
	if !end.finished {
		return ctrl.Result{}, r.observePods(ctx, tc, job)
	}
	if !end.succeeded && tc.Status.Reason == tg.ReasonImageUnavailable {
		imageUnavailableFailed(tc, job)
		return ctrl.Result{}, nil
	}
	pods, err := jobPods(ctx, r.APIReader, tc, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	tc.Status.Result = terminationMessage(pods)
	switch {
	case end.succeeded:
		setStatus(tc, lifecycle.JobSucceeded.Status())
	case mcpCallLost(pods):
		setStatus(tc, lifecycle.MCPCallLost.Status())
	case end.failure != "":
		setStatus(tc, lifecycle.JobFailed.Status(end.failure))
	default:
		setStatus(tc, lifecycle.JobFailedUnexplained.Status())
	}
	return ctrl.Result{}, nil
}

// observePods says in the status when the tool's container cannot start for want of its image, and
// when that ends. The Pods are read from the cache, which holds only the Pods of Toolgate's Jobs.
func (r *Reconciler) observePods(ctx context.Context, tc *tg.ToolCall, job *batchv1.Job) error {
	pods, err := jobPods(ctx, r, tc, job)
	if err != nil {
		return err
	}
	switch w := waitingForImage(job, pods); {
	case w != nil:
		imageUnavailable(tc, w)
	case tc.Status.Reason == tg.ReasonImageUnavailable && containerStarted(pods):
		// The image arrived and the tool started. Until a container is seen started the wait is
		// still the last word: the Job's deadline kills a waiting container without starting it.
		markRunning(tc, job.Name)
	}
	return nil
}

// jobPods lists, from c, the Pods of tc's Job. The ToolCall's UID label selects the candidates, but
// anyone who may create Pods in the namespace can label one with it: only the Pods the Job controls
// speak for the tool, so such a Pod can neither supply the result nor report an image wait.
func jobPods(ctx context.Context, c client.Reader, tc *tg.ToolCall, job *batchv1.Job) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(tc.Namespace), client.MatchingLabels{tg.LabelToolCallUID: string(tc.UID)}); err != nil {
		return nil, fmt.Errorf("listing the Pods of Job %s: %w", job.Name, err)
	}
	owned := make([]corev1.Pod, 0, len(pods.Items))
	for _, p := range pods.Items {
		if owner := metav1.GetControllerOf(&p); owner != nil && owner.UID == job.UID {
			owned = append(owned, p)
		}
	}
	return owned, nil
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
		{Name: "TOOL_NAME", Value: literalEnv(tool.Spec.ToolName)},
		{Name: "TOOL_ARGUMENTS", Value: literalEnv(string(tc.Spec.Arguments.Raw))},
		{Name: "TOOLCALL_NAME", Value: literalEnv(tc.Name)},
		{Name: "TOOLCALL_UID", Value: literalEnv(string(tc.UID))},
	}
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Env = append(pod.Spec.InitContainers[i].Env, env...)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, env...)
	}
	return job
}

// literalEnv writes v as an env value the container receives unchanged. The kubelet expands $(VAR)
// references in env values and turns $$ into $; with every $ doubled, each $$ becomes the one $ it
// stands for and nothing is left to expand, so the tool sees exactly the approved text.
func literalEnv(v string) string { return strings.ReplaceAll(v, "$", "$$") }

func truncateLabel(v string) string {
	if len(v) > 63 {
		v = strings.TrimRight(v[:63], "-_.")
	}
	return v
}

// jobEnd is what a Job's conditions say about its end.
type jobEnd struct {
	finished, succeeded bool
	// failure is the Job controller's "reason: message" of a failed Job, "" when it gave no reason.
	failure string
}

// jobEndOf reads the Job's conditions, the one place they are read: complete, or failed and why (in
// the Job controller's words: BackoffLimitExceeded, DeadlineExceeded).
func jobEndOf(job *batchv1.Job) jobEnd {
	var end jobEnd
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			if !end.finished {
				end.finished, end.succeeded = true, true
			}
		case batchv1.JobFailed:
			end.finished = true
			if end.failure == "" && c.Reason != "" {
				end.failure = fmt.Sprintf("%s: %s", c.Reason, c.Message)
			}
		}
	}
	return end
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
