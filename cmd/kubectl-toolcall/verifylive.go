package main

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/receipt"
)

// gone is the note for an object the receipt names that no longer exists.
const gone = "is gone: cannot be checked against the live object"

// checkLive checks the receipt's predicate against the live objects it names: the Job and its Pod
// (and each container's image digest) for a call that ran, the absence of any Job for one that did
// not, and the Tool the call was accepted against.
func checkLive(ctx context.Context, r client.Reader, tc *tg.ToolCall, v *receipt.Verified, rep *report) {
	p := &v.Predicate
	if p.Outcome.Ran {
		checkExecution(ctx, r, tc, p.Execution, rep)
	} else {
		checkNoJob(ctx, r, tc, p.Execution, rep)
	}
	checkTool(ctx, r, tc.Namespace, &p.Tool, rep)
}

// get reads one object; found is false when it does not exist. Other errors are reported as failures.
func get(ctx context.Context, r client.Reader, ns, name string, obj client.Object, what string, rep *report) (found bool) {
	err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		rep.note("%s %s %s", what, name, gone)
		return false
	case err != nil:
		rep.fail("%s %s: reading it: %v (verify needs get on ToolCalls, Tools, Jobs and Pods, and list on Jobs)", what, name, err)
		return false
	}
	return true
}

func checkExecution(ctx context.Context, r client.Reader, tc *tg.ToolCall, ex *receipt.Execution, rep *report) {
	if ex == nil {
		rep.fail("job: the receipt says the tool ran, but names no Job")
		return
	}
	if ex.JobName != tc.Status.JobName || ex.JobUID != string(tc.Status.JobUID) {
		rep.fail("job: the receipt names Job %s (uid %s), the ToolCall's status Job %s (uid %s)", ex.JobName, ex.JobUID, tc.Status.JobName, tc.Status.JobUID)
	}
	job := &batchv1.Job{}
	if get(ctx, r, tc.Namespace, ex.JobName, job, "job:", rep) {
		if string(job.UID) == ex.JobUID {
			rep.ok("job: %s exists with uid %s", ex.JobName, ex.JobUID)
		} else {
			rep.fail("job: %s exists with uid %s, but the receipt names uid %s: it is another Job, made after the call ran", ex.JobName, job.UID, ex.JobUID)
		}
	}
	if ex.PodName == "" {
		rep.note("pod: the receipt names no Pod (none was found when the Job ended)")
		return
	}
	pod := &corev1.Pod{}
	if !get(ctx, r, tc.Namespace, ex.PodName, pod, "pod:", rep) {
		return
	}
	if string(pod.UID) != ex.PodUID {
		rep.fail("pod: %s exists with uid %s, but the receipt names uid %s: it is another Pod", ex.PodName, pod.UID, ex.PodUID)
		return
	}
	if owner := metav1.GetControllerOf(pod); owner == nil || string(owner.UID) != ex.JobUID {
		rep.fail("pod: %s (uid %s) is not controlled by the receipt's Job (uid %s)", ex.PodName, pod.UID, ex.JobUID)
	} else {
		rep.ok("pod: %s exists with uid %s, controlled by the receipt's Job (uid %s)", ex.PodName, ex.PodUID, ex.JobUID)
	}
	if pod.Spec.NodeName == ex.NodeName {
		rep.ok("pod: ran on node %q", ex.NodeName)
	} else {
		rep.fail("pod: the receipt says node %q, the Pod ran on %q", ex.NodeName, pod.Spec.NodeName)
	}
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, c := range ex.Containers {
		checkContainer(c, statuses, rep)
	}
}

// checkContainer compares a container's image as the receipt names it with the Pod's containerStatuses.
func checkContainer(c receipt.Container, statuses []corev1.ContainerStatus, rep *report) {
	i := -1
	for j := range statuses {
		if statuses[j].Name == c.Name {
			i = j
		}
	}
	if i < 0 {
		rep.fail("container %s: not in the Pod's containerStatuses", c.Name)
		return
	}
	live := statuses[i].ImageID
	switch {
	case c.ImageID == "" && live == "":
		rep.note("container %s: no image digest to compare (the kubelet reported no imageID); image %s", c.Name, c.Image)
	case c.ImageDigest != "" && receipt.ImageDigest(live) == c.ImageDigest:
		rep.ok("container %s: image %s at %s, as the Pod reports", c.Name, c.Image, c.ImageDigest)
	case c.ImageDigest == "" && live == c.ImageID:
		rep.ok("container %s: image %s, imageID %s, as the Pod reports", c.Name, c.Image, c.ImageID)
	default:
		rep.fail("container %s: the receipt names image %s (%s), the Pod reports %s", c.Name, c.ImageID, c.ImageDigest, live)
	}
}

// checkNoJob checks that a call whose receipt says it did not run has no Job.
func checkNoJob(ctx context.Context, r client.Reader, tc *tg.ToolCall, ex *receipt.Execution, rep *report) {
	if ex != nil {
		rep.fail("job: the receipt says the tool did not run, but names Job %s (uid %s)", ex.JobName, ex.JobUID)
	}
	jobs := &batchv1.JobList{}
	if err := r.List(ctx, jobs, client.InNamespace(tc.Namespace), client.MatchingLabels{tg.LabelToolCallUID: string(tc.UID)}); err != nil {
		rep.fail("job: listing the Jobs of the ToolCall: %v (verify needs list on Jobs)", err)
		return
	}
	var names []string
	for _, j := range jobs.Items {
		if j.Labels[tg.LabelPreview] == "true" {
			continue // a preview Job says what the call would do; it never runs the tool
		}
		names = append(names, j.Name)
	}
	if tc.Status.JobName != "" {
		job := &batchv1.Job{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: tc.Namespace, Name: tc.Status.JobName}, job); err == nil && len(names) == 0 {
			names = append(names, job.Name)
		}
	}
	if len(names) > 0 {
		rep.fail("job: the receipt says the tool did not run, but Job %s exists for the ToolCall", strings.Join(names, ", "))
		return
	}
	rep.ok("job: none exists, as the tool did not run")
}

// checkTool checks the Tool the call was accepted against: the same object (uid), and whether it
// changed since (generation, spec digest).
func checkTool(ctx context.Context, r client.Reader, ns string, t *receipt.Tool, rep *report) {
	if t.UID == "" {
		rep.note("tool: the receipt names no Tool version (the call ended before it was accepted against one)")
		return
	}
	tool := &tg.Tool{}
	if !get(ctx, r, ns, t.Name, tool, "tool:", rep) {
		return
	}
	if string(tool.UID) != t.UID {
		// A Tool deleted and created again since the call is ordinary: the receipt was true of the
		// Tool it names, which cannot be checked any more.
		rep.note("tool: %s exists with uid %s, but the receipt names uid %s: it is another Tool of that name, created since the call; the receipt's cannot be checked against the live object", t.Name, tool.UID, t.UID)
		return
	}
	if tool.Generation != t.Generation {
		rep.ok("tool: %s exists with uid %s", t.Name, t.UID)
		rep.note("tool: %s changed since the call: now generation %d, the call was accepted at generation %d", t.Name, tool.Generation, t.Generation)
		return
	}
	if t.SpecDigest != "" {
		if d := toolSpecDigest(tool); d != t.SpecDigest {
			// The apiserver bumps the generation on every change of spec, so the same generation
			// with another digest is a plugin that writes the spec otherwise (another version's
			// fields), not a changed Tool.
			rep.note("tool: %s is still at generation %d, but its spec digest here is %s, not the receipt's %s: this plugin may be of another version than the manager", t.Name, t.Generation, d, t.SpecDigest)
			return
		}
	}
	rep.ok("tool: %s exists with uid %s, still at generation %d", t.Name, t.UID, t.Generation)
}

// toolSpecDigest is the digest of the Tool's spec as the manager writes it (receipt.SpecDigest).
func toolSpecDigest(t *tg.Tool) string {
	d, err := receipt.SpecDigest(t.Spec)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return d
}
