package toolcalls

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/mergepatch"
	"toolgate.dev/toolgate/internal/provider"
)

// reconcileDelete cancels a request that may still be pending, then lets the ToolCall go. It never
// hangs on an unreachable provider: it gives up after CancelGiveUp, or once the request's own
// deadline (within our limit) has passed; nor on a provider without a cancel endpoint, which it
// leaves at once.
func (r *Reconciler) reconcileDelete(ctx context.Context, sc *scope) (ctrl.Result, error) {
	tc := sc.tc
	r.stopWaiting(tc.UID)
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) {
		return ctrl.Result{}, nil
	}
	// An ended call is let go once it holds its receipt: its write reconciles the call again.
	r.queueReceipt(tc)
	switch tc.Status.Phase {
	case "", tg.PhasePending, tg.PhaseAwaitingApproval:
		if tc.Status.Reason == tg.ReasonPreviewRunning && tc.Status.Preview == nil {
			// Its preview had not said anything yet: no request was ever submitted (preview.go).
			break
		}
		ended, err := r.withdrawOwn(ctx, sc)
		switch {
		case provider.CannotCancel(err):
			// Nothing a retry could cancel: no cancel endpoint, or the provider no longer knows the request.
			r.emit(tc, nil, lifecycle.CannotCancelOnDelete, provider.CodeOf(err))
		case err != nil:
			now := r.Clock.Now()
			// Past the approval limit the request has passed its deadline at the provider: nobody
			// reviews it. Without a readable acceptance record the limit is unknown, and CancelGiveUp
			// alone bounds the retries.
			beforeLimit := true
			if acc, aerr := sc.accepted(); aerr == nil {
				beforeLimit = now.Before(r.Timing.ApprovalLimit(acc.Window))
			}
			if now.Before(tc.DeletionTimestamp.Add(r.CancelGiveUp)) && beforeLimit {
				return ctrl.Result{}, fmt.Errorf("cancelling the approval request of a deleted ToolCall: %w", err)
			}
			r.emit(tc, nil, lifecycle.GaveUpCancelOnDelete, provider.CodeOf(err))
		case ended != "" && ended != provider.StatusCancelled:
			r.emit(tc, nil, lifecycle.DecidedBeforeCancelOnDelete, ended)
		default:
			r.emit(tc, nil, lifecycle.CancelledOnDelete)
		}
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, tc)
}

// withdrawOwn cancels the ToolCall's own request, whose id the idempotent submission recovers.
// It returns the status the request ended with: cancelled, or the decision it held already.
func (r *Reconciler) withdrawOwn(ctx context.Context, sc *scope) (string, error) {
	ref, err := sc.ref()
	if err != nil {
		return "", err
	}
	// The id is recovered with the idempotent submission whether or not the status records one: the
	// request to cancel is the one submitted under the call's own key (ownRef).
	ref, cur, err := r.ownRef(ctx, sc, ref)
	if err != nil {
		return "", err
	}
	if cur != nil && provider.IsTerminal(cur.Status) {
		return cur.Status, nil
	}
	req, err := r.providerOf(sc).Cancel(ctx, ref)
	if err != nil {
		return "", err
	}
	return req.Status, nil
}

func (r *Reconciler) removeFinalizer(ctx context.Context, tc *tg.ToolCall) error {
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) || r.awaitsReceipt(tc) {
		return nil
	}
	controllerutil.RemoveFinalizer(tc, tg.Finalizer)
	patch, err := mergepatch.Finalizers(tc)
	if err != nil {
		return err
	}
	if err := r.Patch(ctx, tc, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			// Written since it was read (in asynchronous mode, the receiver recording a notification
			// while the call started): that write's watch event reconciles the call again, and the
			// removal is tried on what it wrote.
			return nil
		}
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	if tc.DeletionTimestamp.IsZero() {
		r.written.wrote(tc)
	}
	return nil
}
