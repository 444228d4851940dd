package tools_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	race.ExpectReportedOnce(tool, func() []metav1.Condition { return tool.Status.Conditions }, h.NS, tg.ReasonSpecCompiled, corev1.EventTypeNormal)
}
