package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

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
	labels := map[string]string{
		tg.LabelToolCallUID:  string(tc.UID),
		tg.LabelToolCallName: truncateLabel(tc.Name),
		tg.LabelToolName:     truncateLabel(tool.Spec.ToolName),
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        JobName(tc),
			Namespace:   tc.Namespace,
			Labels:      merge(tmpl.Labels, labels),
			Annotations: tmpl.Annotations,
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
	pod.Labels = merge(pod.Labels, labels)
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

func merge(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
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
