package lifecycle

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The receiver reads back the ToolCall a request was submitted for from the context the manager
// encoded: one type both ways.
func TestContextToolCallReadsWhatRequestContextWrote(t *testing.T) {
	tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "refund-1", UID: "c0ffee00-0000-4000-8000-000000000001",
		Annotations: map[string]string{tg.AnnotationToolGeneration: "3", tg.AnnotationToolName: "issue-refund"}}}
	raw, err := requestContext(tc, ReadRecord(tc))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		raw     json.RawMessage
		wantKey types.NamespacedName
		wantUID types.UID
		wantOK  bool
	}{
		{name: "as encoded", raw: raw, wantKey: types.NamespacedName{Namespace: "payments", Name: "refund-1"}, wantUID: tc.UID, wantOK: true},
		{name: "not echoed", raw: nil},
		{name: "another shape", raw: json.RawMessage(`{"namespace":"payments"}`)},
		{name: "not JSON", raw: json.RawMessage(`{`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			key, uid, ok := ContextToolCall(c.raw)
			if key != c.wantKey || uid != c.wantUID || ok != c.wantOK {
				t.Errorf("ContextToolCall(%s) = %v, %q, %v; want %v, %q, %v", c.raw, key, uid, ok, c.wantKey, c.wantUID, c.wantOK)
			}
		})
	}
}
