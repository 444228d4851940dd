package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// provision makes sure the provider object with spec.provisioning has its AAP instance and the
// Secret with the instance's credential: it adds the finalizer (so the instance is deleted with the
// object), then, unless the Secret exists, asks the provider for the instance under the object's
// UID as Idempotency-Key. A repeat after a crash, or after someone deleted the Secret, gets the same
// instance and credential back. reason and message, when reason is not empty, are the Ready
// condition's: the instance could not be had.
func (r *ProviderReconciler) provision(ctx context.Context, k providerKey, obj tg.GenericProvider) (reason, message string) {
	if err := r.addFinalizer(ctx, obj, tg.FinalizerInstance); err != nil {
		return tg.ReasonProvisioningFailed, fmt.Sprintf("The finalizer that deletes the instance with this object could not be added: %v.", apierrors.ReasonForError(err))
	}
	secret, _ := r.providers.credentialOf(k, obj)
	err := r.providers.live.Get(ctx, secret, &corev1.Secret{})
	missing := apierrors.IsNotFound(err)
	switch {
	case err == nil && obj.GetStatus().Instance != nil:
		return "", ""
	case err != nil && !missing:
		return tg.ReasonProvisioningFailed, fmt.Sprintf("Secret %s could not be read: %s.", secret, apierrors.ReasonForError(err))
	}
	pc, reason, message := r.provisioner(ctx, k, obj)
	if reason != "" {
		return reason, message
	}
	name := obj.GetSpec().Provisioning.InstanceName
	if name == "" {
		name = k.String()
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	got, err := pc.ProvisionInstance(ctx, string(obj.GetUID()), provider.ProvisionInstanceRequest{InstanceName: name})
	if err != nil {
		return provisionFailed(err)
	}
	if missing {
		owned := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name, Labels: map[string]string{tg.LabelProvider: obj.GetName()}},
			Data:       map[string][]byte{provisionedKey: []byte(got.Credential.Token)},
		}
		if err := controllerutil.SetOwnerReference(obj, owned, r.Scheme()); err != nil {
			return tg.ReasonProvisioningFailed, err.Error()
		}
		if err := r.Create(ctx, owned); err != nil && !apierrors.IsAlreadyExists(err) {
			return tg.ReasonProvisioningFailed, fmt.Sprintf("Secret %s for the instance's credential could not be created: %s.", secret, apierrors.ReasonForError(err))
		}
	}
	inst := &tg.ProviderInstance{ID: got.Instance.ID, Name: got.Instance.Name, CredentialSecretName: secret.Name}
	if got.Credential.ExpiresAt != nil {
		inst.CredentialExpiresAt = &metav1.Time{Time: *got.Credential.ExpiresAt}
	}
	obj.GetStatus().Instance = inst
	return "", ""
}

// provisionFailed is the Ready condition of a provisioning the provider refused or did not answer.
func provisionFailed(err error) (reason, message string) {
	switch code := provider.CodeOf(err); code {
	case provider.CodeUnauthenticated:
		return tg.ReasonCredentialRejected, "The provider refused the provisioner token (401): put a provisioner token it knows in spec.provisioning.provisionerTokenSecretRef."
	case provider.CodeForbidden:
		return tg.ReasonCredentialForbidden, "The provider knows the token in spec.provisioning.provisionerTokenSecretRef but it may not create instances (403): an instance credential is not a provisioner token."
	case provider.CodeInstanceDeleted:
		return tg.ReasonProvisioningFailed, "The provider deleted the instance this object created, and AAP does not create it again under the same key: create the provider object anew."
	default:
		return tg.ReasonProvisioningFailed, fmt.Sprintf("The provider could not create the instance (provider error %s).", code)
	}
}

// provisioner is the client that manages the object's instance, with the provisioner token as its
// credential.
func (r *ProviderReconciler) provisioner(ctx context.Context, k providerKey, obj tg.GenericProvider) (*provider.HTTPClient, string, string) {
	ref := obj.GetSpec().Provisioning.ProvisionerTokenSecretRef
	secret := types.NamespacedName{Namespace: r.providers.namespaceOf(k), Name: ref.Name}
	pc, reason, err := r.providers.newClient(ctx, k, obj, secret, keyOr(ref.Key, "token"))
	if err != nil {
		return nil, reason, err.Error()
	}
	return pc, "", ""
}

// addFinalizer adds finalizer to obj unless it has it.
func (r *ProviderReconciler) addFinalizer(ctx context.Context, obj tg.GenericProvider, finalizer string) error {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(obj, finalizer)
	if err := r.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("adding the finalizer %s: %w", finalizer, err)
	}
	return nil
}

const (
	// inUseRecheck is how soon a deleted provider object still in use is looked at again.
	inUseRecheck = 10 * time.Second
	// inUseSettle is how long after its deletion a provider object first counts its calls, longer
	// than the cache takes to see an acceptance made just before.
	inUseSettle = 5 * time.Second
)

// retire lets a deleted provider object go. One with an instance of its own deletes the instance,
// which revokes its credential and cancels its pending requests at the provider; it keeps trying
// while the provider cannot be reached, since an instance left behind would leave its requests
// pending for approvers nobody waits for. One with an issued credential stays until the calls
// accepted with it ended, which go on waiting for their decisions (and cancelling) through it.
func (r *ProviderReconciler) retire(ctx context.Context, k providerKey, obj tg.GenericProvider) (ctrl.Result, error) {
	if controllerutil.ContainsFinalizer(obj, tg.FinalizerInUse) {
		// A call accepted just before the deletion may not be in the cache yet: the object waits at
		// least inUseSettle after the deletion began before it counts its calls.
		if wait := inUseSettle - r.Clock.Since(obj.GetDeletionTimestamp().Time); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		busy, err := r.providers.inUse(ctx, k)
		if err != nil || busy {
			return ctrl.Result{RequeueAfter: inUseRecheck}, err
		}
		if err := r.removeFinalizer(ctx, k, obj, tg.FinalizerInUse); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !controllerutil.ContainsFinalizer(obj, tg.FinalizerInstance) {
		return ctrl.Result{}, nil
	}
	if inst := obj.GetStatus().Instance; inst != nil && obj.GetSpec().Provisioning != nil {
		pc, reason, message := r.provisioner(ctx, k, obj)
		if reason != "" {
			return ctrl.Result{}, fmt.Errorf("deleting instance %s of %s: %s", inst.ID, k, message)
		}
		dctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		if err := pc.DeleteInstance(dctx, inst.ID); err != nil {
			return ctrl.Result{}, fmt.Errorf("deleting instance %s of %s: %w", inst.ID, k, err)
		}
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, k, obj, tg.FinalizerInstance)
}

// removeFinalizer removes finalizer from obj.
func (r *ProviderReconciler) removeFinalizer(ctx context.Context, k providerKey, obj tg.GenericProvider, finalizer string) error {
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(obj, finalizer)
	if err := r.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer %s of %s: %w", finalizer, k, err)
	}
	return nil
}

// deleting lets through the update that marks an object deleted.
type deleting struct{ predicate.Funcs }

func (deleting) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
}
