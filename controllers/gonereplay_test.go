package controllers_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// A ToolCall the apiserver removes despite its finalizer (a deletion that read it before the
// acceptance added the finalizer completes without looking again) while no manager runs leaves a
// request nobody waits for. The next manager withdraws it: the position in the ToolCall watch up to
// which such removals were withdrawn is kept in a Lease, and the new leader replays the watch from
// there. The removal is made here as the apiserver makes it, by deleting the stored object, so the
// watch shows the ToolCall removed with its finalizer.
func TestRemovalDespiteTheFinalizerWhileNoManagerRunsIsWithdrawnByTheNext(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 10*time.Minute, nil)
	tc := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	pending := h.PendingRequest("refund")

	// The manager has saved a position at or past the call's acceptance.
	accepted, err := strconv.ParseUint(tc.ResourceVersion, 10, 64)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		lease := &coordinationv1.Lease{}
		g.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "toolgate-gone-cursor"}, lease)).To(Succeed())
		pos, err := strconv.ParseUint(lease.Annotations[tg.AnnotationGoneCursor], 10, 64)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pos).To(BeNumerically(">=", accepted))
	}).WithTimeout(20 * time.Second).Should(Succeed())
	h.StopManager()

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{env.Env.ControlPlane.Etcd.URL.String()}, DialTimeout: 5 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = etcd.Close() })
	removed, err := etcd.Delete(ctx, "/registry/toolgate.dev/toolcalls/"+h.NS+"/refund")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed.Deleted).To(BeEquivalentTo(1))
	h.WaitGone("refund", 20*time.Second)
	g.Expect(h.Provider.Get(pending.ID)).To(HaveField("Status", provider.StatusPending), "nothing withdrew it yet")

	h.Start()
	g.Eventually(func() (string, error) {
		req, err := h.Provider.Get(pending.ID)
		return req.Status, err
	}).WithTimeout(30*time.Second).Should(Equal(provider.StatusCancelled), "the next manager withdrew the request")
	g.Expect(h.Jobs()).To(BeEmpty())
}
