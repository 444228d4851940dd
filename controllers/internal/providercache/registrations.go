package providercache

import (
	"context"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Delivery (asynchronous mode): what the provider reconciler registers and the receiver checks.

// SigningSecretKey is the key of the signing secret in a registration's Secret.
const SigningSecretKey = "signingSecret"

// PreviousGrace is how long after a replacement the registration it replaced still verifies
// notifications for the same instance: attempts already in flight when the provider committed the
// new one may arrive signed with the old secret.
const PreviousGrace = 10 * time.Minute

// Cache indexes of provider objects, registered with the others by the manager.
const (
	// RegistrationField indexes provider objects by the registration ids of their delivery status.
	RegistrationField = "toolgate.dev/webhook-registration"
	// InstanceField indexes provider objects by the instances they hold (status.instance, the
	// replaced ones) and their registrations are for.
	InstanceField = "toolgate.dev/webhook-instance"
)

// deliveryRegistrations are the active, proposed and previous registrations of a provider object.
func deliveryRegistrations(o client.Object) []tg.WebhookRegistration {
	d := o.(tg.GenericProvider).GetStatus().Delivery
	if d == nil {
		return nil
	}
	var out []tg.WebhookRegistration
	for _, r := range []*tg.WebhookRegistration{d.Active, d.Proposed, d.Previous} {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// IndexByRegistration is the indexer of RegistrationField.
func IndexByRegistration(o client.Object) []string {
	var out []string
	for _, r := range deliveryRegistrations(o) {
		out = append(out, r.RegistrationID)
	}
	return out
}

// IndexByInstance is the indexer of InstanceField.
func IndexByInstance(o client.Object) []string {
	var out []string
	add := func(id string) {
		if id != "" && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	for _, r := range deliveryRegistrations(o) {
		add(r.InstanceID)
	}
	st := o.(tg.GenericProvider).GetStatus()
	if st.Instance != nil {
		add(st.Instance.ID)
	}
	for _, old := range st.ReplacedInstances {
		add(old.ID)
	}
	return out
}

// Claim is a provider object found by one of its registrations or instances.
type Claim struct {
	Key Key
	Obj tg.GenericProvider
}

// By finds, in c, the provider objects of both kinds whose status holds value under index field
// (RegistrationField, InstanceField). Provisioning refuses an instance another object holds,
// but a status can be written by others: the receiver tries every object that claims a value, and
// only a message one of them verifies counts.
func By(ctx context.Context, c client.Reader, field, value string) ([]Claim, error) {
	var out []Claim
	aps := &tg.ApprovalProviderList{}
	if err := c.List(ctx, aps, client.MatchingFields{field: value}); err != nil {
		return nil, err
	}
	for i := range aps.Items {
		ap := &aps.Items[i]
		out = append(out, Claim{Key{Kind: tg.KindApprovalProvider, Namespace: ap.Namespace, Name: ap.Name}, ap})
	}
	caps := &tg.ClusterApprovalProviderList{}
	if err := c.List(ctx, caps, client.MatchingFields{field: value}); err != nil {
		return nil, err
	}
	for i := range caps.Items {
		cap := &caps.Items[i]
		out = append(out, Claim{Key{Kind: tg.KindClusterApprovalProvider, Name: cap.Name}, cap})
	}
	return out, nil
}
