package tool_test

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

// Two replicas that check a new Tool at once both find no Ready condition. The one whose status
// patch is written first reports the change; the other's patch, made from the older copy, is refused
// with a Conflict, and it reports nothing: the change of Ready is one event, whichever wins.
func TestReadyChangeIsReportedOnceWhenTwoReplicasRace(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	race := h.RaceStatus(&tg.Tool{}, types.NamespacedName{Namespace: h.NS, Name: "raced"})
	h.Start()
	tool := h.Tool("raced", "raced", `{"type":"object"}`)

	err := race.Run()
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "raced"}, tool)).To(Succeed())
		ready := meta.FindStatusCondition(tool.Status.Conditions, tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(tg.ReasonSpecCompiled))
	}).Should(Succeed())
	h.ExpectEvents(h.NS, tool.UID, map[string]int32{tg.ReasonSpecCompiled + "/Normal": 1})
	h.G.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the manager's patch from the older copy is refused, not %v", err)
}
