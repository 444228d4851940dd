package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/argohealth"
	th "toolgate.dev/toolgate/test/testharness"
)

// argoFor is the Argo CD health that goes with each kstatus status: Argo CD and Flux must agree.
var argoFor = map[kstatus.Status]string{
	kstatus.CurrentStatus: "Healthy", kstatus.InProgressStatus: "Progressing", kstatus.FailedStatus: "Degraded",
}

// waitKstatus waits until kstatus (what Flux's wait, kapply and Config Sync use) computes want, with a
// message that holds says, for the object of kind and key as the apiserver serves it, and checks that
// Argo CD's health check of config/argocd gives it the matching health.
func waitKstatus(h *th.Harness, kind string, key types.NamespacedName, want kstatus.Status, says string) {
	h.T.Helper()
	script, err := argohealth.Script(kind)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Eventually(func(g Gomega) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(tg.GroupVersion.WithKind(kind))
		g.Expect(h.K8s.Get(context.Background(), key, u)).To(Succeed())
		res, err := kstatus.Compute(u)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(want), res.Message)
		g.Expect(res.Message).To(ContainSubstring(says))
		health, err := argohealth.Run(script, u.Object)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(health.Status).To(Equal(argoFor[want]), health.Message)
	}).WithTimeout(40*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "%s %s", kind, key)
}

// readyEvents counts, by reason, the times the events in ns about the object with uid were emitted:
// an event emitted again within a few minutes is the same Event with a series count.
func readyEvents(g Gomega, h *th.Harness, ns string, uid types.UID) map[string]int32 {
	list := &eventsv1.EventList{}
	g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	got := map[string]int32{}
	for _, e := range list.Items {
		if e.Regarding.UID != uid {
			continue
		}
		g.Expect(e.Action).To(Equal("Check"))
		n := int32(1)
		if e.Series != nil {
			n = e.Series.Count
		}
		got[e.Reason+"/"+e.Type] += n
	}
	return got
}

// expectEvents waits until the events about the object are want, and checks that they stay so: each
// change of Ready is reported once, not at every check.
func expectEvents(h *th.Harness, ns string, uid types.UID, want map[string]int32) {
	h.T.Helper()
	h.G.Eventually(func(g Gomega) map[string]int32 { return readyEvents(g, h, ns, uid) }).WithTimeout(10 * time.Second).Should(Equal(want))
	h.G.Consistently(func(g Gomega) map[string]int32 { return readyEvents(g, h, ns, uid) }).WithTimeout(2 * time.Second).Should(Equal(want))
}

// waitChecked waits until the controller wrote Ready for the object's current generation; conditions
// reads them from obj.
func waitChecked(h *th.Harness, obj client.Object, conditions func() []metav1.Condition) {
	h.T.Helper()
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		ready := meta.FindStatusCondition(conditions(), tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.ObservedGeneration).To(Equal(obj.GetGeneration()))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// A Tool whose rules compile is Current for kstatus and Healthy for Argo CD; rules that do not
// compile make it Failed (Stalled) and Degraded, with the compiler's message; fixing them makes it
// Current again. Each change of Ready is one event on the Tool; a new generation that changes
// nothing about Ready emits none.
func TestKstatusOfATool(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	tool := h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	key := client.ObjectKeyFromObject(tool)
	waitKstatus(h, "Tool", key, kstatus.CurrentStatus, "")
	expectEvents(h, h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 1})

	g.Expect(h.K8s.Get(ctx, key, tool)).To(Succeed())
	tool.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "small", Expression: "amout < 5000", Action: tg.ActionApprove}}}
	g.Expect(h.K8s.Update(ctx, tool)).To(Succeed())
	waitKstatus(h, "Tool", key, kstatus.FailedStatus, "spec.approval.rules[0] (small): expression does not compile")
	expectEvents(h, h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 1, "InvalidApprovalRules/Warning": 1})

	// Another generation with the same problem: checked again, reported no more.
	g.Expect(h.K8s.Get(ctx, key, tool)).To(Succeed())
	tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: time.Minute}
	g.Expect(h.K8s.Update(ctx, tool)).To(Succeed())
	waitChecked(h, tool, func() []metav1.Condition { return tool.Status.Conditions })
	waitKstatus(h, "Tool", key, kstatus.FailedStatus, "")
	expectEvents(h, h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 1, "InvalidApprovalRules/Warning": 1})

	g.Expect(h.K8s.Get(ctx, key, tool)).To(Succeed())
	tool.Spec.Approval.Rules[0].Expression = "arguments.amount < 5000"
	g.Expect(h.K8s.Update(ctx, tool)).To(Succeed())
	waitKstatus(h, "Tool", key, kstatus.CurrentStatus, "")
	expectEvents(h, h.NS, tool.UID, map[string]int32{"SpecCompiled/Normal": 2, "InvalidApprovalRules/Warning": 1})
}

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
	ap := approvalProvider(h, "team", h.URL, "old-credential")
	key := client.ObjectKeyFromObject(ap)
	waitKstatus(h, tg.KindApprovalProvider, key, kstatus.FailedStatus, "no Secret "+h.NS+"/old-credential serves")
	expectEvents(h, h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1})

	// Another generation, still without its Secret.
	g.Expect(h.K8s.Get(ctx, key, ap)).To(Succeed())
	ap.Spec.CredentialSecretRef.Name = "team-credential"
	g.Expect(h.K8s.Update(ctx, ap)).To(Succeed())
	waitChecked(h, ap, func() []metav1.Condition { return ap.Status.Conditions })
	waitKstatus(h, tg.KindApprovalProvider, key, kstatus.FailedStatus, "no Secret "+h.NS+"/team-credential serves")

	credentialSecret(h, "team-credential", "tg-nobody-knows-this", serves("team"))
	waitKstatus(h, tg.KindApprovalProvider, key, kstatus.FailedStatus, "The provider refused the credential (401)")
	expectEvents(h, h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1})

	credentialSecret(h, "team-credential", th.Credential, serves("team"))
	waitKstatus(h, tg.KindApprovalProvider, key, kstatus.CurrentStatus, "")
	expectEvents(h, h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1, "Reachable/Normal": 1})

	addr, err := th.FreeAddr() // nothing listens there
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.K8s.Get(ctx, key, ap)).To(Succeed())
	ap.Spec.URL = "http://" + addr
	g.Expect(h.K8s.Update(ctx, ap)).To(Succeed())
	waitKstatus(h, tg.KindApprovalProvider, key, kstatus.InProgressStatus, "The provider could not be read at http://"+addr)
	expectEvents(h, h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1, "Reachable/Normal": 1,
		"Unreachable/Warning": 1})

	g.Expect(h.K8s.Get(ctx, key, ap)).To(Succeed())
	ap.Spec.URL = h.URL
	g.Expect(h.K8s.Update(ctx, ap)).To(Succeed())
	waitKstatus(h, tg.KindApprovalProvider, key, kstatus.CurrentStatus, "")
	expectEvents(h, h.NS, ap.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "CredentialRejected/Warning": 1, "Reachable/Normal": 2,
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
	waitKstatus(h, tg.KindClusterApprovalProvider, key, kstatus.FailedStatus, "no Secret "+h.NS+"/shared-credential serves ClusterApprovalProvider "+name)
	expectEvents(h, metav1.NamespaceDefault, cp.UID, map[string]int32{"CredentialUnavailable/Warning": 1})

	// h.NS is the cluster resource namespace.
	credentialSecret(h, "shared-credential", th.Credential, map[string]string{tg.LabelClusterProvider: name})
	waitKstatus(h, tg.KindClusterApprovalProvider, key, kstatus.CurrentStatus, "")
	expectEvents(h, metav1.NamespaceDefault, cp.UID, map[string]int32{"CredentialUnavailable/Warning": 1, "Reachable/Normal": 1})
}
