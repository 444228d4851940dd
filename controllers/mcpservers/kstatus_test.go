package mcpservers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/mcpeverything"
	th "toolgate.dev/toolgate/test/testharness"
)

// An MCPServer reads for kstatus and Argo CD as its Ready reason says: Current (Healthy) once its
// tools were listed, InProgress (Progressing) while its server is away, Failed (Degraded) on a header
// Secret that does not consent; each change of Ready is one event.
func TestKstatusOfAnMCPServer(t *testing.T) {
	h := th.New(t, env)
	everything := mcpeverything.Start(t)
	srv := mcpServer(h, everything.URL, []string{"echo"}, func(s *tg.MCPServer) {
		s.Spec.Headers = []tg.MCPHeader{{Name: "Authorization", SecretKeyRef: tg.SecretKeyRef{Name: "token", Key: "token"}}}
	})
	key := client.ObjectKeyFromObject(srv)
	h.WaitKstatus(tg.KindMCPServer, key, kstatus.FailedStatus, "no Secret "+h.NS+"/token serves MCPServer everything")
	h.ExpectEvents(h.NS, srv.UID, map[string]int32{"HeaderSecretUnavailable/Warning": 1})

	h.G.Expect(h.K8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: h.NS, Labels: map[string]string{tg.LabelMCPServer: "everything"}},
		StringData: map[string]string{"token": "Bearer x"},
	})).To(Succeed())
	h.WaitKstatus(tg.KindMCPServer, key, kstatus.CurrentStatus, "")
	everything.Stop()
	h.WaitKstatus(tg.KindMCPServer, key, kstatus.InProgressStatus, "Listing the tools of "+everything.URL+" failed")
	h.ExpectEvents(h.NS, srv.UID, map[string]int32{"HeaderSecretUnavailable/Warning": 1, "ToolsDiscovered/Normal": 1, "ServerUnreachable/Warning": 1})
}
