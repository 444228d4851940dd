package toolcalls

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// receiptWorkers sign and write receipts beside the reconcile workers: a namespace's receipts are
// written one at a time (Receipts), so a reconcile worker never waits for another call's receipt.
const receiptWorkers = 4

// receiptQueue holds the ended calls whose receipt is to be written. A reconcile that finds a call
// ended without one queues it (queueReceipt) and goes on; the receipt's status write brings the call
// back to a reconcile, which then lets its finalizer go. It runs on the leader only (a Runnable that
// needs leader election), as the reconciles do.
type receiptQueue struct {
	r   *Reconciler
	q   workqueue.TypedRateLimitingInterface[types.NamespacedName]
	log logr.Logger
}

func newReceiptQueue(r *Reconciler, log logr.Logger) *receiptQueue {
	return &receiptQueue{r: r, log: log, q: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "toolcall-receipts"})}
}

// Start runs the workers until ctx ends.
func (rq *receiptQueue) Start(ctx context.Context) error {
	ctx = logf.IntoContext(ctx, rq.log)
	go func() {
		<-ctx.Done()
		rq.q.ShutDown()
	}()
	var wg sync.WaitGroup
	for range receiptWorkers {
		wg.Go(func() {
			for rq.next(ctx) {
			}
		})
	}
	wg.Wait()
	return nil
}

// next writes one queued call's receipt; a failure is retried with backoff.
func (rq *receiptQueue) next(ctx context.Context) bool {
	key, shutdown := rq.q.Get()
	if shutdown {
		return false
	}
	defer rq.q.Done(key)
	if err := rq.issue(ctx, key); err != nil {
		if ctx.Err() != nil {
			return false // the manager stops; its successor writes the receipt
		}
		rq.log.Error(err, "writing a receipt; trying again", "toolCall", key)
		rq.q.AddRateLimited(key)
		return true
	}
	rq.q.Forget(key)
	return true
}

func (rq *receiptQueue) issue(ctx context.Context, key types.NamespacedName) error {
	tc := &tg.ToolCall{}
	if err := rq.r.Get(ctx, key, tc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	return rq.r.issueReceipt(ctx, tc)
}

// queueReceipt queues tc for its receipt when it ended without one.
func (r *Reconciler) queueReceipt(tc *tg.ToolCall) {
	if r.awaitsReceipt(tc) && r.receiptQueue != nil {
		r.receiptQueue.q.Add(types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name})
	}
}
