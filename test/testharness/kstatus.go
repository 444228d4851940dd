package testharness

import (
	"context"
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
)

// argoFor is the Argo CD health that goes with each kstatus status: Argo CD and Flux must agree.
var argoFor = map[kstatus.Status]string{
	kstatus.CurrentStatus: "Healthy", kstatus.InProgressStatus: "Progressing", kstatus.FailedStatus: "Degraded",
}

// WaitKstatus waits until kstatus (what Flux's wait, kapply and Config Sync use) computes want, with a
// message that holds says, for the object of kind and key as the apiserver serves it, and checks that
// Argo CD's health check of config/argocd gives it the matching health.
func (h *Harness) WaitKstatus(kind string, key types.NamespacedName, want kstatus.Status, says string) {
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
func (h *Harness) readyEvents(g Gomega, ns string, uid types.UID) map[string]int32 {
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

// ExpectEvents waits until the events in ns about the object with uid are want (count by
// "reason/type"), and checks that they stay so: each change of Ready is reported once, not at every
// check.
func (h *Harness) ExpectEvents(ns string, uid types.UID, want map[string]int32) {
	h.T.Helper()
	h.G.Eventually(func(g Gomega) map[string]int32 { return h.readyEvents(g, ns, uid) }).WithTimeout(10 * time.Second).Should(Equal(want))
	h.G.Consistently(func(g Gomega) map[string]int32 { return h.readyEvents(g, ns, uid) }).WithTimeout(2 * time.Second).Should(Equal(want))
}

// WaitChecked waits until the controller wrote Ready for the object's current generation; conditions
// reads them from obj.
func (h *Harness) WaitChecked(obj client.Object, conditions func() []metav1.Condition) {
	h.T.Helper()
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		ready := meta.FindStatusCondition(conditions(), tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.ObservedGeneration).To(Equal(obj.GetGeneration()))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
