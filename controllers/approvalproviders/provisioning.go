package approvalproviders

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/mergepatch"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/provider"
)

// provision makes sure the provider object with spec.provisioning has its AAP instance and the
// Secret with the instance's credential: it adds the finalizer (so the instance is deleted with the
// object), then, unless the Secret exists, asks the provider for the instance under the object's
// UID as Idempotency-Key. A repeat after a crash, or after someone deleted the Secret, gets the same
// instance and credential back. A credential that expires is replaced by a new instance once two
// thirds of its lifetime have passed (replace). An error, a *readiness.Error, says why the
// instance could not be had (the Ready condition's reason and message). renewal, when not empty, says why a
// replacement failed; the current credential is still valid.
func (r *Reconciler) provision(ctx context.Context, k providercache.Key, obj tg.GenericProvider) (renewal string, err error) {
	if err := r.addFinalizer(ctx, obj, tg.FinalizerInstance); err != nil {
		return "", readiness.Retryingf(tg.ReasonProvisioningFailed, "The finalizer that deletes the instance with this object could not be added: %v.", apierrors.ReasonForError(err))
	}
	secret, _ := r.Providers.CredentialOf(k, obj)
	err = r.Providers.Live().Get(ctx, secret, &corev1.Secret{})
	missing := apierrors.IsNotFound(err)
	inst := obj.GetStatus().Instance
	switch {
	case err == nil && inst != nil && !r.Clock.Now().Before(renewAt(inst)):
		if err := r.newInstance(ctx, k, obj, inst.ID); err != nil {
			u, _ := readiness.ErrorOf(err)
			return fmt.Sprintf("Its credential expires at %s and could not be replaced yet (%s): %s",
				inst.CredentialExpiresAt.UTC().Format(time.RFC3339), u.Reason, u.Message), nil
		}
		return "", nil
	case err == nil && inst != nil:
		return "", nil
	case err != nil && !missing:
		return "", readiness.Retryingf(tg.ReasonProvisioningFailed, "Secret %s could not be read: %s.", secret, apierrors.ReasonForError(err))
	}
	replaces := ""
	if inst != nil {
		// The Secret of the current instance is gone: the provisioning that created the instance
		// is replayed to get its credential back.
		replaces = inst.Replaces
	}
	return "", r.newInstance(ctx, k, obj, replaces)
}

// renewAt is when the credential of inst is replaced: once two thirds of its lifetime have passed,
// as cert-manager renews certificates, which leaves the calls submitted to it a third of its
// lifetime to end. Never for a credential that does not expire.
func renewAt(inst *tg.ProviderInstance) time.Time {
	if inst.CredentialExpiresAt == nil {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	exp := inst.CredentialExpiresAt.Time
	if inst.CredentialIssuedAt == nil {
		return exp
	}
	return inst.CredentialIssuedAt.Add(exp.Sub(inst.CredentialIssuedAt.Time) * 2 / 3)
}

// newInstance provisions the object's instance: the first one (replaces empty), under the object's
// UID as Idempotency-Key, or the one that replaces instance replaces, under a key derived from both,
// so that a repeat after a crash gets the same instance and credential back. It keeps the
// credential in a Secret the object owns and records the instance in the status; the instance it
// replaces joins status.replacedInstances. Its error is a *readiness.Error.
func (r *Reconciler) newInstance(ctx context.Context, k providercache.Key, obj tg.GenericProvider, replaces string) error {
	pc, err := r.provisioner(ctx, k, obj)
	if err != nil {
		return err
	}
	name := obj.GetSpec().Provisioning.InstanceName
	if name == "" {
		name = k.String()
	}
	key := string(obj.GetUID())
	if replaces != "" {
		key += "/replaces/" + replaces
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	got, err := pc.ProvisionInstance(ctx, key, provider.ProvisionInstanceRequest{InstanceName: name})
	if err != nil {
		return provisionFailed(err)
	}
	if holder, err := r.instanceHolder(ctx, obj, got.Instance.ID); err != nil || holder != "" {
		if err != nil {
			return readiness.Retryingf(tg.ReasonProvisioningFailed, "The instance the provider issued could not be checked against the other provider objects: %v.", err)
		}
		return readiness.Retryingf(tg.ReasonProvisioningFailed, "The provider answered with instance %s, which %s already holds: two provider objects never share an instance "+
			"(the requests and notifications of one would be taken for the other's), so it was not recorded. Point spec.url at a provisioner that issues this object an instance of its own.",
			got.Instance.ID, holder)
	}
	secret := types.NamespacedName{Namespace: r.Providers.NamespaceOf(k), Name: providercache.ProvisionedSecretName(obj, replaces)}
	owned := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name, Labels: map[string]string{providercache.ConsentLabel(k): obj.GetName()}},
		Data:       map[string][]byte{providercache.ProvisionedKey: []byte(got.Credential.Token)},
	}
	if err := controllerutil.SetOwnerReference(obj, owned, r.Scheme()); err != nil {
		return readiness.Retryingf(tg.ReasonProvisioningFailed, "%s", err.Error())
	}
	if err := r.Create(ctx, owned); err != nil && !apierrors.IsAlreadyExists(err) {
		return readiness.Retryingf(tg.ReasonProvisioningFailed, "Secret %s for the instance's credential could not be created: %s.", secret, apierrors.ReasonForError(err))
	}
	st := obj.GetStatus()
	if cur := st.Instance; cur != nil && cur.ID == got.Instance.ID {
		return nil // the Secret of the current instance was made again
	}
	now := metav1.NewTime(r.Clock.Now())
	inst := &tg.ProviderInstance{ID: got.Instance.ID, Name: got.Instance.Name, CredentialSecretName: secret.Name, Replaces: replaces, CredentialIssuedAt: &now}
	if got.Credential.ExpiresAt != nil {
		inst.CredentialExpiresAt = &metav1.Time{Time: *got.Credential.ExpiresAt}
	}
	if cur := st.Instance; cur != nil {
		st.ReplacedInstances = append(st.ReplacedInstances, *cur)
	}
	st.Instance = inst
	return nil
}

// retireReplaced deletes, at the provider, each replaced instance that no call uses any more, or
// whose credential expired (its requests can no longer be read: deleting it cancels them, so that
// no approver decides what nobody waits for), and forgets it. It returns how soon to look again
// while some are kept, 0 when none is.
func (r *Reconciler) retireReplaced(ctx context.Context, k providercache.Key, obj tg.GenericProvider) (time.Duration, error) {
	st := obj.GetStatus()
	if len(st.ReplacedInstances) == 0 {
		return 0, nil
	}
	// A call accepted just before the replacement, with the instance it replaced, may not be in the
	// cache yet: the replaced instances are counted from inUseSettle after the replacement on.
	if cur := st.Instance; cur != nil && cur.CredentialIssuedAt != nil {
		if wait := inUseSettle - r.Clock.Since(cur.CredentialIssuedAt.Time); wait > 0 {
			return wait, nil
		}
	}
	var keep []tg.ProviderInstance
	next := time.Duration(0)
	for _, old := range st.ReplacedInstances {
		expired := old.CredentialExpiresAt != nil && !r.Clock.Now().Before(old.CredentialExpiresAt.Time)
		if !expired {
			busy, err := r.Providers.InUseBy(ctx, k, old.ID)
			if err != nil {
				return 0, err
			}
			if busy {
				keep = append(keep, old)
				next = minPositive(next, inUseRecheck)
				if old.CredentialExpiresAt != nil {
					next = min(next, old.CredentialExpiresAt.Sub(r.Clock.Now()))
				}
				continue
			}
		}
		if err := r.deleteInstance(ctx, k, obj, old.ID); err != nil {
			log.FromContext(ctx).Error(err, "a replaced instance could not be deleted yet", "provider", k.String(), "instance", old.ID)
			keep = append(keep, old)
			next = minPositive(next, reprobeNotReady)
			continue
		}
		r.Providers.Drop(k, old.ID)
	}
	st.ReplacedInstances = keep
	return next, nil
}

// minPositive is the smaller of a and b, ignoring a 0 a.
func minPositive(a, b time.Duration) time.Duration {
	if a == 0 {
		return b
	}
	return min(a, b)
}

// deleteInstance deletes instance id of the object at the provider, with the provisioner token:
// its credential is revoked and its pending requests cancelled.
func (r *Reconciler) deleteInstance(ctx context.Context, k providercache.Key, obj tg.GenericProvider, id string) error {
	pc, err := r.provisioner(ctx, k, obj)
	if err != nil {
		return fmt.Errorf("deleting instance %s of %s: %w", id, k, err)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := pc.DeleteInstance(ctx, id); err != nil {
		return fmt.Errorf("deleting instance %s of %s: %w", id, k, err)
	}
	return nil
}

// provisionFailed is why a provisioning the provider refused or did not answer had no instance.
func provisionFailed(err error) error {
	switch code := provider.CodeOf(err); code {
	case provider.CodeUnauthenticated:
		return readiness.Stalledf(tg.ReasonCredentialRejected, "The provider refused the provisioner token (401): put a provisioner token it knows in spec.provisioning.provisionerTokenSecretRef.")
	case provider.CodeForbidden:
		return readiness.Stalledf(tg.ReasonCredentialForbidden, "The provider knows the token in spec.provisioning.provisionerTokenSecretRef but it may not create instances (403): an instance credential is not a provisioner token.")
	case provider.CodeInstanceDeleted:
		return readiness.Retryingf(tg.ReasonProvisioningFailed, "The provider deleted the instance this object created, and AAP does not create it again under the same key: create the provider object anew.")
	default:
		return readiness.Retryingf(tg.ReasonProvisioningFailed, "The provider could not create the instance (provider error %s).", code)
	}
}

// provisioner is the client that manages the object's instance, with the provisioner token as its
// credential; its error is a *readiness.Error.
func (r *Reconciler) provisioner(ctx context.Context, k providercache.Key, obj tg.GenericProvider) (*provider.HTTPClient, error) {
	ref := obj.GetSpec().Provisioning.ProvisionerTokenSecretRef
	secret := types.NamespacedName{Namespace: r.Providers.NamespaceOf(k), Name: ref.Name}
	return r.Providers.NewClient(ctx, k, obj, secret, providercache.KeyOr(ref.Key, "token"))
}

// addFinalizer adds finalizer to obj unless it has it.
func (r *Reconciler) addFinalizer(ctx context.Context, obj tg.GenericProvider, finalizer string) error {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	controllerutil.AddFinalizer(obj, finalizer)
	patch, err := mergepatch.Finalizers(obj)
	if err == nil {
		err = r.Patch(ctx, obj, patch)
	}
	if err != nil {
		controllerutil.RemoveFinalizer(obj, finalizer)
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
func (r *Reconciler) retire(ctx context.Context, k providercache.Key, obj tg.GenericProvider) (ctrl.Result, error) {
	if controllerutil.ContainsFinalizer(obj, tg.FinalizerInUse) {
		// A call accepted just before the deletion may not be in the cache yet: the object waits at
		// least inUseSettle after the deletion began before it counts its calls.
		if wait := inUseSettle - r.Clock.Since(obj.GetDeletionTimestamp().Time); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		busy, err := r.Providers.InUse(ctx, k)
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
	if st := obj.GetStatus(); st.Instance != nil && obj.GetSpec().Provisioning != nil {
		for _, inst := range append([]tg.ProviderInstance{*st.Instance}, st.ReplacedInstances...) {
			if err := r.deleteInstance(ctx, k, obj, inst.ID); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, k, obj, tg.FinalizerInstance)
}

// removeFinalizer removes finalizer from obj.
func (r *Reconciler) removeFinalizer(ctx context.Context, k providercache.Key, obj tg.GenericProvider, finalizer string) error {
	controllerutil.RemoveFinalizer(obj, finalizer)
	patch, err := mergepatch.Finalizers(obj)
	if err == nil {
		err = r.Patch(ctx, obj, patch)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer %s of %s: %w", finalizer, k, err)
	}
	return nil
}

// deleting lets through the update that marks an object deleted.
// Creations, deletions and generic events pass.
func deleting() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// instanceHolder names the provider object other than obj that holds instance id (as its instance, a
// replaced one, or in a delivery registration), "" when none does.
func (r *Reconciler) instanceHolder(ctx context.Context, obj tg.GenericProvider, id string) (string, error) {
	claims, err := providercache.By(ctx, r.Client, providercache.InstanceField, id)
	if err != nil {
		return "", err
	}
	for _, c := range claims {
		if c.Obj.GetUID() != obj.GetUID() {
			return c.Key.String(), nil
		}
	}
	return "", nil
}
