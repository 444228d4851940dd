package controllers

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// MaxArgumentsDepth bounds how deeply arguments may nest.
const MaxArgumentsDepth = 32

// rejection is bad input caught before asking a human.
type rejection struct {
	reason, message string
}

// pickTool returns the one Tool whose toolName is name, or a rejection naming the problem.
func pickTool(tools []tg.Tool, name, namespace string) (*tg.Tool, *rejection) {
	var found []*tg.Tool
	for i := range tools {
		if tools[i].Spec.ToolName == name && tools[i].DeletionTimestamp.IsZero() {
			found = append(found, &tools[i])
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, &rejection{tg.ReasonUnknownTool, fmt.Sprintf("spec.tool %q: no Tool in namespace %s has spec.toolName %q; ask an admin to create one, or fix spec.tool.", name, namespace, name)}
	default:
		names := make([]string, len(found))
		for i, t := range found {
			names[i] = t.Name
		}
		slices.Sort(names) // a stable message: status does not churn
		return nil, &rejection{tg.ReasonAmbiguousTool, fmt.Sprintf("spec.tool %q: Tools %s in namespace %s all have this toolName; an admin must keep only one.", name, strings.Join(names, ", "), namespace)}
	}
}

// checkArguments checks size and depth: an object of at most MaxArgumentsBytes, nested at most MaxArgumentsDepth.
func checkArguments(raw []byte) *rejection {
	if len(raw) > tg.MaxArgumentsBytes {
		return &rejection{tg.ReasonArgumentsTooLarge, fmt.Sprintf("spec.arguments is %d bytes serialized; the limit is %d bytes (64 KiB). Pass large data by reference (a URL or an object name) instead.", len(raw), tg.MaxArgumentsBytes)}
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return &rejection{tg.ReasonInvalidArguments, "spec.arguments must be a JSON object, e.g. {\"payment_id\": \"payment_123\"}."}
	}
	depth, maxDepth, inString, escaped := 0, 0, false, false
	for _, c := range trimmed {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			maxDepth = max(maxDepth, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	if maxDepth > MaxArgumentsDepth {
		return &rejection{tg.ReasonInvalidArguments, fmt.Sprintf("spec.arguments nests %d levels deep; at most %d are allowed. Flatten the arguments.", maxDepth, MaxArgumentsDepth)}
	}
	return nil
}

// toolCache holds what the controller derives from a Tool, for one generation of it: the compiled
// argumentsSchema, and whether its Job template passed the server-side dry run. A Tool change
// (a new generation) starts afresh.
type toolCache struct {
	mu    sync.Mutex
	tools map[types.UID]*toolFacts
}

type toolFacts struct {
	generation    int64
	compiled      bool
	schema        *jsonschema.Schema
	schemaErr     error
	templateValid bool
}

// facts returns the entry for tool's current generation; the caller holds c.mu.
func (c *toolCache) facts(tool *tg.Tool) *toolFacts {
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

// schema compiles the Tool's argumentsSchema once per generation.
func (c *toolCache) schema(tool *tg.Tool) (*jsonschema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.facts(tool)
	if !f.compiled {
		f.schema, f.schemaErr = compileSchema(tool)
		f.compiled = true
	}
	return f.schema, f.schemaErr
}

// templateChecked reports whether this generation's Job template already passed the dry run.
func (c *toolCache) templateChecked(tool *tg.Tool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.facts(tool).templateValid
}

// templatePassed records that this generation's Job template passed the dry run.
func (c *toolCache) templatePassed(tool *tg.Tool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.facts(tool).templateValid = true
}

func compileSchema(tool *tg.Tool) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(tool.Spec.ArgumentsSchema.Raw))
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("toolgate://%s/%s/argumentsSchema.json", tool.Namespace, tool.Name)
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// validateArguments checks arguments against the Tool's argumentsSchema, if it has one.
func (c *toolCache) validateArguments(tool *tg.Tool, raw []byte) *rejection {
	if tool.Spec.ArgumentsSchema == nil || len(tool.Spec.ArgumentsSchema.Raw) == 0 {
		return nil
	}
	schema, err := c.schema(tool)
	if err != nil {
		return &rejection{tg.ReasonInvalidTool, fmt.Sprintf("Tool %s has an invalid spec.argumentsSchema (%v); an admin must fix it.", tool.Name, err)}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return &rejection{tg.ReasonInvalidArguments, fmt.Sprintf("spec.arguments is not valid JSON: %v", err)}
	}
	if err := schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		detail := err.Error()
		if errors.As(err, &ve) {
			detail = flattenValidation(ve)
		}
		return &rejection{tg.ReasonInvalidArguments, fmt.Sprintf("spec.arguments do not match Tool %s's argumentsSchema: %s", tool.Name, detail)}
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

func executionTimeout(tool *tg.Tool) time.Duration {
	if tool.Spec.ExecutionTimeout != nil && tool.Spec.ExecutionTimeout.Duration > 0 {
		return tool.Spec.ExecutionTimeout.Duration
	}
	d, _ := time.ParseDuration(tg.DefaultExecutionTimeout)
	return d
}
