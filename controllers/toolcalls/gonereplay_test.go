package toolcalls_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

const goneCursorLease = "toolgate-gone-cursor"

// goneScenario is a call awaiting approval whose manager saved a position at or past its acceptance
// and was stopped.
type goneScenario struct {
	h       *th.Harness
	pending provider.Request
	etcd    *clientv3.Client
}

func newGoneScenario(t *testing.T) *goneScenario {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 10*time.Minute, nil)
	tc := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	pending := h.PendingRequest("refund")

	accepted, err := strconv.ParseUint(tc.ResourceVersion, 10, 64)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(savedCursor(ctx, h)).To(BeNumerically(">=", accepted))
	}).WithTimeout(20 * time.Second).Should(Succeed())
	h.StopManager()

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{env.Env.ControlPlane.Etcd.URL.String()}, DialTimeout: 5 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = etcd.Close() })
	return &goneScenario{h: h, pending: pending, etcd: etcd}
}

// remove removes the ToolCall as the apiserver does when a deletion that read it before the
// acceptance added the finalizer completes: by deleting the stored object, so that the watch shows it
// removed with its finalizer.
func (s *goneScenario) remove() {
	g := s.h.G
	removed, err := s.etcd.Delete(context.Background(), "/registry/toolgate.dev/toolcalls/"+s.h.NS+"/refund")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed.Deleted).To(BeEquivalentTo(1))
	s.h.WaitGone("refund", 20*time.Second)
}

// withdrawn waits until the request of the removed call is cancelled, and checks nothing ran.
func (s *goneScenario) withdrawn(msg string) {
	g := s.h.G
	g.Eventually(func() (string, error) {
		req, err := s.h.Provider.Get(s.pending.ID)
		return req.Status, err
	}).WithTimeout(30*time.Second).Should(Equal(provider.StatusCancelled), msg)
	g.Expect(s.h.Jobs()).To(BeEmpty())
}

func savedCursor(ctx context.Context, h *th.Harness) (uint64, error) {
	lease := &coordinationv1.Lease{}
	if err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: goneCursorLease}, lease); err != nil {
		return 0, err
	}
	return strconv.ParseUint(lease.Annotations[tg.AnnotationGoneCursor], 10, 64)
}

func setCursor(ctx context.Context, h *th.Harness, pos uint64) {
	lease := &coordinationv1.Lease{}
	h.G.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: goneCursorLease}, lease)).To(Succeed())
	lease.Annotations[tg.AnnotationGoneCursor] = strconv.FormatUint(pos, 10)
	h.G.Expect(h.K8s.Update(ctx, lease)).To(Succeed())
}

// present is the apiserver's current position in the ToolCall watch.
func present(ctx context.Context, h *th.Harness) uint64 {
	list := &tg.ToolCallList{}
	h.G.Expect(h.K8s.List(ctx, list, client.InNamespace(h.NS), client.Limit(1))).To(Succeed())
	v, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	h.G.Expect(err).NotTo(HaveOccurred())
	return v
}

// A ToolCall the apiserver removes despite its finalizer (a deletion that read it before the
// acceptance added the finalizer completes without looking again) while no manager runs leaves a
// request nobody waits for. The next manager withdraws it: the position in the ToolCall watch up to
// which such removals were withdrawn is kept in a Lease, and the new leader replays the watch from
// there.
func TestRemovalDespiteTheFinalizerWhileNoManagerRunsIsWithdrawnByTheNext(t *testing.T) {
	s := newGoneScenario(t)
	s.remove()
	s.h.G.Expect(s.h.Provider.Get(s.pending.ID)).To(HaveField("Status", provider.StatusPending), "nothing withdrew it yet")
	s.h.Start()
	s.withdrawn("the next manager withdrew the request")
}

// gatedCache holds back every request for the ToolCall informer made after the cache started (the
// controller's watches, holdGone's among them, adding their handlers) until gate returns: what the
// informer sees meanwhile reaches no handler of the controller.
type gatedCache struct {
	cache.Cache
	mu      sync.Mutex
	started bool
	once    sync.Once
	gate    func()
}

func (c *gatedCache) Start(ctx context.Context) error {
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	return c.Cache.Start(ctx)
}

func (c *gatedCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if _, ok := obj.(*tg.ToolCall); ok && started {
		c.once.Do(c.gate) // the other callers wait for the first one's gate
	}
	return c.Cache.GetInformer(ctx, obj, opts...)
}

// The manager's informer of ToolCalls starts with the manager, before its controller adds the
// handler that holds removals despite the finalizer (holdGone): a removal the informer sees in
// between reaches that handler neither then nor later. The replay from the saved position covers it
// only if it reads the present after the handler was added; read at the leader's start, as before,
// it could end before that removal, and the request stayed pending until its deadline (the
// asynchronous chaos run, seed 1796604931759631216: "deleted at once, removed despite the
// finalizer"). The order itself is pinned by TestReplayReadsThePresentOnlyOnceTheRemovalsWatchSynced
// (controllers/toolcalls); this test follows the removal through the whole path.
func TestRemovalBeforeTheLeadersWatchIsAddedIsWithdrawn(t *testing.T) {
	s := newGoneScenario(t)
	h, g := s.h, s.h.G
	ctx := context.Background()
	// Nothing to replay when the manager starts: every removal up to the present was withdrawn.
	setCursor(ctx, h, present(ctx, h))

	reached, release := make(chan struct{}), make(chan struct{})
	gc := &gatedCache{gate: func() { close(reached); <-release }}
	h.NewCache = func(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
		inner, err := cache.New(cfg, o)
		gc.Cache = inner
		return gc, err
	}
	h.Start()
	g.Eventually(reached).Should(BeClosed(), "the controller asks for the ToolCall informer")
	s.remove()
	g.Eventually(func() bool {
		return apierrors.IsNotFound(gc.Cache.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "refund"}, &tg.ToolCall{}))
	}).Should(BeTrue(), "the informer saw the removal before the controller's handlers were added")
	close(release)
	s.withdrawn("the replay reached past the removal the controller's handlers never saw")
}

// Whoever may update Leases in the manager's namespace can write a position past the present into
// the gone cursor. Trusted, it would skip the replay (and every one after it until the present passed
// it). The new leader does not trust it: it replays from as far back as the apiserver keeps watch
// history, says so in a Warning event on the Lease, and saves a true position.
func TestGoneCursorPastThePresentIsNotTrusted(t *testing.T) {
	s := newGoneScenario(t)
	h, g := s.h, s.h.G
	ctx := context.Background()
	s.remove()
	now := present(ctx, h)
	setCursor(ctx, h, now+1_000_000)

	h.Start()
	s.withdrawn("the replay ignored the position past the present")
	g.Eventually(func() ([]string, error) {
		list := &eventsv1.EventList{}
		if err := h.K8s.List(ctx, list, client.InNamespace(h.NS)); err != nil {
			return nil, err
		}
		var reasons []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "Lease" && e.Regarding.Name == goneCursorLease && e.Type == "Warning" {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons, nil
	}).Should(ContainElement(tg.ReasonGoneCursorAhead), "an event on the Lease names it")
	g.Eventually(func() (uint64, error) { return savedCursor(ctx, h) }).WithTimeout(20*time.Second).
		Should(And(BeNumerically(">=", now), BeNumerically("<=", present(ctx, h))), "a true position is saved over it")
}

// A saved position older than the apiserver's watch history (410 Gone: after a long time without a
// leader, or written by someone) is replayed from the oldest position the apiserver still serves,
// rather than not at all.
func TestGoneCursorOlderThanTheWatchHistoryReplaysWhatIsKept(t *testing.T) {
	s := newGoneScenario(t)
	s.remove()
	setCursor(context.Background(), s.h, 1)
	s.h.Start()
	s.withdrawn("replayed from the oldest position the apiserver serves")
}
