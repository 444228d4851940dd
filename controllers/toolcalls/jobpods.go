package toolcalls

import (
	"context"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/mcpcall"
)

// The kubelet's waiting reasons for a container whose image the node does not have and cannot get
// (k8s.io/kubernetes/pkg/kubelet/images). ErrImagePull and ImagePullBackOff alternate while the
// kubelet retries; both are reported as one problem so that the ToolCall's status does not churn.
var imageWaitingReasons = map[string]string{
	"ErrImageNeverPull": "ErrImageNeverPull",
	"ErrImagePull":      "ErrImagePull",
	"ImagePullBackOff":  "ErrImagePull",
	"InvalidImageName":  "InvalidImageName",
	"ImageInspectError": "ImageInspectError",
}

// imageWait is a container of the tool's Pod that waits for an image the node cannot provide.
type imageWait struct {
	container, image string
	// reason is the kubelet's waiting reason, with ImagePullBackOff folded into ErrImagePull.
	reason string
}

// what says, in the status message's words, why the image cannot be had.
func (w imageWait) what() string {
	switch w.reason {
	case "ErrImageNeverPull":
		return fmt.Sprintf("the node does not have image %s and the container's imagePullPolicy is Never", w.image)
	case "InvalidImageName":
		return fmt.Sprintf("image name %s is not valid", w.image)
	case "ImageInspectError":
		return fmt.Sprintf("the node cannot inspect image %s", w.image)
	default:
		return fmt.Sprintf("the node cannot pull image %s", w.image)
	}
}

// waitingForImage returns the container that keeps the Job's only Pods from starting for want of its
// image, or nil. It is reported only while nothing of the tool can have run: the Job counts no
// finished Pod, and no container (init containers included) of any of its Pods has started or
// terminated, now or before.
func waitingForImage(job *batchv1.Job, pods []corev1.Pod) *imageWait {
	if len(pods) == 0 || job.Status.Succeeded > 0 || job.Status.Failed > 0 {
		return nil
	}
	var found *imageWait
	for i := range pods {
		p := &pods[i]
		images := map[string]string{}
		for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
			images[c.Name] = c.Image
		}
		for _, cs := range statuses(p) {
			if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil || cs.RestartCount > 0 {
				return nil
			}
			if w := cs.State.Waiting; w != nil && found == nil {
				if reason, ok := imageWaitingReasons[w.Reason]; ok {
					image := images[cs.Name]
					if image == "" {
						image = cs.Image
					}
					found = &imageWait{container: cs.Name, image: image, reason: reason}
				}
			}
		}
	}
	return found
}

// statuses are the states of a Pod's init containers and containers, in that order.
func statuses(p *corev1.Pod) []corev1.ContainerStatus {
	return slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
}

// containerStarted reports whether any container of the Job's Pods has been seen started: running,
// or terminated (now or before) after a start. A container killed before it ever started (the Job's
// deadline ending a wait for an image) terminates without a start time, which is no such evidence.
func containerStarted(pods []corev1.Pod) bool {
	for i := range pods {
		p := &pods[i]
		for _, cs := range statuses(p) {
			if cs.State.Running != nil || cs.RestartCount > 0 ||
				(cs.State.Terminated != nil && !cs.State.Terminated.StartedAt.IsZero()) ||
				(cs.LastTerminationState.Terminated != nil && !cs.LastTerminationState.Terminated.StartedAt.IsZero()) {
				return true
			}
		}
	}
	return false
}

// imageUnavailable records that the tool's container has not started for want of its image: the call
// stays Running (its Job exists) with reason ImageUnavailable until the image arrives or the Job's
// deadline ends it.
func imageUnavailable(tc *tg.ToolCall, w *imageWait) {
	setStatus(tc, lifecycle.ImageWaiting.Status(tc.Status.JobName, w.container, w.what(), w.reason))
}

// imageUnavailableFailed is the outcome of a Job that failed while its container waited for its
// image, as the kubelet last reported it: the body of the saved Running message says which container
// and image.
func imageUnavailableFailed(tc *tg.ToolCall, job *batchv1.Job) {
	why := jobEndOf(job).failure
	if why == "" {
		why = "the Job failed"
	}
	setStatus(tc, lifecycle.ImageNeverArrived.Status(why, lifecycle.ImageWaiting.Body(tc.Status.Message)))
}

// SlimPod keeps of a cached Pod what observePods reads (its identity, owner and labels, its
// containers' names and images, and its containers' states), so that the Pods of finished Jobs, which
// stay as long as their Jobs, cost the manager little memory.
func SlimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences,
		},
		Status: corev1.PodStatus{
			Phase:                 p.Status.Phase,
			InitContainerStatuses: p.Status.InitContainerStatuses,
			ContainerStatuses:     p.Status.ContainerStatuses,
		},
	}
	for _, c := range p.Spec.InitContainers {
		slim.Spec.InitContainers = append(slim.Spec.InitContainers, corev1.Container{Name: c.Name, Image: c.Image})
	}
	for _, c := range p.Spec.Containers {
		slim.Spec.Containers = append(slim.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
	}
	return slim, nil
}

// podToToolCall maps a Pod of one of Toolgate's Jobs to the ToolCall that owns the Job.
func podToToolCall(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		owner := metav1.GetControllerOf(o)
		if owner == nil || owner.Kind != "Job" {
			return nil
		}
		job := &batchv1.Job{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: owner.Name}, job); err != nil {
			return nil
		}
		tc := metav1.GetControllerOf(job)
		if tc == nil || tc.Kind != "ToolCall" || tc.APIVersion != tg.GroupVersion.String() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: tc.Name}}}
	}
}

// imageWaitChanged lets through only the Pod events that start or end a wait for an image, so that
// the ordinary life of a tool's Pod costs the controller nothing: the Job's own events report it.
func imageWaitChanged() predicate.Funcs {
	waiting := func(o client.Object) string {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return ""
		}
		for _, cs := range statuses(p) {
			if w := cs.State.Waiting; w != nil {
				if reason, ok := imageWaitingReasons[w.Reason]; ok {
					return cs.Name + "/" + reason
				}
			}
		}
		return ""
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return waiting(e.Object) != "" },
		UpdateFunc:  func(e event.UpdateEvent) bool { return waiting(e.ObjectOld) != waiting(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// mcpCallLost reports whether a failed Job's executor, the container mcp-call of the Tools MCPServers
// generate, may have sent the call: the tool may have run. It fails closed: once mcp-call has
// started, only its own words prove the tool did not run or say how it ended (exit 2 with its "not
// called" message, exit 4 with its "did not run" message, exit 1 with the tool's own error); any
// other end (exit 3, a kill for memory, an eviction, a signal, the Job's deadline stopping it while it
// ran, a container the kubelet lost track of, a Go runtime crash, which also exits 2) may have come
// after the call was sent. A container that never started (still waiting, or terminated without a
// start time by the kubelet itself) ran nothing. Another Tool whose container is so named gets the
// same reading, for its own calls.
func mcpCallLost(pods []corev1.Pod) bool {
	for i := range pods {
		for _, cs := range pods[i].Status.ContainerStatuses {
			if cs.Name == mcpcall.Container && mcpExecutorMayHaveSent(cs) {
				return true
			}
		}
	}
	return false
}

// mcpExecutorMayHaveSent reads one status of the mcp-call container (see mcpCallLost).
func mcpExecutorMayHaveSent(cs corev1.ContainerStatus) bool {
	if cs.RestartCount > 0 || cs.State.Running != nil {
		return true
	}
	if last := cs.LastTerminationState.Terminated; last != nil && !neverStarted(last) {
		return true
	}
	t := cs.State.Terminated
	switch {
	case t == nil:
		return false
	case mcpCallOwnOutcome(t):
		return false
	case t.ExitCode == mcpcall.ExitMayHaveRun:
		return true
	}
	return !neverStarted(t)
}

// neverStarted reports whether a terminated container never ran: no start time, and not the
// kubelet's "status unknown" (it writes that for a container it lost track of, which may have run).
func neverStarted(t *corev1.ContainerStateTerminated) bool {
	return t.StartedAt.IsZero() && t.Reason != containerStatusUnknown
}

// containerStatusUnknown is the kubelet's reason for a container it could not locate when the Pod
// was deleted or terminated (k8s.io/kubernetes/pkg/kubelet/container.ContainerReasonStatusUnknown).
const containerStatusUnknown = "ContainerStatusUnknown"

// mcpCallOwnOutcome reports whether the terminated mcp-call container ended with one of its own
// outcomes that settle whether the tool ran: the tool's error (exit 1), the call never sent (exit 2),
// the server's refusal (exit 4), each with the message mcp-call writes for it. The kubelet's own
// reasons (OOMKilled, ContainerStatusUnknown) and a Go runtime crash (exit 2 without mcp-call's
// message) are not such outcomes.
func mcpCallOwnOutcome(t *corev1.ContainerStateTerminated) bool {
	if t.Reason == "OOMKilled" || t.Reason == containerStatusUnknown || t.Signal != 0 {
		return false
	}
	switch t.ExitCode {
	case mcpcall.ExitToolError:
		return t.Message != ""
	case mcpcall.ExitNotRun:
		return strings.HasSuffix(t.Message, mcpcall.NotCalled)
	case mcpcall.ExitRefused:
		return strings.HasSuffix(t.Message, mcpcall.DidNotRun)
	}
	return false
}

// mcpJobLostWithoutPods reports whether a failed Job of an MCPServer's Tool (its template runs the
// container mcp-call) left no Pod to read although one of its Pods failed: deleted with a lost node
// or by someone, after it may have sent the call. Nothing says the tool did not run, so it may
// have. It is mcpCallLost's complement for a Job whose Pods are gone; observeJob reads both:
// `case mcpCallLost(pods) || mcpJobLostWithoutPods(job, pods):`.
func mcpJobLostWithoutPods(job *batchv1.Job, pods []corev1.Pod) bool {
	if len(pods) > 0 || job.Status.Failed == 0 {
		return false
	}
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == mcpcall.Container {
			return true
		}
	}
	return false
}

// getJob returns the Job under key, or nil when there is none: from the cache if it holds it, else
// from the apiserver (a cache that has not seen it yet proves nothing).
func (r *Reconciler) getJob(ctx context.Context, key types.NamespacedName) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	if err := r.Get(ctx, key, job); err != nil {
		switch err := r.APIReader.Get(ctx, key, job); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("reading Job %s: %w", key.Name, err)
		}
	}
	return job, nil
}
