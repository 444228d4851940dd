package providercache

import (
	"testing"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Each provider has its own label, and an object named default is not the manager's own provider.
func TestLabel(t *testing.T) {
	for _, c := range []struct {
		key  Key
		want string
	}{
		{Flags, "default"},
		{Key{Kind: tg.KindApprovalProvider, Namespace: "team-a", Name: "default"}, "ApprovalProvider/team-a/default"},
		{Key{Kind: tg.KindApprovalProvider, Namespace: "team-b", Name: "default"}, "ApprovalProvider/team-b/default"},
		{Key{Kind: tg.KindClusterApprovalProvider, Name: "default"}, "ClusterApprovalProvider/default"},
	} {
		if got := c.key.Label(); got != c.want {
			t.Errorf("%v.Label() = %q, want %q", c.key, got, c.want)
		}
	}
}

// A call waits asynchronously only when its provider object's active registration is for the
// instance its request lives in.
func TestDeliversTo(t *testing.T) {
	active := &tg.ApprovalProvider{Status: tg.ApprovalProviderStatus{Delivery: &tg.DeliveryStatus{Active: &tg.WebhookRegistration{InstanceID: "inst-2"}}}}
	for _, c := range []struct {
		name     string
		obj      tg.GenericProvider
		instance string
		want     bool
	}{
		{"its active registration's instance", active, "inst-2", true},
		{"an instance it replaced", active, "inst-1", false},
		{"a call that names no instance", active, "", false},
		{"a provider with no delivery", &tg.ApprovalProvider{}, "inst-2", false},
		{"a delivery only proposed", &tg.ApprovalProvider{Status: tg.ApprovalProviderStatus{Delivery: &tg.DeliveryStatus{Proposed: &tg.WebhookRegistration{InstanceID: "inst-2"}}}}, "inst-2", false},
	} {
		if got := DeliversTo(c.obj, c.instance); got != c.want {
			t.Errorf("%s: DeliversTo = %v, want %v", c.name, got, c.want)
		}
	}
}
