package apivalidation_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
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
