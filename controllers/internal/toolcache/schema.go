package toolcache

import (
	"bytes"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// MaxSchemaBytes bounds a Tool's argumentsSchema, as JSON: far above any tool's real schema (an MCP
// server's inputSchema is kept to 64 KiB by default), and small enough that compiling it, and
// validating each call's arguments against it, costs little.
const MaxSchemaBytes = 256 << 10

// compileSchema compiles the Tool's argumentsSchema on its own: every URL it refers to, by $ref,
// $dynamicRef, $schema or a relative reference resolved against an $id, must be a part of the schema
// itself. Only the JSON Schema drafts' own metaschemas, which the library embeds, are found outside
// it (for $schema); nothing is read from the manager's files or the network.
func compileSchema(tool *tg.Tool) (*jsonschema.Schema, error) {
	raw := tool.Spec.ArgumentsSchema.Raw
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("spec.argumentsSchema is %d bytes, over the limit of %d: keep the schema to the arguments' shape", len(raw), MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("toolgate://%s/%s/argumentsSchema.json", tool.Namespace, tool.Name)
	c := jsonschema.NewCompiler()
	c.UseLoader(ownPartsOnly{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// ownPartsOnly is the schema compiler's loader: it refuses every URL (file, http, https, a relative
// reference, any scheme), so that a schema loads nothing from outside itself. The library calls it
// only for a URL the schema does not hold and that is not a draft's metaschema.
type ownPartsOnly struct{}

func (ownPartsOnly) Load(string) (any, error) {
	return nil, errOutside
}

var errOutside = fmt.Errorf("spec.argumentsSchema may refer only to its own parts, such as \"#/$defs/amount\": " +
	"nothing is loaded from files or the network; put the referenced schema under $defs and refer to it there")
