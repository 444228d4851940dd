package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// reconcileDelete cancels a request that may still be pending, then lets the ToolCall go. It never
// hangs on an unreachable provider: it gives up after CancelGiveUp, or once the request's own
// deadline (within our limit) has passed; nor on a provider without a cancel endpoint, which it
// leaves at once.
func (r *ToolCallReconciler) reconcileDelete(ctx context.Context, tc *tg.ToolCall) (ctrl.Result, error) {
	r.Waiter.Stop(tc.UID)
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) {
		return ctrl.Result{}, nil
	}
	switch tc.Status.Phase {
	case "", tg.PhasePending, tg.PhaseAwaitingApproval:
		err := r.cancelPending(ctx, tc)
		switch {
		case provider.CannotCancel(err):
			// Nothing a retry could cancel: no cancel endpoint, or the provider no longer knows the request.
			r.Recorder.Eventf(tc, nil, corev1.EventTypeWarning, tg.ReasonCancelFailed, "Delete",
				"The approvals provider cannot cancel the approval request (%s); it ends at its provider deadline.", provider.CodeOf(err))
		case err != nil:
			w, _, _ := r.submission(tc)
			now := r.Clock.Now()
			if now.Before(tc.DeletionTimestamp.Add(r.CancelGiveUp)) && now.Before(r.Timing.ApprovalLimit(w)) {
				return ctrl.Result{}, fmt.Errorf("cancelling the approval request of a deleted ToolCall: %w", err)
			}
			r.Recorder.Eventf(tc, nil, corev1.EventTypeWarning, tg.ReasonCancelFailed, "Delete",
				"Gave up cancelling the approval request (%s); it ends at its provider deadline.", provider.CodeOf(err))
		default:
			r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, tg.ReasonCancelRequested, "Delete", "The ToolCall was deleted; its approval request was cancelled.")
		}
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, tc)
}

// cancelPending cancels the ToolCall's request, recovering its id with the idempotent submission
// when it was never recorded.
func (r *ToolCallReconciler) cancelPending(ctx context.Context, tc *tg.ToolCall) error {
	_, sub, err := r.submission(tc)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	ref, err := r.ref(tc, sub)
	if err != nil {
		return err
	}
	if ref.ID == "" {
		req, err := r.Provider.Submit(cctx, sub)
		if err != nil {
			return err
		}
		if provider.IsTerminal(req.Status) {
			return nil
		}
		ref.ID = req.ID
	}
	_, err = r.Provider.Cancel(cctx, ref)
	return err
}

func (r *ToolCallReconciler) removeFinalizer(ctx context.Context, tc *tg.ToolCall) error {
	if !controllerutil.ContainsFinalizer(tc, tg.Finalizer) {
		return nil
	}
	base := tc.DeepCopy()
	controllerutil.RemoveFinalizer(tc, tg.Finalizer)
	if err := r.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	if tc.DeletionTimestamp.IsZero() {
		r.written.wrote(tc)
	}
	return nil
}
