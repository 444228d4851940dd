package controllers

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providers"
	"toolgate.dev/toolgate/controllers/receiver"
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
		{&tg.ApprovalProvider{}, providers.RegistrationField, providers.IndexByRegistration},
		{&tg.ApprovalProvider{}, providers.InstanceField, providers.IndexByInstance},
		{&tg.ClusterApprovalProvider{}, providers.RegistrationField, providers.IndexByRegistration},
		{&tg.ClusterApprovalProvider{}, providers.InstanceField, providers.IndexByInstance},
	}
	if receiverOn {
		indexes = append(indexes, struct {
			obj   client.Object
			field string
			fn    client.IndexerFunc
		}{&tg.ToolCall{}, receiver.RequestIDField, receiver.IndexToolCallsByRequestID})
	}
	for _, ix := range indexes {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}
