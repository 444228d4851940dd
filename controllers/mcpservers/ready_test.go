package mcpservers_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	race := h.RaceStatus(&tg.MCPServer{}, types.NamespacedName{Namespace: h.NS, Name: "everything"})
	h.Start()
	srv := mcpServer(h, "http://127.0.0.1:9/mcp", []string{"echo"}, func(s *tg.MCPServer) {
		s.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "missing", Key: "token"}}}
	})
	race.ExpectReportedOnce(srv, func() []metav1.Condition { return srv.Status.Conditions }, h.NS, tg.ReasonHeaderSecretUnavailable, corev1.EventTypeWarning)
}
