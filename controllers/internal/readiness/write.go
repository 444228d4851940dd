package readiness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolgate.dev/toolgate/controllers/internal/mergepatch"
)

// Writer is the one status write of a reconcile of an object with a Ready condition (a Tool, an
// MCPServer, a provider object), as Cluster API's patch helper and Flux's summarize-and-patch do it:
// Begin takes the status as read, before any step changes it; the steps change the status; Write
// sets Ready from what they found and writes what changed, once.
type Writer struct {
	obj    client.Object
	status any                 // a pointer to obj's status
	conds  *[]metav1.Condition // its conditions
	read   []byte              // the status as read, JSON
	before []metav1.Condition  // its conditions as read
	err    error
}

// Begin starts the status write of obj, whose status is at status (a pointer into obj) with its
// conditions at conds, as it is now: call it right after reading obj.
func Begin(obj client.Object, status any, conds *[]metav1.Condition) *Writer {
	read, err := json.Marshal(status)
	return &Writer{obj: obj, status: status, conds: conds, read: read, before: slices.Clone(*conds), err: err}
}

// ConflictRetry is how soon a reconcile whose status write met a newer object runs again: its cache
// has the newer copy by then, or the watch event of it requeues it anyway.
const ConflictRetry = 100 * time.Millisecond

// Result is what Write did.
type Result struct {
	// Progress is what the Ready condition set says.
	Progress Progress
	// Lost: another writer changed the object since it was read (a reconcile from an older cached
	// copy, another replica). Nothing was written or reported; the reconcile runs again.
	Lost bool
}

// RequeueAfter is the result of a reconcile that ends with this write: again after next (0: only
// when something changes), or after ConflictRetry when the write was lost.
func (r Result) RequeueAfter(next time.Duration) ctrl.Result {
	if r.Lost {
		return ctrl.Result{RequeueAfter: ConflictRetry}
	}
	return ctrl.Result{RequeueAfter: next}
}

// Write sets Ready, Reconciling and Stalled (Set) for the object's generation from problem: nil
// means Usable with reason and message; an *Error gives its progress, reason and message. Any other
// error is returned as it is, and nothing is written. Then, if the status changed since Begin, it
// writes it in one merge patch against the resourceVersion read, and reports a change of Ready as one
// event (Report) once that patch is written. A Conflict means another writer won: nothing is
// reported (that writer reported it), and the result says to run again. An object deleted meanwhile
// is not written.
func (w *Writer) Write(ctx context.Context, c client.StatusClient, rec events.EventRecorder, problem error, reason, message string) (Result, error) {
	progress, reason, message, err := outcome(problem, reason, message)
	if err != nil {
		return Result{}, err
	}
	res := Result{Progress: progress}
	Set(w.conds, w.obj.GetGeneration(), progress, reason, message)
	if w.err != nil {
		return res, fmt.Errorf("reading the status of %s: %w", w.obj.GetName(), w.err)
	}
	now, err := json.Marshal(w.status)
	if err != nil {
		return res, fmt.Errorf("writing the status of %s: %w", w.obj.GetName(), err)
	}
	if bytes.Equal(now, w.read) {
		return res, nil
	}
	patch, err := mergepatch.LockedStatus(w.read, now, w.obj.GetResourceVersion())
	if err != nil {
		return res, fmt.Errorf("writing the status of %s: %w", w.obj.GetName(), err)
	}
	switch err := c.Status().Patch(ctx, w.obj, patch); {
	case apierrors.IsConflict(err):
		res.Lost = true
		return res, nil
	case apierrors.IsNotFound(err):
		return res, nil
	case err != nil:
		return res, fmt.Errorf("writing the status of %s: %w", w.obj.GetName(), err)
	}
	Report(rec, w.obj, w.before, *w.conds, progress)
	return res, nil
}
