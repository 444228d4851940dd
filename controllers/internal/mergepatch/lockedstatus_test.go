package mergepatch

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// LockedStatus sends the resourceVersion read and, of the status, only what changed (null for what
// went away): the apiserver refuses it with a Conflict if the object was written since.
func TestLockedStatus(t *testing.T) {
	for _, c := range []struct {
		name     string
		from, to string
		want     string
	}{
		{"a field changed", `{"observedGeneration":1,"tools":["a"]}`, `{"observedGeneration":2,"tools":["a"]}`,
			`{"metadata":{"resourceVersion":"42"},"status":{"observedGeneration":2}}`},
		{"a list is replaced whole", `{"conditions":[{"type":"Ready"}]}`, `{"conditions":[{"type":"Ready"},{"type":"Stalled"}]}`,
			`{"metadata":{"resourceVersion":"42"},"status":{"conditions":[{"type":"Ready"},{"type":"Stalled"}]}}`},
		{"a field went away", `{"instance":{"id":"i"},"observedGeneration":1}`, `{"observedGeneration":1}`,
			`{"metadata":{"resourceVersion":"42"},"status":{"instance":null}}`},
		{"from nothing", `{}`, `{"observedGeneration":1}`,
			`{"metadata":{"resourceVersion":"42"},"status":{"observedGeneration":1}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := LockedStatus([]byte(c.from), []byte(c.to), "42")
			if err != nil {
				t.Fatal(err)
			}
			if p.Type() != types.MergePatchType {
				t.Errorf("type %s, want a merge patch", p.Type())
			}
			data, err := p.Data(nil)
			if err != nil {
				t.Fatal(err)
			}
			var got any
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if gb, _ := json.Marshal(got); string(gb) != mustCompact(t, c.want) {
				t.Errorf("patch %s, want %s", data, c.want)
			}
		})
	}
}

func mustCompact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
