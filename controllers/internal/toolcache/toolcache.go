// Package toolcache holds what Toolgate's controllers derive from each Tool generation: its compiled
// argumentsSchema, whether its Job template passed the server-side dry run, and its compiled approval
// rules. The ToolCall and Tool controllers share one Cache.
package toolcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/policy"
)

// Cache holds what the controllers derive from a Tool, for one generation of it: the compiled
// argumentsSchema, whether its Job template passed the server-side dry run, and its compiled approval
// rules. A Tool change (a new generation) starts afresh, and a deleted Tool is forgotten. The ToolCall
// and Tool controllers share one, so that a generation's rules are compiled once, by whichever needs
// them first. The cache's lock only finds a generation's entry: each entry compiles its schema and
// rules under its own sync.Once, so that a Tool whose schema or rules are slow to compile delays the
// reconciles of that Tool only.
type Cache struct {
	compiler *policy.Compiler
	mu       sync.Mutex
	tools    map[types.UID]*toolFacts
}

type toolFacts struct {
	generation    int64
	templateValid bool // guarded by Cache.mu

	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error

	rulesOnce sync.Once
	rules     *policy.Rules
	rulesErr  error

	previewOnce sync.Once
	preview     *batchv1.JobTemplateSpec
	previewErr  error
}

func New(limits policy.Limits) (*Cache, error) {
	c, err := policy.NewCompiler(limits)
	if err != nil {
		return nil, fmt.Errorf("building the approval rules' CEL environment: %w", err)
	}
	return &Cache{compiler: c, tools: map[types.UID]*toolFacts{}}, nil
}

// entry returns the entry for tool's current generation, holding c.mu only to find it.
func (c *Cache) entry(tool *tg.Tool) *toolFacts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.facts(tool)
}

// facts returns the entry for tool's current generation; the caller holds c.mu.
func (c *Cache) facts(tool *tg.Tool) *toolFacts {
	f, ok := c.tools[tool.UID]
	if !ok || f.generation != tool.Generation {
		if c.tools == nil {
			c.tools = map[types.UID]*toolFacts{}
		}
		f = &toolFacts{generation: tool.Generation}
		c.tools[tool.UID] = f
	}
	return f
}

// Rules returns the Tool's compiled approval rules, or the compiler's message for every rule that
// does not compile.
func (c *Cache) Rules(tool *tg.Tool) (*policy.Rules, error) {
	f := c.entry(tool)
	f.rulesOnce.Do(func() { f.rules, f.rulesErr = c.compiler.Compile(tool.Spec.Approval) })
	return f.rules, f.rulesErr
}

// PreviewTemplate is the Job template of the Tool's preview, decoded once per generation:
// spec.preview.jobTemplate, or spec.jobTemplate when it has none. A template that does not decode as
// a batch/v1 JobTemplateSpec (an unknown field, a wrong type, no container) is an error that names
// the field. The Tool must have a spec.preview.
func (c *Cache) PreviewTemplate(tool *tg.Tool) (*batchv1.JobTemplateSpec, error) {
	f := c.entry(tool)
	f.previewOnce.Do(func() { f.preview, f.previewErr = decodePreviewTemplate(tool) })
	return f.preview, f.previewErr
}

func decodePreviewTemplate(tool *tg.Tool) (*batchv1.JobTemplateSpec, error) {
	p := tool.Spec.Preview
	if p == nil || p.JobTemplate == nil || len(p.JobTemplate.Raw) == 0 {
		return tool.Spec.JobTemplate.DeepCopy(), nil
	}
	t := &batchv1.JobTemplateSpec{}
	dec := json.NewDecoder(bytes.NewReader(p.JobTemplate.Raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(t); err != nil {
		return nil, fmt.Errorf("spec.preview.jobTemplate is not a Job template (batch/v1 JobTemplateSpec): %v; write it as spec.jobTemplate is written, or leave it out to preview with spec.jobTemplate", err)
	}
	if len(t.Spec.Template.Spec.Containers) == 0 {
		return nil, errors.New("spec.preview.jobTemplate has no container (spec.template.spec.containers is empty); its first container's termination message is the preview's output")
	}
	return t, nil
}

// Forget drops a deleted Tool.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tools, uid)
}

// Schema compiles the Tool's argumentsSchema once per generation.
func (c *Cache) Schema(tool *tg.Tool) (*jsonschema.Schema, error) {
	f := c.entry(tool)
	f.schemaOnce.Do(func() { f.schema, f.schemaErr = compileSchema(tool) })
	return f.schema, f.schemaErr
}

// TemplateChecked reports whether this generation's Job template already passed the dry run.
func (c *Cache) TemplateChecked(tool *tg.Tool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.facts(tool).templateValid
}

// TemplatePassed records that this generation's Job template passed the dry run.
func (c *Cache) TemplatePassed(tool *tg.Tool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.facts(tool).templateValid = true
}

// ValidateArguments checks arguments against the Tool's argumentsSchema, if it has one.
func (c *Cache) ValidateArguments(tool *tg.Tool, raw []byte) *lifecycle.Status {
	if tool.Spec.ArgumentsSchema == nil || len(tool.Spec.ArgumentsSchema.Raw) == 0 {
		return nil
	}
	schema, err := c.Schema(tool)
	if err != nil {
		return lifecycle.SchemaInvalid.Status(tool.Name, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return lifecycle.ArgumentsNotJSON.Status(err)
	}
	if err := schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		detail := err.Error()
		if errors.As(err, &ve) {
			detail = flattenValidation(ve)
		}
		return lifecycle.ArgumentsDoNotMatchSchema.Status(tool.Name, detail)
	}
	return nil
}

// flattenValidation turns a validation error tree into "at /amount: must be >= 1; at /currency: ...".
func flattenValidation(ve *jsonschema.ValidationError) string {
	var parts []string
	for _, u := range ve.BasicOutput().Errors {
		if u.Error == nil {
			continue
		}
		msg := u.Error.String()
		if msg == "" || strings.HasPrefix(msg, "validation failed") {
			continue
		}
		loc := u.InstanceLocation
		if loc == "" {
			loc = "/"
		}
		parts = append(parts, fmt.Sprintf("at %s: %s", loc, msg))
	}
	if len(parts) == 0 {
		return ve.Error()
	}
	return strings.Join(parts, "; ")
}
