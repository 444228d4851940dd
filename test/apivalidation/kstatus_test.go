package apivalidation_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// A ToolCall as the apiserver serves it before any controller wrote its status: kstatus (what Flux's
// wait, kapply and Config Sync use) reports it InProgress, not Current, so a pipeline that applies a
// ToolCall and waits for it does not pass before the call was even looked at.
func TestKstatusOfANewToolCallIsInProgress(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	tc := validToolCall(ns, "refund")
	g.Expect(k8s.Create(context.Background(), tc)).To(Succeed())

	u := &unstructured.Unstructured{Object: createdU(g, tc)}
	g.Expect(u.Object).To(HaveKeyWithValue("status", HaveKeyWithValue("observedGeneration", BeEquivalentTo(0))),
		"the CRD's default describes no generation yet")
	res, err := kstatus.Compute(u)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(kstatus.InProgressStatus))
	g.Expect(res.Message).To(Equal("ToolCall generation is 1, but latest observed generation is 0"))
}

// Likewise a Tool, an ApprovalProvider and a ClusterApprovalProvider the manager has not checked yet:
// InProgress, so that a pipeline that waits on them does not pass before their rules compiled or
// their credential was tried.
func TestKstatusOfNewToolsAndProvidersIsInProgress(t *testing.T) {
	ns := newNamespace(t)
	for kind, obj := range map[string]client.Object{
		"Tool":                         validTool(ns, "issue-refund"),
		tg.KindApprovalProvider:        &tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}, Spec: validProviderSpec()},
		tg.KindClusterApprovalProvider: &tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: validProviderSpec()},
	} {
		t.Run(kind, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(k8s.Create(context.Background(), obj)).To(Succeed())
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(tg.GroupVersion.WithKind(kind))
			g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), u)).To(Succeed())
			g.Expect(u.Object).To(HaveKeyWithValue("status", HaveKeyWithValue("observedGeneration", BeEquivalentTo(0))),
				"the CRD's default describes no generation yet")
			res, err := kstatus.Compute(u)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Status).To(Equal(kstatus.InProgressStatus))
			g.Expect(res.Message).To(Equal(kind + " generation is 1, but latest observed generation is 0"))
		})
	}
}
