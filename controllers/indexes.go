package controllers

import (
	"context"
	"fmt"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providers"
)

// Every field index of the manager's cache: its name, what it indexes, and its one registration
// (registerIndexes). A call finds its Tool and a changed Tool its waiting calls by name; the receiver
// finds provider objects by registration and instance, and calls by request id; a provider object
// finds the calls accepted with it.
const (
	// toolNameField indexes Tools by spec.toolName.
	toolNameField = "spec.toolName"
	// toolCallToolField indexes ToolCalls by spec.tool.
	toolCallToolField = "spec.tool"
	// registrationField indexes provider objects by the registration ids of their delivery status.
	registrationField = "toolgate.dev/webhook-registration"
	// instanceField indexes provider objects by the instances they hold (status.instance, the
	// replaced ones) and their registrations are for.
	instanceField = "toolgate.dev/webhook-instance"
	// requestIDField indexes ToolCalls by their request id; only the receiver uses it.
	requestIDField = "toolgate.dev/request-id"
)

// registerIndexes registers every index with mgr's cache; the request id index only when the
// receiver runs.
func registerIndexes(mgr ctrl.Manager, receiverOn bool) error {
	indexes := []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&tg.Tool{}, toolNameField, func(o client.Object) []string { return []string{o.(*tg.Tool).Spec.ToolName} }},
		{&tg.ToolCall{}, toolCallToolField, func(o client.Object) []string { return []string{o.(*tg.ToolCall).Spec.Tool} }},
		{&tg.ToolCall{}, providers.ToolCallsField, providers.IndexToolCalls},
		{&tg.ApprovalProvider{}, registrationField, indexProvidersByRegistration},
		{&tg.ApprovalProvider{}, instanceField, indexProvidersByInstance},
		{&tg.ClusterApprovalProvider{}, registrationField, indexProvidersByRegistration},
		{&tg.ClusterApprovalProvider{}, instanceField, indexProvidersByInstance},
	}
	if receiverOn {
		indexes = append(indexes, struct {
			obj   client.Object
			field string
			fn    client.IndexerFunc
		}{&tg.ToolCall{}, requestIDField, indexToolCallsByRequestID})
	}
	for _, ix := range indexes {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}

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

func indexProvidersByRegistration(o client.Object) []string {
	var out []string
	for _, r := range deliveryRegistrations(o) {
		out = append(out, r.RegistrationID)
	}
	return out
}

func indexProvidersByInstance(o client.Object) []string {
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

func indexToolCallsByRequestID(o client.Object) []string {
	if id := o.(*tg.ToolCall).Status.RequestID; id != "" {
		return []string{id}
	}
	return nil
}
