package lifecycle

import (
	"encoding/json"
	"strings"
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
	raw, err := requestContext(tc, ReadRecord(tc), nil)
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

// The preview goes into the context under "preview", the same bytes every time: a JSON output as
// the value itself (compacted), a text output as a string, a failure as its error.
func TestRequestContextCarriesThePreview(t *testing.T) {
	tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "refund-1", UID: "c0ffee00-0000-4000-8000-000000000001"}}
	for _, c := range []struct {
		name    string
		preview *tg.PreviewRecord
		want    string // the context's preview member; "" for none
		err     string
	}{
		{name: "none", preview: nil, want: ""},
		{name: "json", preview: &tg.PreviewRecord{Format: tg.PreviewFormatJSON, Output: "{ \"amount\": 4900,\n \"to\": \"<b>x</b>\" }", Digest: "sha256:ab", Image: "img:1", ImageID: "img@sha256:cd"},
			want: `{"source":"tool","format":"json","output":{"amount":4900,"to":"\u003cb\u003ex\u003c/b\u003e"},"digest":"sha256:ab","image":"img:1","image_id":"img@sha256:cd"}`},
		{name: "text", preview: &tg.PreviewRecord{Format: tg.PreviewFormatText, Output: "3 to add, \"0\" to destroy", Digest: "sha256:ef", Image: "img:1"},
			want: `{"source":"tool","format":"text","output":"3 to add, \"0\" to destroy","digest":"sha256:ef","image":"img:1"}`},
		{name: "failed", preview: &tg.PreviewRecord{Error: "the preview Job failed: BackoffLimitExceeded", Image: "img:1"},
			want: `{"source":"tool","image":"img:1","failed":true,"error":"the preview Job failed: BackoffLimitExceeded"}`},
		{name: "json record that is not JSON", preview: &tg.PreviewRecord{Format: tg.PreviewFormatJSON, Output: "{"}, err: "not JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, err := requestContext(tc, ReadRecord(tc), c.preview)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("requestContext: error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]json.RawMessage
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			if got := string(body["preview"]); got != c.want {
				t.Errorf("context preview = %s\nwant              %s", got, c.want)
			}
			again, _ := requestContext(tc, ReadRecord(tc), c.preview)
			if string(again) != string(raw) {
				t.Errorf("a second rendering differs: %s vs %s", again, raw)
			}
		})
	}
}
