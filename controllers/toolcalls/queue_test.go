package toolcalls

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// What the waiter reports is taken before the follow-ups already queued: a decision does not wait
// behind the watch events of the controller's own writes.
func TestWaiterEventsGoFirst(t *testing.T) {
	g := NewWithT(t)
	q := priorityqueue.New[reconcile.Request]("waiter-events-go-first")
	defer q.ShutDown()
	followUps := []reconcile.Request{
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "written"}},
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "job-changed"}},
	}
	q.Add(followUps[0])
	q.Add(followUps[1])
	decided := &tg.ToolCall{}
	decided.Namespace, decided.Name = "ns", "decided"
	enqueueFirst().Generic(context.Background(), event.TypedGenericEvent[*tg.ToolCall]{Object: decided}, q)
	g.Expect(q.Len()).To(Equal(3))

	first, priority, _ := q.GetWithPriority()
	g.Expect(first.NamespacedName).To(Equal(types.NamespacedName{Namespace: "ns", Name: "decided"}))
	g.Expect(priority).To(Equal(decisionPriority))
	q.Done(first)
	for _, want := range followUps {
		next, priority, _ := q.GetWithPriority()
		g.Expect(next).To(Equal(want))
		g.Expect(priority).To(BeZero())
		q.Done(next)
	}
}
