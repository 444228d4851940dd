package approvalproviders_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// An ApprovalProvider, against the harness's reference provider: a missing credential Secret and a
// credential the provider refuses (401) make it Failed (Stalled) for kstatus and Degraded for Argo
// CD; the right credential makes it Current and Healthy; an unreachable provider makes it
// InProgress and Progressing (Reconciling while the manager retries), and pointing spec.url back at
// the provider makes it Current again. Each change of Ready is one event; probes that find the same
// again, and a new generation with the same problem, emit none.
func TestKstatusOfAnApprovalProvider(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	ap := h.ApprovalProvider("team", h.URL, "old-credential")
	key := client.ObjectKeyFromObject(ap)
	h.WaitKstatus(tg.KindApprovalProvider, key, kstatus.FailedStatus, "no Secret "+h.NS+"/old-credential serves")
	h.ExpectEvents(h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1})

	// Another generation, still without its Secret.
	g.Expect(h.K8s.Get(ctx, key, ap)).To(Succeed())
	ap.Spec.CredentialSecretRef.Name = "team-credential"
	g.Expect(h.K8s.Update(ctx, ap)).To(Succeed())
	h.WaitChecked(ap, func() []metav1.Condition { return ap.Status.Conditions })
	h.WaitKstatus(tg.KindApprovalProvider, key, kstatus.FailedStatus, "no Secret "+h.NS+"/team-credential serves")

	h.CredentialSecret("team-credential", "tg-nobody-knows-this", th.Serves("team"))
	h.WaitKstatus(tg.KindApprovalProvider, key, kstatus.FailedStatus, "The provider refused the credential (401)")
	h.ExpectEvents(h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1})

	h.CredentialSecret("team-credential", th.Credential, th.Serves("team"))
	h.WaitKstatus(tg.KindApprovalProvider, key, kstatus.CurrentStatus, "")
	h.ExpectEvents(h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1, "Reachable/Normal": 1})

	addr, err := th.FreeAddr() // nothing listens there
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.K8s.Get(ctx, key, ap)).To(Succeed())
	ap.Spec.URL = "http://" + addr
	g.Expect(h.K8s.Update(ctx, ap)).To(Succeed())
	h.WaitKstatus(tg.KindApprovalProvider, key, kstatus.InProgressStatus, "The provider could not be read at http://"+addr)
	h.ExpectEvents(h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1, "Reachable/Normal": 1,
		"Unreachable/Warning": 1})

	g.Expect(h.K8s.Get(ctx, key, ap)).To(Succeed())
	ap.Spec.URL = h.URL
	g.Expect(h.K8s.Update(ctx, ap)).To(Succeed())
	h.WaitKstatus(tg.KindApprovalProvider, key, kstatus.CurrentStatus, "")
	h.ExpectEvents(h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1, "Reachable/Normal": 2,
		"Unreachable/Warning": 1})
}

// A ClusterApprovalProvider reads the same: Failed without its Secret, Current once the Secret is
// there, with its events in the default namespace (where the events of cluster-scoped objects go).
func TestKstatusOfAClusterApprovalProvider(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	name := "shared-" + h.NS
	cp := &tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tg.ApprovalProviderSpec{
		URL: h.URL, AllowInsecureHTTP: true, CredentialSecretRef: &tg.SecretKeyRef{Name: "shared-credential"},
	}}
	g.Expect(h.K8s.Create(context.Background(), cp)).To(Succeed())
	t.Cleanup(func() { _ = h.K8s.Delete(context.Background(), cp) })
	key := client.ObjectKeyFromObject(cp)
	h.WaitKstatus(tg.KindClusterApprovalProvider, key, kstatus.FailedStatus, "no Secret "+h.NS+"/shared-credential serves ClusterApprovalProvider "+name)
	h.ExpectEvents(metav1.NamespaceDefault, cp.UID, map[string]int32{"CredentialUnavailable/Warning": 1})

	// h.NS is the cluster resource namespace.
	h.CredentialSecret("shared-credential", th.Credential, map[string]string{tg.LabelClusterProvider: name})
	h.WaitKstatus(tg.KindClusterApprovalProvider, key, kstatus.CurrentStatus, "")
	h.ExpectEvents(metav1.NamespaceDefault, cp.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "Reachable/Normal": 1})
}
