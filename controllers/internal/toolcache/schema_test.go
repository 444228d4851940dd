package toolcache

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

func toolWithSchema(uid, schema string) *tg.Tool {
	tool := &tg.Tool{}
	tool.UID, tool.Generation, tool.Name, tool.Namespace = "tool-"+types.UID(uid), 1, uid, "payments"
	tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(schema)}
	return tool
}

// A schema loads nothing from outside itself: whatever URL it names (a file, the network, a
// relative reference resolved against its own or a forged $id, a $schema that is not a draft's), the
// compile fails at once with a message that names the field and the fix, and no file or server is
// read. A reference to its own parts, and a draft's metaschema, compile.
func TestSchemaLoadsNothingFromOutsideItself(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type":"object","title":"manager-secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(dir, "token")
	if err := os.WriteFile(notJSON, []byte("Xsecret-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	web := newCountingServer(t, &hits)

	for _, c := range []struct {
		name, schema string
		ok           bool
	}{
		{"own $defs", `{"type":"object","properties":{"amount":{"$ref":"#/$defs/amount"}},"$defs":{"amount":{"type":"integer"}}}`, true},
		{"draft metaschema", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`, true},
		{"draft-07 metaschema", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, true},
		{"file json", `{"$ref":"file://` + secret + `"}`, false},
		{"file not json", `{"$ref":"file://` + notJSON + `"}`, false},
		{"file fifo", `{"$ref":"file://` + fifo + `"}`, false},
		{"http", `{"$ref":"` + web + `/schema.json"}`, false},
		{"https", `{"$ref":"https://schemas.example.com/amount.json"}`, false},
		{"relative", `{"$ref":"amount.json"}`, false},
		{"relative in a property", `{"type":"object","properties":{"a":{"$ref":"../other/argumentsSchema.json"}}}`, false},
		{"$id to files then relative", `{"$id":"file://` + dir + `/","$ref":"secret.json"}`, false},
		{"nested $id to the web", `{"properties":{"a":{"$id":"` + web + `/x/","$ref":"y.json"}}}`, false},
		{"$dynamicRef", `{"$dynamicRef":"file://` + secret + `#meta"}`, false},
		{"$schema on a file", `{"$schema":"file://` + secret + `","type":"object"}`, false},
		{"$schema on the web", `{"$schema":"` + web + `/meta.json","type":"object"}`, false},
		{"$schema fifo", `{"$schema":"file://` + fifo + `"}`, false},
		{"unknown scheme", `{"$ref":"ftp://example.com/a.json"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				var cache Cache
				_, err := cache.Schema(toolWithSchema(strings.ReplaceAll(c.name, " ", "-"), c.schema))
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the compile did not return: it is reading from outside the schema")
			}
			if c.ok {
				if err != nil {
					t.Fatalf("want it to compile, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("compiled: it loaded something from outside itself")
			}
			msg := err.Error()
			for _, want := range []string{"spec.argumentsSchema may refer only to its own parts", "put the referenced schema under $defs"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
			for _, leak := range []string{"manager-secret", "'X'", "secret-token"} {
				if strings.Contains(msg, leak) {
					t.Errorf("message %q shows the content of a file", msg)
				}
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the web server was asked %d times", n)
	}
}

// A schema over MaxSchemaBytes is not compiled; the message names the field and the limit.
func TestSchemaSizeIsBounded(t *testing.T) {
	big := `{"type":"object","description":"` + strings.Repeat("a", MaxSchemaBytes) + `"}`
	var cache Cache
	_, err := cache.Schema(toolWithSchema("big", big))
	if err == nil || !strings.Contains(err.Error(), "spec.argumentsSchema is") || !strings.Contains(err.Error(), "over the limit of 262144") {
		t.Fatalf("want the size refused, got %v", err)
	}
}

// newCountingServer is an HTTP server that serves a schema and counts its requests.
func newCountingServer(t *testing.T, hits *atomic.Int32) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"type":"object"}`))
	}))
	t.Cleanup(s.Close)
	return s.URL
}
