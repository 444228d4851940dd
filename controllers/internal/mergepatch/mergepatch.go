// Package mergepatch writes a ToolCall's status and an object's finalizers as JSON merge patches
// computed from the part they change. Toolgate's controllers write status and finalizers one way: a
// merge patch from what was read (Status for ToolCalls, whose writes are the hot path, and
// LockedStatus for the objects with a Ready condition, which readiness.Writer writes), and finalizers
// with Finalizers, under optimistic locking.
package mergepatch

import (
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The two writes every decision makes to its ToolCall send what client.MergeFrom would, computed
// from the part they change. client.MergeFrom serialises both whole objects and decodes them again
// to diff them, which at many pending calls is a large share of what the manager allocates per
// decision (see docs/performance.md).

// Status is client.MergeFrom for a write of a ToolCall's status subresource, which applies
// the status alone: the merge patch from the status as it was read (from, which the caller does not
// change afterwards) to the written call's.
func Status(from tg.ToolCallStatus) client.Patch {
	return statusPatch{from: from}
}

type statusPatch struct{ from tg.ToolCallStatus }

func (statusPatch) Type() types.PatchType { return types.MergePatchType }

func (p statusPatch) Data(obj client.Object) ([]byte, error) {
	tc, ok := obj.(*tg.ToolCall)
	if !ok {
		return nil, fmt.Errorf("a status patch of a ToolCall applied to a %T", obj)
	}
	from, err := json.Marshal(p.from)
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(tc.Status)
	if err != nil {
		return nil, err
	}
	status, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]json.RawMessage{"status": status})
}

// Finalizers is client.MergeFromWithOptimisticLock for a change of obj's finalizers alone: it
// sets them as obj has them now, and fails with a conflict if obj was written since it was read.
func Finalizers(obj client.Object) (client.Patch, error) {
	var finalizers []string // null: none left
	if f := obj.GetFinalizers(); len(f) > 0 {
		finalizers = f
	}
	data, err := json.Marshal(map[string]map[string]any{"metadata": {
		"finalizers":      finalizers,
		"resourceVersion": obj.GetResourceVersion(),
	}})
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

// LockedStatus is client.MergeFromWithOptimisticLock for a write of a status subresource: the merge
// patch from the status as read (from, its JSON) to the status to write (to, its JSON), carrying
// resourceVersion, the object's as read, so that the apiserver refuses it with a Conflict if the
// object was written since.
func LockedStatus(from, to []byte, resourceVersion string) (client.Patch, error) {
	status, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]string{"resourceVersion": resourceVersion},
		"status":   json.RawMessage(status),
	})
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, data), nil
}
