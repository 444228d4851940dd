package toolcalls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
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
	"toolgate.dev/toolgate/controllers/internal/providercache"
)

// startJob starts the approved call: the Job's existence is the record that the tool ran, so an
// existing Job is never re-created and its call is never reported as not run, and a new one is created
// only if the approval is still valid at that instant. The create itself finds an existing Job
// (AlreadyExists), which counts as the call's only if the manager created it (its execution proof,
// execproof.go): a Job someone else created first under the call's name ends the call without running.
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
	if err := r.ExecutionKey.Sign(ctx, job, tc); err != nil {
		return ctrl.Result{}, err
	}
	switch err := r.Create(ctx, job); {
	case err == nil:
		markRunning(tc, job)
		return ctrl.Result{}, nil
	case apierrors.IsAlreadyExists(err):
		found, ours, err := r.findJob(ctx, tc)
		switch {
		case err != nil:
			return ctrl.Result{}, err
		case found == nil:
			// Deleted since the create found it: the next attempt creates it.
			return ctrl.Result{}, fmt.Errorf("job %s existed and is gone; creating it again", name)
		case ours:
			markRunning(tc, found)
		default:
			r.emit(tc, found, lifecycle.ForeignJobFound, name, tc.Namespace)
			setStatus(tc, lifecycle.ForeignJobBeforeStart.Status(name))
		}
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
	if tool.Spec.Preview != nil && sc.preview == nil && lifecycle.ToolVersionMismatch(tc, tool) == "" {
		// The execution Job carries the digest of the preview the approver saw: without the
		// manager's record of it there is nothing to carry.
		return nil, lifecycle.PreviewNotVerified.Status("status.preview, the record of the preview the approver saw, is missing"), nil
	}
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
		k, err := providercache.Accepted(tc)
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

// findJob returns the Job under the ToolCall's Job name, or nil when there is none, and whether the
// manager created it for this call (execproof.go). It reads the cache if it holds the Job, else the
// apiserver (a cache that has not seen it yet proves nothing).
func (r *Reconciler) findJob(ctx context.Context, tc *tg.ToolCall) (job *batchv1.Job, ours bool, err error) {
	job, err = r.getJob(ctx, types.NamespacedName{Namespace: tc.Namespace, Name: JobName(tc)})
	if job == nil || err != nil {
		return nil, false, err
	}
	ours, err = r.ExecutionKey.Created(ctx, job, tc)
	return job, ours, err
}

// endWithoutRunning records st, the status of a call that did not run, unless the call's Job exists:
// the Job is the record that the tool ran (started by a reconcile whose status write was lost), so
// the call is marked Running instead. A Job under that name that the manager did not create is no
// such record: st is recorded, and an event names the Job. It reports whether st was recorded. The
// steps that end a call an earlier reconcile may have started go through it: the run gate, a rejected
// acceptance record, the give-up at the waiting limit and the withdrawal for a changed Tool.
func (r *Reconciler) endWithoutRunning(ctx context.Context, sc *scope, st *lifecycle.Status) (ended bool, err error) {
	job, ours, err := r.findJob(ctx, sc.tc)
	switch {
	case err != nil:
		return false, err
	case job != nil && ours:
		markRunning(sc.tc, job)
		return false, nil
	case job != nil:
		r.emit(sc.tc, job, lifecycle.ForeignJobFound, job.Name, sc.tc.Namespace)
	}
	setStatus(sc.tc, st)
	return true, nil
}

// markRunning records that the call's Job, which the manager created, exists. A call whose status
// lost the decision that started the Job (a status write lost after the create) gets it back from
// the Job, where the proof covers it.
func markRunning(tc *tg.ToolCall, job *batchv1.Job) {
	tc.Status.JobName, tc.Status.JobUID = job.Name, job.UID
	if tc.Status.Decision == nil {
		tc.Status.Decision = startedBy(job)
	}
	setStatus(tc, lifecycle.JobRunning.Status(job.Name))
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
	// The manager's Job may have been deleted and another made under its name: what that one reports
	// is not the run. It has another UID than the one recorded, or (recorded by a manager that did
	// not keep the UID) no valid proof.
	ours, err := r.ExecutionKey.Created(ctx, job, tc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ours || (tc.Status.JobUID != "" && tc.Status.JobUID != job.UID) {
		r.emit(tc, job, lifecycle.ForeignJobFound, job.Name, tc.Namespace)
		setStatus(tc, lifecycle.ForeignJobReplaced.Status(job.Name))
		return ctrl.Result{}, nil
	}
	tc.Status.JobUID = job.UID
	end := jobEndOf(job)
	if !end.finished {
		return ctrl.Result{}, r.observePods(ctx, tc, job)
	}
	if !end.succeeded && tc.Status.Reason == tg.ReasonImageUnavailable {
		imageUnavailableFailed(tc, job)
		return ctrl.Result{}, nil
	}
	pods, foreign, err := countedPods(ctx, r.APIReader, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if foreign != nil {
		// The Job controller counted a Pod that was not made from the Job's template: the Job's
		// outcome is not the tool's.
		r.emit(tc, foreign, lifecycle.ForeignPodFound, foreign.Name, job.Name, tc.Namespace)
		setStatus(tc, lifecycle.ForeignPodCounted.Status(job.Name, foreign.Name))
		return ctrl.Result{}, nil
	}
	result, truncated := terminationMessage(job, pods)
	tc.Status.Result = result
	tc.Status.Execution = executionOf(job, pods, truncated)
	switch {
	case end.succeeded:
		setStatus(tc, lifecycle.JobSucceeded.Status())
	case mcpCallLost(pods) || mcpJobLostWithoutPods(job, pods):
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
		markRunning(tc, job)
	}
	return nil
}

// jobPods lists, from c, the Pods of tc's Job. The ToolCall's UID label selects the candidates, but
// anyone who may create Pods in the namespace can label one with it: only the Pods the Job controls
// and that run the template's containers speak for the tool, so such a Pod cannot report an image
// wait. The cache keeps of a Pod only its containers' names and images (SlimPod), so that is what is
// compared here; a finished Job's Pods are read whole and checked in full (countedPods).
func jobPods(ctx context.Context, c client.Reader, tc *tg.ToolCall, job *batchv1.Job) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(tc.Namespace), client.MatchingLabels{tg.LabelToolCallUID: string(tc.UID)}); err != nil {
		return nil, fmt.Errorf("listing the Pods of Job %s: %w", job.Name, err)
	}
	owned := make([]corev1.Pod, 0, len(pods.Items))
	for _, p := range pods.Items {
		if owner := metav1.GetControllerOf(&p); owner != nil && owner.UID == job.UID && runsTemplateImages(job, &p) {
			owned = append(owned, p)
		}
	}
	return owned, nil
}

// countedPods lists, from the apiserver, the Pods the Job controller counts for a finished Job: those
// its selector matches and it controls. It returns them, or the first that was not made from the
// Job's template (someone else's Pod, adopted through the selector labels or an owner reference).
func countedPods(ctx context.Context, c client.Reader, job *batchv1.Job) ([]corev1.Pod, *corev1.Pod, error) {
	selector := labels.SelectorFromSet(labels.Set{batchv1.ControllerUidLabel: string(job.UID)})
	if job.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
		if err != nil {
			return nil, nil, fmt.Errorf("reading Job %s's selector: %w", job.Name, err)
		}
		selector = s
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, nil, fmt.Errorf("listing the Pods of Job %s: %w", job.Name, err)
	}
	counted := make([]corev1.Pod, 0, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		if owner := metav1.GetControllerOf(p); owner == nil || owner.UID != job.UID {
			continue
		}
		if !madeFromTemplate(job, p) {
			return nil, p, nil
		}
		counted = append(counted, *p)
	}
	return counted, nil, nil
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
	env = append(env, executionEnv(tc, tool)...)
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
// first, truncated to MaxResultBytes, and whether it was cut. Only the containers of the Job's
// template speak for the tool (admission may add others).
func terminationMessage(job *batchv1.Job, pods []corev1.Pod) (string, bool) {
	var newest *corev1.Pod
	msg := ""
	for i := range pods {
		p := &pods[i]
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.Message != "" && templateContainer(job, cs.Name) {
				if newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
					newest, msg = p, t.Message
				}
				break
			}
		}
	}
	if len(msg) > tg.MaxResultBytes {
		return msg[:tg.MaxResultBytes], true
	}
	return msg, false
}

// templateContainer reports whether name is a container of the Job's template.
func templateContainer(job *batchv1.Job, name string) bool {
	return slices.ContainsFunc(job.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
}

// executionOf is what ran, for the receipt: the newest of the Job's Pods whose tool containers ended
// (else the newest Pod), its node, and each template container's image, the image the kubelet ran,
// start, end and exit code.
func executionOf(job *batchv1.Job, pods []corev1.Pod, truncated bool) *tg.Execution {
	ex := &tg.Execution{ResultTruncated: truncated}
	var pick *corev1.Pod
	ended := func(p *corev1.Pod) bool {
		return slices.ContainsFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool {
			return cs.State.Terminated != nil && templateContainer(job, cs.Name)
		})
	}
	for i := range pods {
		p := &pods[i]
		switch {
		case pick == nil,
			ended(p) && !ended(pick),
			ended(p) == ended(pick) && p.CreationTimestamp.After(pick.CreationTimestamp.Time):
			pick = p
		}
	}
	if pick == nil {
		return ex
	}
	ex.PodName, ex.PodUID, ex.NodeName = pick.Name, pick.UID, pick.Spec.NodeName
	for _, c := range job.Spec.Template.Spec.Containers {
		ec := tg.ExecutedContainer{Name: c.Name, Image: c.Image}
		for _, cs := range pick.Status.ContainerStatuses {
			if cs.Name != c.Name {
				continue
			}
			ec.ImageID = cs.ImageID
			if t := cs.State.Terminated; t != nil {
				ec.StartedAt, ec.FinishedAt, ec.ExitCode = metaTimeOrNil(t.StartedAt), metaTimeOrNil(t.FinishedAt), ptr.To(t.ExitCode)
			}
		}
		ex.Containers = append(ex.Containers, ec)
	}
	return ex
}

// metaTimeOrNil is t, or nil for the zero time.
func metaTimeOrNil(t metav1.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
