package toolcalls

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
)

// A Tool's preview (spec.preview) runs before any human is asked: its Job says what the call would
// do, the manager records what it said in status.preview, with a proof under its execution key, and
// only then submits the approval request, whose context carries the preview (every submission of the
// call, a replay after a crash included, sends the same body). The approval rules of such a Tool run
// after the preview and read it; the execution Job receives its digest.
//
//	preview Job      step (runPreview)                           next
//	none             create it, signed like an execution Job      Pending (PreviewRunning)
//	not the manager's                                             ApprovalUnavailable (PreviewNotVerified)
//	running          wait until its timeout (+ previewGrace)      Pending (PreviewRunning)
//	ended            record its output (or its failure)           submit; onFailure Deny: Rejected
//	                                                              (PreviewFailed)

// previewGrace is how long past its activeDeadlineSeconds the manager waits for a preview Job the Job
// controller has not ended yet, before it counts the preview as timed out.
const previewGrace = 10 * time.Second

// previewErrorBytes bounds the part of a failed preview's own words kept in its error.
const previewErrorBytes = 512

// PreviewJobName is the name of tc's preview Job: its name (shortened) and a hash of its UID, so a
// ToolCall has exactly one possible preview Job, whose name is never its execution Job's.
func PreviewJobName(tc *tg.ToolCall) string {
	sum := sha256.Sum256([]byte("preview/" + string(tc.UID)))
	suffix := "pv-" + hex.EncodeToString(sum[:])[:10]
	name := tc.Name
	if max := 63 - len(suffix) - 1; len(name) > max {
		name = strings.TrimRight(name[:max], "-.")
	}
	return name + "-" + suffix
}

// previewTimeout is the Tool's spec.preview.timeout, or its default.
func previewTimeout(p *tg.ToolPreview) time.Duration {
	if p.Timeout != nil && p.Timeout.Duration > 0 {
		return p.Timeout.Duration
	}
	d, _ := time.ParseDuration(tg.DefaultPreviewTimeout)
	return d
}

// previewMaxBytes is the Tool's spec.preview.maxBytes, or its default.
func previewMaxBytes(p *tg.ToolPreview) int {
	if p.MaxBytes > 0 && p.MaxBytes <= tg.MaxPreviewBytes {
		return int(p.MaxBytes)
	}
	return tg.MaxPreviewBytes
}

// previewReserve is the time a call of tool keeps for its preview before its request is submitted:
// none for a Tool without one.
func previewReserve(tool *tg.Tool) time.Duration {
	if tool.Spec.Preview == nil {
		return 0
	}
	return previewTimeout(tool.Spec.Preview) + previewGrace
}

// runPreview runs the Tool's preview of the call and records what it said. done is true once
// status.preview holds a verified record (sc.preview): the request can be submitted. Otherwise res
// and err are the reconcile's, and the status says where the preview is, or how the call ended.
func (r *Reconciler) runPreview(ctx context.Context, sc *scope, tool *tg.Tool) (done bool, res ctrl.Result, err error) {
	if sc.preview != nil {
		return true, ctrl.Result{}, nil
	}
	tc, spec := sc.tc, tool.Spec.Preview
	tmpl, err := r.Tools.PreviewTemplate(tool)
	if err != nil {
		setStatus(tc, lifecycle.PreviewTemplateInvalid.Status(tool.Name, err))
		return false, ctrl.Result{}, nil
	}
	job, err := r.getJob(ctx, types.NamespacedName{Namespace: tc.Namespace, Name: PreviewJobName(tc)})
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if job == nil {
		return r.startPreview(ctx, sc, tool, tmpl)
	}
	ours, err := r.ExecutionKey.createdPreview(ctx, job, tc)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if !ours {
		_, err := r.endWithoutRunning(ctx, sc, lifecycle.PreviewNotVerified.Status(
			fmt.Sprintf("Job %s holds the name of its preview Job but was not created by Toolgate (no valid %s)", job.Name, tg.AnnotationExecutionProof)))
		return false, ctrl.Result{}, err
	}
	end := jobEndOf(job)
	if !end.finished {
		deadline := job.CreationTimestamp.Add(previewTimeout(spec) + previewGrace)
		if left := deadline.Sub(r.Clock.Now()); left > 0 {
			setStatus(tc, lifecycle.PreviewRunning.Status(job.Name))
			return false, ctrl.Result{RequeueAfter: left}, nil
		}
		return r.recordPreview(ctx, sc, tool, &tg.PreviewRecord{JobName: job.Name, Image: firstImage(job),
			Error: fmt.Sprintf("the preview did not finish within spec.preview.timeout %s", previewTimeout(spec))})
	}
	pods, foreign, err := countedPods(ctx, r.APIReader, job)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if foreign != nil {
		_, err := r.endWithoutRunning(ctx, sc, lifecycle.PreviewNotVerified.Status(
			fmt.Sprintf("Pod %s was counted by preview Job %s but not made from its template", foreign.Name, job.Name)))
		return false, ctrl.Result{}, err
	}
	return r.recordPreview(ctx, sc, tool, previewOutcome(job, pods, end, previewMaxBytes(spec)))
}

// startPreview creates the call's preview Job, signed as the manager's.
func (r *Reconciler) startPreview(ctx context.Context, sc *scope, tool *tg.Tool, tmpl *batchv1.JobTemplateSpec) (bool, ctrl.Result, error) {
	tc := sc.tc
	job := buildPreviewJob(tc, tool, tmpl)
	if err := r.ExecutionKey.signPreview(ctx, job, tc); err != nil {
		return false, ctrl.Result{}, err
	}
	switch err := r.Create(ctx, job); {
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		setStatus(tc, lifecycle.PreviewTemplateInvalid.Status(tool.Name, apierrors.ReasonForError(err)))
		return false, ctrl.Result{}, nil
	case err != nil && !apierrors.IsAlreadyExists(err):
		return false, ctrl.Result{}, fmt.Errorf("creating preview Job %s: %w", job.Name, err)
	}
	// Created, or found created (the next reconcile checks whose it is): its watch event, or the
	// requeue at its deadline, comes back here.
	setStatus(tc, lifecycle.PreviewRunning.Status(job.Name))
	return false, ctrl.Result{RequeueAfter: previewReserve(tool)}, nil
}

// recordPreview signs and records the preview's outcome. A failure under onFailure Deny ends the
// call; otherwise the request is submitted by the next reconcile, once the record is written: the
// status write lands before any submission carries it.
func (r *Reconciler) recordPreview(ctx context.Context, sc *scope, tool *tg.Tool, rec *tg.PreviewRecord) (bool, ctrl.Result, error) {
	tc := sc.tc
	proof, err := r.ExecutionKey.previewProof(ctx, tc, rec)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	rec.Proof = proof
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	rec.CompletedAt = &now
	tc.Status.Preview = rec
	if rec.Error != "" && tool.Spec.Preview.OnFailure != tg.PreviewFailureAsk {
		_, err := r.endWithoutRunning(ctx, sc, lifecycle.PreviewFailed.Status(tool.Name, rec.Error))
		return false, ctrl.Result{}, err
	}
	sc.usePreview(rec)
	setStatus(tc, lifecycle.PreviewRunning.Status(rec.JobName))
	return false, ctrl.Result{}, nil
}

// previewOutcome is what an ended preview Job said: the termination message of its first container,
// newest Pod first, or why there is none to use.
func previewOutcome(job *batchv1.Job, pods []corev1.Pod, end jobEnd, maxBytes int) *tg.PreviewRecord {
	rec := &tg.PreviewRecord{JobName: job.Name, Image: firstImage(job)}
	first := job.Spec.Template.Spec.Containers[0].Name
	var newest *corev1.Pod
	var msg string
	for i := range pods {
		p := &pods[i]
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != first || cs.State.Terminated == nil {
				continue
			}
			if newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
				newest, msg, rec.ImageID = p, cs.State.Terminated.Message, cs.ImageID
			}
		}
	}
	switch {
	case !end.succeeded:
		why := end.failure
		if why == "" {
			why = "no reason given"
		}
		rec.Error = fmt.Sprintf("the preview Job failed (%s)", why)
		if msg != "" {
			rec.Error += ": " + cutText(msg, previewErrorBytes)
		}
	case msg == "":
		rec.Error = "the preview gave no output: its first container wrote nothing to its termination message"
	case len(msg) > maxBytes:
		rec.Error = fmt.Sprintf("the preview's output is %d bytes or more, over spec.preview.maxBytes %d", len(msg), maxBytes)
	}
	if rec.Error != "" {
		rec.ImageID = ""
		return rec
	}
	rec.Output = msg
	rec.Format = tg.PreviewFormatText
	if t := bytes.TrimSpace([]byte(msg)); len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
		rec.Format = tg.PreviewFormatJSON
	}
	sum := sha256.Sum256([]byte(msg))
	rec.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return rec
}

// cutText is s if it fits in max bytes, else its beginning and an ellipsis, on a character boundary.
func cutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}

func firstImage(job *batchv1.Job) string {
	if c := job.Spec.Template.Spec.Containers; len(c) > 0 {
		return c[0].Image
	}
	return ""
}

// buildPreviewJob makes tc's preview Job from tmpl, the Tool's preview template: the call's env as
// the execution Job has it, the preview's mode and limit, no retries, the preview's deadline, and no
// Secret unless the Tool allows them.
func buildPreviewJob(tc *tg.ToolCall, tool *tg.Tool, tmpl *batchv1.JobTemplateSpec) *batchv1.Job {
	spec := tool.Spec.Preview
	as := tool.DeepCopy()
	as.Spec.JobTemplate, as.Spec.Preview = *tmpl.DeepCopy(), nil
	job := buildJob(tc, as, int64(previewTimeout(spec)/time.Second))
	job.Name = PreviewJobName(tc)
	job.Labels[tg.LabelPreview] = "true"
	job.Spec.Template.Labels[tg.LabelPreview] = "true"
	job.Spec.BackoffLimit = ptr.To[int32](0)
	pod := &job.Spec.Template.Spec
	if !spec.AllowSecrets {
		withoutSecrets(pod)
	}
	env := []corev1.EnvVar{
		{Name: tg.PreviewModeEnv, Value: "preview"},
		{Name: tg.PreviewMaxBytesEnv, Value: strconv.Itoa(previewMaxBytes(spec))},
	}
	for i := range pod.InitContainers {
		pod.InitContainers[i].Env = append(pod.InitContainers[i].Env, env...)
	}
	for i := range pod.Containers {
		pod.Containers[i].Env = append(pod.Containers[i].Env, env...)
	}
	return job
}

// executionEnv is what the execution Job of a Tool with a preview adds to the call's env: its mode and
// the digest of the preview the approver saw (empty when the preview failed and the Tool asked anyway).
func executionEnv(tc *tg.ToolCall, tool *tg.Tool) []corev1.EnvVar {
	if tool.Spec.Preview == nil {
		return nil
	}
	digest := ""
	if p := tc.Status.Preview; p != nil {
		digest = p.Digest
	}
	return []corev1.EnvVar{{Name: tg.PreviewModeEnv, Value: "execute"}, {Name: tg.PreviewDigestEnv, Value: digest}}
}

// withoutSecrets removes from pod every reference to a Secret that gives its containers data: env
// from a Secret key, envFrom a Secret, Secret volumes and the Secret sources of projected volumes
// (a projected volume left with no source goes, with its mounts). Image pull Secrets stay: they let
// the node pull the image, and the containers never see them.
func withoutSecrets(pod *corev1.PodSpec) {
	gone := map[string]bool{}
	var volumes []corev1.Volume
	for _, v := range pod.Volumes {
		switch {
		case v.Secret != nil:
			gone[v.Name] = true
			continue
		case v.Projected != nil:
			var kept []corev1.VolumeProjection
			for _, s := range v.Projected.Sources {
				if s.Secret == nil {
					kept = append(kept, s)
				}
			}
			if len(kept) == 0 {
				gone[v.Name] = true
				continue
			}
			v.Projected.Sources = kept
		}
		volumes = append(volumes, v)
	}
	pod.Volumes = volumes
	strip := func(cs []corev1.Container) {
		for i := range cs {
			c := &cs[i]
			var env []corev1.EnvVar
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					env = append(env, e)
				}
			}
			c.Env = env
			var from []corev1.EnvFromSource
			for _, f := range c.EnvFrom {
				if f.SecretRef == nil {
					from = append(from, f)
				}
			}
			c.EnvFrom = from
			var mounts []corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if !gone[m.Name] {
					mounts = append(mounts, m)
				}
			}
			c.VolumeMounts = mounts
		}
	}
	strip(pod.InitContainers)
	strip(pod.Containers)
}

// previewDecision is the decision string a preview Job's proof covers: it is not an execution Job,
// and the proof of one can never stand for the other (their names differ too).
const previewDecision = "preview"

// signPreview sets the preview Job's execution proof for tc.
func (k *ExecutionKey) signPreview(ctx context.Context, job *batchv1.Job, tc *tg.ToolCall) error {
	key, err := k.load(ctx)
	if err != nil {
		return err
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[tg.AnnotationExecutionProof] = proof(key, job.Namespace, job.Name, tc.UID, previewDecision)
	return nil
}

// createdPreview reports whether the manager created job as tc's preview Job.
func (k *ExecutionKey) createdPreview(ctx context.Context, job *batchv1.Job, tc *tg.ToolCall) (bool, error) {
	key, err := k.load(ctx)
	if err != nil {
		return false, err
	}
	want := proof(key, job.Namespace, job.Name, tc.UID, previewDecision)
	return hmac.Equal([]byte(job.Annotations[tg.AnnotationExecutionProof]), []byte(want)), nil
}

// previewProof is the MAC of a preview record of tc: every field of it but the proof and the time it
// was recorded, bound to the call.
func (k *ExecutionKey) previewProof(ctx context.Context, tc *tg.ToolCall, rec *tg.PreviewRecord) (string, error) {
	key, err := k.load(ctx)
	if err != nil {
		return "", err
	}
	covered, err := json.Marshal([]string{tc.Namespace, tc.Name, string(tc.UID), rec.JobName, rec.Output, string(rec.Format), rec.Digest, rec.Image, rec.ImageID, rec.Error})
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "toolgate.dev/preview-proof/v1\x00%s", covered)
	return "v1:" + hex.EncodeToString(m.Sum(nil)), nil
}

// checkPreview verifies status.preview, when there is one: a record the manager wrote becomes the
// scope's (its preview goes into every submission); any other is noted (sc.previewProblem) and the
// call ends without running (previewNotVerified).
func (r *Reconciler) checkPreview(ctx context.Context, sc *scope) error {
	rec := sc.tc.Status.Preview
	if rec == nil {
		return nil
	}
	want, err := r.ExecutionKey.previewProof(ctx, sc.tc, rec)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(rec.Proof), []byte(want)) {
		sc.previewProblem = "status.preview is not a record the manager wrote (its proof does not verify)"
		return nil
	}
	sc.usePreview(rec)
	return nil
}

// previewNotVerified ends a call whose status.preview the manager did not write: a best-effort
// cancel keeps a human from reviewing it (by the recorded id: the call's own request cannot be found
// again without the preview it was submitted with), and nothing runs.
func (r *Reconciler) previewNotVerified(ctx context.Context, sc *scope) (ctrl.Result, error) {
	r.cancelRecorded(ctx, sc)
	_, err := r.endWithoutRunning(ctx, sc, lifecycle.PreviewNotVerified.Status(sc.previewProblem))
	return ctrl.Result{}, err
}
