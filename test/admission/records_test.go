package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// TestOnlyTheManagerAndTheJobControllerMakeExecutionRecords: with config/admission/writers'
// execution-records policy installed, a user who may create and update Jobs and Pods (the `edit`
// role's rights) can neither create a Job that claims a ToolCall, by any of its marks, nor give an
// existing Job such a claim, nor create or relabel a Pod that the Job controller would count; the
// manager's ServiceAccount with its Pod's token creates such Jobs, impersonating the ServiceAccount
// does not, and the Job controller creates such Pods. Jobs and Pods that claim nothing stay free.
func TestOnlyTheManagerAndTheJobControllerMakeExecutionRecords(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	name := "execution-records-" + ns
	policy := writersFile(t, g, "execution_records.yaml", name, ns, ns, "toolgate-manager")
	editor := newCaller(g, "jane", "", "system:authenticated")
	manager := newPodCaller(g, "system:serviceaccount:"+ns+":toolgate-manager", "toolgate-controller-manager-7d9f8-abcde",
		"system:serviceaccounts", "system:authenticated")
	impostor := newCaller(g, manager.user, "", "system:serviceaccounts", "system:authenticated")
	jobController := newCaller(g, "system:serviceaccount:kube-system:job-controller", "", "system:serviceaccounts", "system:authenticated")
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workloads"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
	}}
	g.Expect(env.Client.Create(ctx, role)).To(Succeed())
	for _, c := range []*caller{editor, manager, jobController} {
		g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "workloads-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: c.user}},
		})).To(Succeed())
		for _, r := range []struct{ group, resource string }{{"batch", "jobs"}, {"", "pods"}} {
			g.Eventually(func(g Gomega) {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: c.user, Groups: c.groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: r.group, Resource: r.resource}}}
				g.Expect(env.Client.Create(ctx, sar)).To(Succeed())
				g.Expect(sar.Status.Allowed).To(BeTrue())
			}).WithTimeout(30 * time.Second).Should(Succeed())
		}
	}
	// denied is the start of a refusal: "Job" or "Pod", then the claims it adds, in parentheses.
	denied := func(user, kind string) string {
		claim := map[string]string{"Job": "Job that claims a ToolCall", "Pod": "Pod that claims a Job"}[kind]
		return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: user %s may not create a %s, or add such a claim to one (",
			policy, policy, user, claim)
	}
	const uid = "3f1e9b2a-8c4d-4e5f-a6b7-c8d9e0f1a2b3"
	job := func(change func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "refund-"}, Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "tool", Image: "example.com/issue-refund:1"}}}}}}
		change(j)
		return j
	}
	claimed := func(j *batchv1.Job) { j.Labels = map[string]string{tg.LabelToolCallUID: uid} }

	// The policy is in force once the editor's claiming Job is refused.
	g.Eventually(func() error { return editor.client.Create(ctx, job(claimed)) }).WithTimeout(30 * time.Second).Should(
		MatchError(And(ContainSubstring(denied(editor.user, "Job")+"label "+tg.LabelToolCallUID+"="+uid+")"),
			ContainSubstring("only the Toolgate manager ("+manager.user+", with its Pod's token) creates the Jobs that run tools"))))
	for what, change := range map[string]func(*batchv1.Job){
		"owner ToolCall refund " + uid: func(j *batchv1.Job) {
			j.OwnerReferences = []metav1.OwnerReference{{APIVersion: tg.GroupVersion.String(), Kind: "ToolCall", Name: "refund", UID: uid, Controller: ptr.To(true)}}
		},
		"annotation " + tg.AnnotationExecutionProof: func(j *batchv1.Job) {
			j.Annotations = map[string]string{tg.AnnotationExecutionProof: "copied-from-another-job"}
		},
		"template label " + tg.LabelToolCallUID + "=" + uid: func(j *batchv1.Job) {
			j.Spec.Template.Labels = map[string]string{tg.LabelToolCallUID: uid}
		},
	} {
		// (The apiserver copies a Job's template labels to the Job when it has none.)
		g.Expect(editor.client.Create(ctx, job(change))).To(MatchError(And(ContainSubstring(denied(editor.user, "Job")), ContainSubstring(what))), what)
	}
	g.Expect(impostor.client.Create(ctx, job(claimed))).To(MatchError(ContainSubstring(denied(impostor.user, "Job"))))
	ours := job(claimed)
	g.Expect(manager.client.Create(ctx, ours)).To(Succeed())

	// A Job that claims nothing is the editor's to make, but not to turn into a claim; the editor may
	// still change what is not a claim on the manager's Job.
	plain := job(func(*batchv1.Job) {})
	g.Expect(editor.client.Create(ctx, plain)).To(Succeed())
	claimed(plain)
	g.Expect(editor.client.Update(ctx, plain)).To(MatchError(ContainSubstring(denied(editor.user, "Job") + "label " + tg.LabelToolCallUID)))
	g.Expect(editor.client.Get(ctx, client.ObjectKeyFromObject(ours), ours)).To(Succeed())
	ours.Annotations = map[string]string{"example.com/note": "reviewed"}
	g.Expect(editor.client.Update(ctx, ours)).To(Succeed())

	// Pods: the Job controller's selector labels, Toolgate's label or an owner reference to a Job make a
	// Pod that a Job could count.
	pod := func(labels map[string]string, owners ...metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "refund-", Labels: labels, OwnerReferences: owners},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "tool", Image: "example.com/forged:1"}}}}
	}
	jobOwner := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: ours.Name, UID: ours.UID, Controller: ptr.To(true)}
	for what, p := range map[string]*corev1.Pod{
		"label " + tg.LabelToolCallUID + "=" + uid:                     pod(map[string]string{tg.LabelToolCallUID: uid}),
		"label batch.kubernetes.io/controller-uid=" + string(ours.UID): pod(map[string]string{batchv1.ControllerUidLabel: string(ours.UID)}),
		"label controller-uid=" + string(ours.UID):                     pod(map[string]string{"controller-uid": string(ours.UID)}),
		"owner Job " + ours.Name + " " + string(ours.UID):              pod(nil, jobOwner),
	} {
		g.Expect(editor.client.Create(ctx, p)).To(MatchError(And(ContainSubstring(denied(editor.user, "Pod")+what+")"),
			ContainSubstring("only the Job controller creates the Pods of Jobs"))), what)
		g.Expect(manager.client.Create(ctx, p.DeepCopy())).To(MatchError(ContainSubstring(denied(manager.user, "Pod"))), what)
	}
	g.Expect(jobController.client.Create(ctx, pod(map[string]string{tg.LabelToolCallUID: uid, batchv1.ControllerUidLabel: string(ours.UID)}, jobOwner))).To(Succeed())
	free := pod(map[string]string{"app": "debug"})
	g.Expect(editor.client.Create(ctx, free)).To(Succeed())
	free.Labels[batchv1.ControllerUidLabel] = string(ours.UID)
	g.Expect(editor.client.Update(ctx, free)).To(MatchError(ContainSubstring(denied(editor.user, "Pod") + "label " + batchv1.ControllerUidLabel)))
}
