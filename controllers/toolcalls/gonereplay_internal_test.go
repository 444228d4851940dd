package toolcalls

import (
	"context"
	"sync/atomic"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The replay ends at the present it reads from a list of ToolCalls. A removal after that list and
// before holdGone's watch is added reaches neither, so the present is read only once that watch has
// synced: a replay started while it has not lists nothing, however long it waits.
func TestReplayReadsThePresentOnlyOnceTheRemovalsWatchSynced(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := tg.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "toolgate-system", Name: goneCursorLease,
		Annotations: map[string]string{tg.AnnotationGoneCursor: "40"}}}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease).Build()

	leaseRead := make(chan struct{}, 1)
	var lists atomic.Int32
	live := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			if _, ok := obj.(*coordinationv1.Lease); ok {
				leaseRead <- struct{}{}
			}
			return err
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists.Add(1)
			return c.List(ctx, list, opts...)
		},
	})
	r := &Reconciler{Clock: clocktesting.NewFakeClock(metav1.Now().Time)}
	g := &goneReplay{r: r, live: live, namespace: "toolgate-system", namespaces: []string{"ns"},
		replayed: make(chan event.TypedGenericEvent[*tg.ToolCall], 1)}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	<-leaseRead
	// holdGone's watch never synced: the replay is stopped as it waits.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if n := lists.Load(); n != 0 {
		t.Errorf("the replay listed ToolCalls %d times before holdGone's watch synced; it must read the present only after", n)
	}
	if _, ok := r.gone.position(); ok {
		t.Errorf("a position to save before the replay ran")
	}
}
