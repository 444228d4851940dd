package controllers

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/receiver"
	"toolgate.dev/toolgate/controllers/toolcalls"
)

// Every field index of the manager's cache is registered here, once (registerIndexes); its name is
// declared by the package that reads it. A call finds its Tool and a changed Tool its waiting calls
// by name (toolcall); the receiver finds provider objects by registration and instance (providers),
// and calls by request id (receiver); a provider object finds the calls accepted with it
// (providers).

// registerIndexes registers every index with mgr's cache; the request id index only when the
// receiver runs, and those of ClusterApprovalProviders only when the manager uses them (an index
// starts the kind's informer).
func registerIndexes(mgr ctrl.Manager, receiverOn, clusterProviders bool) error {
	type index struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}
	indexes := []index{
		{&tg.Tool{}, toolcalls.ToolNameField, func(o client.Object) []string { return []string{o.(*tg.Tool).Spec.ToolName} }},
		{&tg.ToolCall{}, toolcalls.ToolCallToolField, func(o client.Object) []string { return []string{o.(*tg.ToolCall).Spec.Tool} }},
		{&tg.ToolCall{}, providercache.ToolCallsField, providercache.IndexToolCalls},
		{&tg.ApprovalProvider{}, providercache.RegistrationField, providercache.IndexByRegistration},
		{&tg.ApprovalProvider{}, providercache.InstanceField, providercache.IndexByInstance},
	}
	if clusterProviders {
		indexes = append(indexes, index{&tg.ClusterApprovalProvider{}, providercache.RegistrationField, providercache.IndexByRegistration},
			index{&tg.ClusterApprovalProvider{}, providercache.InstanceField, providercache.IndexByInstance})
	}
	if receiverOn {
		indexes = append(indexes, index{&tg.ToolCall{}, receiver.RequestIDField, receiver.IndexToolCallsByRequestID})
	}
	for _, ix := range indexes {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}
