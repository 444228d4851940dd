package mcpserver_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// Two replicas that check a new MCPServer at once both find no Ready condition (its header's Secret
// does not exist, so neither reaches the server). The one whose status patch is written first
// reports the change; the other's patch, made from the older copy, is refused with a Conflict, and it
// reports nothing: the change of Ready is one event.
func TestReadyChangeIsReportedOnceWhenTwoReplicasRace(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	key := types.NamespacedName{Namespace: h.NS, Name: "everything"}
	race := h.RaceStatus(&tg.MCPServer{}, key)
	h.Start()
	srv := mcpServer(h, "http://127.0.0.1:9/mcp", []string{"echo"}, func(s *tg.MCPServer) {
		s.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "missing", Key: "token"}}}
	})

	err := race.Run()
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), key, srv)).To(Succeed())
		ready := meta.FindStatusCondition(srv.Status.Conditions, tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(tg.ReasonHeaderSecretUnavailable))
	}).Should(Succeed())
	h.ExpectEvents(h.NS, srv.UID, map[string]int32{tg.ReasonHeaderSecretUnavailable + "/Warning": 1})
	h.G.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the manager's patch from the older copy is refused, not %v", err)
}
