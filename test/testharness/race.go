package testharness

import (
	"context"
	"reflect"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
)

// StatusRace makes two replicas of the manager race for the first status write of one object: the
// harness's manager reads the object and holds its first status patch of it until a second manager
// (a replica, started only then, with its own cache, client and event recorder) has written that
// status from its own read. The manager's patch is thus made from a copy older than the status
// written, as when two replicas (or two reconciles of one replica, from a cache a write behind) check
// the same object at once.
type StatusRace struct {
	h       *Harness
	typ     reflect.Type
	key     types.NamespacedName
	held    chan struct{} // the manager holds its first status patch of the object
	written chan struct{} // the replica wrote the object's status
	patched chan struct{} // the manager's held patch returned
	mu      sync.Mutex
	err     error // what the manager's held patch returned
	once    [3]sync.Once
}

// raceTimeout bounds how long the manager holds its patch, so that a replica that never writes fails
// the test instead of hanging it.
const raceTimeout = 30 * time.Second

// RaceStatus prepares the race for the object of obj's type at key: it wraps the client of the next
// manager Start runs (use WithoutManager, then Start). Run starts the replica.
func (h *Harness) RaceStatus(obj client.Object, key types.NamespacedName) *StatusRace {
	r := &StatusRace{h: h, typ: reflect.TypeOf(obj), key: key,
		held: make(chan struct{}), written: make(chan struct{}), patched: make(chan struct{})}
	h.NewClient = r.newClient(func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if !r.first(0, sub, obj) {
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}
		close(r.held)
		select {
		case <-r.written:
		case <-time.After(raceTimeout):
		}
		err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(r.patched)
		return err
	})
	return r
}

// first reports whether this is the status patch of the raced object that step i waits for.
func (r *StatusRace) first(i int, sub string, obj client.Object) bool {
	if sub != "status" || reflect.TypeOf(obj) != r.typ || client.ObjectKeyFromObject(obj) != r.key {
		return false
	}
	hit := false
	r.once[i].Do(func() { hit = true })
	return hit
}

// newClient is the default client wrapped with controller-runtime's interceptor, its status patches
// going through patch.
func (r *StatusRace) newClient(patch func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error) client.NewClientFunc {
	return func(config *rest.Config, options client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(config, options)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(c, interceptor.Funcs{SubResourcePatch: patch}), nil
	}
}

// Run waits until the manager holds its first status patch of the object, starts the replica, and
// waits until the manager's patch returned; it returns what that patch returned.
func (r *StatusRace) Run() error {
	h := r.h
	h.T.Helper()
	h.G.Eventually(r.held).WithTimeout(raceTimeout).Should(BeClosed(), "the manager never wrote the status of %s", r.key)
	h.replica(r.newClient(func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		if err == nil && sub == "status" && reflect.TypeOf(obj) == r.typ && client.ObjectKeyFromObject(obj) == r.key {
			r.once[1].Do(func() { close(r.written) })
		}
		return err
	}))
	h.G.Eventually(r.written).WithTimeout(raceTimeout).Should(BeClosed(), "the replica never wrote the status of %s", r.key)
	h.G.Eventually(r.patched).WithTimeout(raceTimeout).Should(BeClosed())
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// replica runs a second manager beside the harness's, as a second replica of the Deployment would run
// while both serve (no leader election): the same options, its own cache, event recorder and client
// (newClient). It stops when the test ends.
func (h *Harness) replica(newClient client.NewClientFunc) {
	h.T.Helper()
	mo := controllers.ManagerOptions(h.Opts)
	mo.NewClient = newClient
	mo.Controller.SkipNameValidation = ptr.To(true)
	mgr, err := ctrl.NewManager(h.Env.Config, mo)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(controllers.Setup(mgr, h.Opts)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil && ctx.Err() == nil {
			h.T.Errorf("replica: %v", err)
		}
	}()
	h.T.Cleanup(func() { cancel(); <-done })
}

// ExpectReportedOnce runs the race (Run) and checks its outcome: Ready of obj (conditions reads them
// from it) says reason, the change was reported as one event of type eventType in ns, and the
// manager's patch from the older copy was refused with a Conflict.
func (r *StatusRace) ExpectReportedOnce(obj client.Object, conditions func() []metav1.Condition, ns, reason, eventType string) {
	h := r.h
	h.T.Helper()
	err := r.Run()
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), r.key, obj)).To(Succeed())
		ready := meta.FindStatusCondition(conditions(), tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(reason))
	}).Should(Succeed())
	h.ExpectEvents(ns, obj.GetUID(), map[string]int32{reason + "/" + eventType: 1})
	h.G.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the manager's patch from the older copy is refused, not %v", err)
}
