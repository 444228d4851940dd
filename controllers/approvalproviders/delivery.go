package approvalproviders

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/aapwebhook"
	"toolgate.dev/toolgate/internal/provider"
)

// registerDelivery makes the provider deliver the current instance's notifications to
// spec.delivery (asynchronous mode), or stop delivering once spec.delivery is gone. A new
// registration (a new instance, receiver URL or rotation) is first proposed: its id and signing
// secret are recorded, so that the receiver expects it, and only once the manager's cache shows that
// record is it submitted (PATCH /v1/instances/{id}, its registration id as Idempotency-Key, so a
// repeat after a crash is the same update). The provider verifies the receiver before it commits.
// It returns the Delivery condition (nil to remove it) and how soon to look again (0: at the next
// probe).
func (r *Reconciler) registerDelivery(ctx context.Context, k providercache.Key, obj tg.GenericProvider) (*metav1.Condition, time.Duration) {
	spec, st := obj.GetSpec(), obj.GetStatus()
	inst := st.Instance
	cond := func(status metav1.ConditionStatus, reason, format string, args ...any) *metav1.Condition {
		return &metav1.Condition{Type: tg.ConditionDelivery, Status: status, Reason: reason,
			Message: fmt.Sprintf(format, args...), ObservedGeneration: obj.GetGeneration()}
	}
	if spec.Provisioning == nil || inst == nil {
		return nil, 0
	}
	want := spec.Delivery
	if want == nil {
		if st.Delivery == nil || st.Delivery.Active == nil {
			st.Delivery = nil
			return nil, 0
		}
		// Delivery was removed: the provider stops delivering, and waiting calls go back to long polls.
		if err := r.updateDelivery(ctx, k, obj, inst.ID, "remove/"+st.Delivery.Active.RegistrationID, provider.DeliveryUpdate{Remove: true}); err != nil {
			return cond(metav1.ConditionFalse, tg.ReasonRegistrationFailed, "spec.delivery was removed, but the provider could not be told to stop delivering (%s); retried.", updateFailure(err)), reprobeNotReady
		}
		st.Delivery = nil
		return nil, 0
	}
	if st.Delivery == nil {
		st.Delivery = &tg.DeliveryStatus{}
	}
	d := st.Delivery
	if a := d.Active; a != nil && matches(a, want, inst.ID) {
		d.Proposed = nil
		if p := d.Previous; p != nil && p.InstanceID == inst.ID && a.Since != nil && r.Clock.Since(a.Since.Time) > providercache.PreviousGrace {
			d.Previous = nil
		}
		return cond(metav1.ConditionTrue, tg.ReasonRegistered, "The provider delivers the notifications of instance %s to %s.", inst.ID, a.ReceiverURL), 0
	}
	if p := d.Proposed; p == nil || !matches(p, want, inst.ID) {
		// The cache may not show a proposal written a moment ago: the object is read live before
		// another registration is drawn.
		live := providercache.NewObject(k.Kind)
		if err := r.Providers.Live().Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
			return cond(metav1.ConditionFalse, tg.ReasonRegistrationFailed, "The provider object could not be read: %s.", apierrors.ReasonForError(err)), reprobeNotReady
		}
		if ld := live.GetStatus().Delivery; ld != nil && ld.Proposed != nil && matches(ld.Proposed, want, inst.ID) {
			d.Proposed = ld.Proposed
			return cond(metav1.ConditionFalse, tg.ReasonRegistering, "Registering %s for the notifications of instance %s.", want.ReceiverURL, inst.ID), time.Second
		}
		reg, err := r.propose(ctx, k, obj, want, inst.ID)
		if err != nil {
			return cond(metav1.ConditionFalse, tg.ReasonRegistrationFailed, "%v", err), reprobeNotReady
		}
		d.Proposed = reg
		// Submitted once the cache shows the proposal, which the receiver reads.
		return cond(metav1.ConditionFalse, tg.ReasonRegistering, "Registering %s for the notifications of instance %s.", want.ReceiverURL, inst.ID), time.Second
	}
	p := d.Proposed
	secret, err := r.Providers.SecretValue(ctx, k, obj.GetUID(), types.NamespacedName{Namespace: r.Providers.NamespaceOf(k), Name: p.SecretName}, providercache.SigningSecretKey)
	if err != nil {
		return cond(metav1.ConditionFalse, tg.ReasonRegistrationFailed, "The signing secret of registration %s cannot be read: %v.", p.RegistrationID, err), reprobeNotReady
	}
	err = r.updateDelivery(ctx, k, obj, inst.ID, p.RegistrationID, provider.DeliveryUpdate{Set: &provider.WebhookDeliveryInput{
		Type: tg.DeliveryWebhook, URL: p.ReceiverURL, RegistrationID: p.RegistrationID, SigningSecret: secret}})
	switch code := provider.CodeOf(err); {
	case err == nil:
	case code == provider.CodeWebhookVerificationFailed:
		return cond(metav1.ConditionFalse, tg.ReasonVerificationFailed,
			"The provider could not verify the receiver at %s (422): check that it reaches that URL (an Ingress or Gateway route to the manager's receiver Service) and that the route keeps the path; retried.", p.ReceiverURL), reprobeNotReady
	case code == provider.CodeInvalidWebhookURL || code == provider.CodeUnsupportedDeliveryType || code == provider.CodeInvalidRequest:
		return cond(metav1.ConditionFalse, tg.ReasonRegistrationFailed,
			"The provider refused the delivery to %s (provider error %s): it takes public https:// URLs only, and may not offer asynchronous mode.", p.ReceiverURL, code), reprobeNotReady
	default:
		return cond(metav1.ConditionFalse, tg.ReasonRegistrationFailed, "The registration of %s could not be submitted (%s); retried.", p.ReceiverURL, updateFailure(err)), reprobeNotReady
	}
	now := metav1.NewTime(r.Clock.Now())
	if d.Active != nil {
		d.Previous = d.Active
	}
	p.Since = &now
	d.Active, d.Proposed = p, nil
	return cond(metav1.ConditionTrue, tg.ReasonRegistered, "The provider delivers the notifications of instance %s to %s.", inst.ID, p.ReceiverURL), 0
}

// matches reports whether registration reg is what spec.delivery wants for instance.
func matches(reg *tg.WebhookRegistration, want *tg.Delivery, instance string) bool {
	return reg.InstanceID == instance && reg.ReceiverURL == want.ReceiverURL && reg.Rotation == want.Rotation
}

// propose draws a registration id and a signing secret for want and instance, and keeps the secret
// in a Secret the object owns.
func (r *Reconciler) propose(ctx context.Context, k providercache.Key, obj tg.GenericProvider, want *tg.Delivery, instance string) (*tg.WebhookRegistration, error) {
	secret, err := aapwebhook.NewSecret(rand.Read)
	if err != nil {
		return nil, fmt.Errorf("a signing secret could not be drawn: %w", err)
	}
	id := uuid.NewString()
	name := fmt.Sprintf("%s-aap-webhook-%s", providercache.Truncate(obj.GetName(), 200), id[:8])
	owned := &corev1.Secret{}
	owned.Namespace, owned.Name = r.Providers.NamespaceOf(k), name
	owned.Labels = map[string]string{providercache.ConsentLabel(k): obj.GetName()}
	owned.Data = map[string][]byte{providercache.SigningSecretKey: []byte(secret)}
	if err := controllerutil.SetOwnerReference(obj, owned, r.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Create(ctx, owned); err != nil {
		return nil, fmt.Errorf("the Secret %s for the signing secret could not be created: %s", name, apierrors.ReasonForError(err))
	}
	now := metav1.NewTime(r.Clock.Now())
	return &tg.WebhookRegistration{RegistrationID: id, ReceiverURL: want.ReceiverURL, Rotation: want.Rotation,
		SecretName: name, InstanceID: instance, Since: &now}, nil
}

// updateDelivery sends the delivery update of instance id with the provisioner token.
func (r *Reconciler) updateDelivery(ctx context.Context, k providercache.Key, obj tg.GenericProvider, id, key string, d provider.DeliveryUpdate) error {
	pc, err := r.provisioner(ctx, k, obj)
	if err != nil {
		return err
	}
	// The provider verifies the receiver within this call: up to 10 s of its own.
	ctx, cancel := context.WithTimeout(ctx, probeTimeout+10*time.Second)
	defer cancel()
	_, err = pc.UpdateInstanceDelivery(ctx, id, key, d)
	return err
}

// updateFailure says why a delivery update failed: the provider's error code, or why it was never
// sent.
func updateFailure(err error) string {
	if u, ok := readiness.ErrorOf(err); ok {
		// No client could be built with the provisioner token (its Secret, or the object's CA
		// bundle): nothing reached the provider.
		return "the provisioner token cannot be used: " + u.Message
	}
	return "provider error " + provider.CodeOf(err)
}

// setDeliveryCondition writes c, or removes the Delivery condition when c is nil.
func setDeliveryCondition(st *tg.ApprovalProviderStatus, c *metav1.Condition) {
	if c == nil {
		meta.RemoveStatusCondition(&st.Conditions, tg.ConditionDelivery)
		return
	}
	meta.SetStatusCondition(&st.Conditions, *c)
}
