package approvalprovider_test

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

// Two replicas that check a new ApprovalProvider at once both find no Ready condition (its
// credential's Secret is missing). The one whose status patch is written first reports the change;
// the other's patch, made from the older copy, is refused with a Conflict, and it reports nothing:
// the change of Ready is one event.
func TestReadyChangeIsReportedOnceWhenTwoReplicasRace(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	key := types.NamespacedName{Namespace: h.NS, Name: "raced"}
	race := h.RaceStatus(&tg.ApprovalProvider{}, key)
	h.Start()
	ap := h.ApprovalProvider("raced", h.URL, "missing")

	err := race.Run()
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), key, ap)).To(Succeed())
		ready := meta.FindStatusCondition(ap.Status.Conditions, tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(tg.ReasonCredentialUnavailable))
	}).Should(Succeed())
	h.ExpectEvents(h.NS, ap.UID, map[string]int32{tg.ReasonCredentialUnavailable + "/Warning": 1})
	h.G.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the manager's patch from the older copy is refused, not %v", err)
}
